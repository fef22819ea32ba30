"""Everything that crosses slurmscale's boundary, fuzzed (hypothesis): hostlists and resume
files Slurm hands the hooks, whole hook calls, config files, EC2 event messages. Each either
parses or fails with its own error type naming what is wrong — never another exception —
and a refused input records nothing."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from slurmscale.config import ConfigError
from slurmscale.config_file import parse_config
from slurmscale.daemon.passes.interruptions import InterruptionPass
from slurmscale.hooks import EXIT_BAD_INPUT, EXIT_OK, BadInput, build_request, run_hook
from slurmscale.hookview import fresh_view
from slurmscale.hostlists import HostlistError, expand
from slurmscale.model import QueueJob, SlurmNode
from slurmscale.slurm.resume_file import ResumeFileError, parse_resume_file
from slurmscale.spool import RequestKind
from tests.support.eventbridge_messages import ec2_event
from tests.support.fakes import FakeQueue, FakeSlurm, pass_context
from tests.unit.conftest import base_config
from tests.unit.test_interruptions import store_with_spot_instance

FIXTURE_OK = [HealthCheck.function_scoped_fixture]

# hostlist-shaped text: mostly the characters Slurm uses, so the parser's corners are reached,
# and digits Python calls digits that Slurm does not (full-width, Arabic-Indic, superscript)
hostlists = st.text(alphabet="spotd-0123456789[],- x", min_size=0, max_size=30) | st.text(
    alphabet="spot-[]0123456789\uff11\uff12\u0663\u00b2\u00b3", max_size=20) | st.text(
    max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**12) | st.text(max_size=20)
    | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([1e300, -0.0, 1e-300]),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=12), c, max_size=4),
    max_leaves=10)


GOOD_NODES = st.sampled_from(["spot-[1-2]", "spot-1", "od-[1-2]", "spot-[1-8]"])
GOOD_CALL = ("spot-[1-2]", '{"jobs": [{"job_id": 7, "nodes": "spot-[1-2]"}], '
             '"all_nodes": "spot-[1-2]"}')


def _resume_files() -> st.SearchStrategy[str]:
    """Slurm's two spellings (22.05 nodes/all_nodes, 23.02+ *_resume), good and bad values."""
    nodes = GOOD_NODES | hostlists
    job = st.builds(lambda jid, key, n, extra: {"job_id": jid, key: n, **extra},
                    st.integers(-1, 10**9) | st.text(max_size=5),
                    st.sampled_from(["nodes", "nodes_resume"]), nodes | st.none(),
                    st.dictionaries(st.sampled_from(["partition", "extra"]), json_values,
                                    max_size=1))
    doc = st.builds(lambda jobs, key, n: {"jobs": jobs, key: n},
                    st.lists(job, max_size=3) | json_values,
                    st.sampled_from(["all_nodes", "all_nodes_resume"]), nodes | json_values)
    return doc.map(json.dumps) | json_values.map(json.dumps) | st.text(max_size=40)


@given(hostlists)
@example("spot-\uff11")
@example("spot-\u0663")
@example("spot-\u00b2")
def test_any_hostlist_expands_to_clean_names_or_is_refused(expr: str) -> None:
    try:
        names = expand(expr)
    except HostlistError as e:
        assert str(e)
        return
    assert names and all(n and n == n.strip() and not set(n) & set("[], ") and n.isascii()
                         for n in names)


def test_a_huge_hostlist_is_refused_not_expanded() -> None:
    with pytest.raises(HostlistError):
        expand("spot-[1-100000000]")


@given(_resume_files())
def test_any_resume_file_parses_or_is_refused_by_name(text: str) -> None:
    try:
        rf = parse_resume_file(text)
    except ResumeFileError as e:
        assert str(e)
        return
    assert all(j.nodes for j in rf.jobs)


CFG = parse_config(base_config())


@settings(max_examples=300)
@given(GOOD_NODES | hostlists, st.none() | _resume_files())
@example(*GOOD_CALL)
def test_a_hook_call_is_validated_whole(expr: str, resume: str | None) -> None:
    cfg = CFG
    try:
        nodes, _ = build_request(cfg, RequestKind.RESUME, [expr], resume)
    except BadInput as e:
        assert str(e)
        return
    assert nodes and all(cfg.pool_of(n) is not None for n in nodes)


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE_OK)
@given(GOOD_NODES | hostlists, st.none() | _resume_files())
@example(*GOOD_CALL)
def test_a_refused_hook_records_nothing_an_accepted_one_exactly_one_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, expr: str, resume: str | None) -> None:
    spool = tmp_path / f"spool-{os.urandom(6).hex()}"
    d = base_config(spool_dir=str(spool), socket_path=str(tmp_path / "none.sock"),
                    hook_log_file=str(tmp_path / "hooks.log"), log_file=None)
    conf = tmp_path / "slurmscale.yaml"
    conf.write_text(yaml.safe_dump(d))
    conf.chmod(0o644)
    rf = tmp_path / "resume.json"
    if resume is None:
        monkeypatch.delenv("SLURM_RESUME_FILE", raising=False)
    else:
        rf.write_text(resume)
        monkeypatch.setenv("SLURM_RESUME_FILE", str(rf))
    root = logging.getLogger("slurmscale")
    before = list(root.handlers)
    try:
        rc = run_hook(RequestKind.RESUME, [expr], str(conf))
    finally:
        for h in root.handlers[len(before):]:
            h.close()
            root.removeHandler(h)
    recorded = list(spool.rglob("*.json")) if spool.exists() else []
    assert rc in (EXIT_OK, EXIT_BAD_INPUT)
    assert len(recorded) == (1 if rc == EXIT_OK else 0), (rc, recorded)


def _config_paths(d: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(d, dict):
        for k, v in d.items():
            out += _config_paths(v, (*prefix, k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            out += _config_paths(v, (*prefix, i))
    return out


VALID = base_config(spot={"on_demand_buffer": 0.2}) | {"daemon": {"tick_seconds": 10}}
VALID_PATHS = _config_paths(VALID)


@settings(max_examples=300)
@given(st.lists(st.tuples(st.sampled_from(VALID_PATHS), json_values), min_size=1, max_size=3))
def test_any_config_edit_loads_or_fails_with_a_message_naming_the_key(
        edits: list[tuple[tuple, Any]]) -> None:
    d = json.loads(json.dumps(VALID))
    for path, value in edits:
        node = d
        try:
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    try:
        cfg = parse_config(d)
    except ConfigError as e:
        assert str(e).startswith("invalid config"), str(e)
        return
    import math

    def finite(v: Any) -> bool:
        if isinstance(v, float):
            return math.isfinite(v)
        if isinstance(v, dict):
            return all(finite(x) for x in v.values())
        if isinstance(v, list | tuple):
            return all(finite(x) for x in v)
        return True
    assert finite(cfg.model_dump()), "an accepted config holds no inf or nan"


T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def interruption_world(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("fuzz-sqs")
    cfg = parse_config(base_config(store_url=f"sqlite:///{tmp / 'state.db'}"))
    store = store_with_spot_instance(cfg.store_url)
    yield cfg, store
    store.close()


messages = (json_values.map(json.dumps) | st.text(max_size=60) | st.builds(
    lambda t, i, extra: ec2_event(t, i, **extra),
    st.sampled_from(["EC2 Spot Instance Interruption Warning",
                     "EC2 Instance Rebalance Recommendation",
                     "EC2 Instance State-change Notification", "EC2 AMI State Change"]),
    st.sampled_from(["i-00000000000000ff", "i-zz", ""]),
    st.dictionaries(st.sampled_from(["state", "instance-action"]), json_values, max_size=2)))


@settings(max_examples=150, deadline=None)
@given(st.lists(messages, min_size=1, max_size=4))
def test_any_sqs_message_is_consumed_without_touching_our_instances(
        interruption_world, bodies: list[str]) -> None:
    cfg, store = interruption_world
    slurm = FakeSlurm(table={"spot-1": SlurmNode("spot-1", "ALLOCATED+CLOUD", "127.0.0.1",
                                                 "spot-1")})
    slurm.queue = [QueueJob("42", ("gpu-spot",), 1, 8, 3600, "2026-11-29T11:00:00", "None",
                            100, "alice", "RUNNING", nodelist="spot-1")]
    q = FakeQueue(bodies=list(bodies))
    p = InterruptionPass(pass_context(cfg, store, slurm, queue=q))
    assert p.run(T0) == len(bodies)
    assert len(q.deleted) == len(bodies), "every message deleted: none loops forever"
    assert slurm.calls == [] and store.preemptions() == [], "no message was about i-...01"


spool_values = st.one_of(
    st.none(), st.booleans(), st.integers(-10**30, 10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.lists(st.text(alphabet="spot-12\uff11\u00b2", max_size=8), max_size=3))


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({}, optional={
    "id": spool_values | st.just("1796026821727-57652a53acac"),
    "kind": spool_values | st.sampled_from(["resume", "suspend"]),
    "nodes": spool_values | st.just(["spot-1"]), "hostlist": spool_values,
    "resume_file": spool_values, "received_at": spool_values | st.just(1.0)}))
def test_any_spool_file_parses_to_a_sane_request_or_is_refused(d: dict[str, Any]) -> None:
    from slurmscale.spool import LATEST_TIME, SpooledRequest

    try:
        req = SpooledRequest.from_json(json.dumps(d))
    except (ValueError, KeyError, TypeError):
        return
    assert 0 <= req.received_at <= LATEST_TIME and req.nodes
    assert all(n.isascii() for n in req.nodes)


numbers = st.one_of(st.integers(-10, 10**12).map(str),
                    st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.sampled_from(["inf", "-inf", "nan", "1e300", "", "x", "\uff11", "1e3"]))


@settings(max_examples=200, deadline=None, suppress_health_check=FIXTURE_OK)
@given(st.lists(st.tuples(numbers, numbers, numbers, numbers), min_size=1, max_size=4))
def test_any_trace_row_loads_in_range_or_is_named_by_line(
        tmp_path: Path, rows: list[tuple[str, str, str, str]]) -> None:
    import math

    from slurmscale.sim.trace import MAX_SECONDS, TraceError, load_trace

    p = tmp_path / f"t-{os.urandom(4).hex()}.csv"
    p.write_text("job_id,submit_s,duration_s,gpus,nodes\n"
                 + "".join(f"j{i},{a},{b},{c},{d}\n" for i, (a, b, c, d) in enumerate(rows)),
                 encoding="utf-8")
    try:
        jobs = load_trace(p)
    except TraceError as e:
        assert "line " in str(e) or "lacks" in str(e), str(e)
        return
    for j in jobs:
        assert math.isfinite(j.submit_s) and 0 <= j.duration_s <= MAX_SECONDS and j.nodes >= 1


@settings(max_examples=200, suppress_health_check=FIXTURE_OK)
@given(st.binary(max_size=300) | st.builds(lambda d: json.dumps(d).encode(), st.dictionaries(
    st.sampled_from(["config_path", "config_sha256", "spool_dir", "socket_path", "pools",
                     "hook_log_file", "version", "format", "store_url_has_secret"]),
    st.none() | st.booleans() | st.integers() | st.text(max_size=5)
    | st.lists(st.lists(st.text(max_size=3) | st.integers(), max_size=3), max_size=2))))
def test_any_view_file_is_used_or_set_aside_never_a_crash(tmp_path, raw: bytes) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "c.yaml").write_text("cluster_name: x\n")
    (tmp_path / "v.json").write_bytes(raw)
    view, why = fresh_view(tmp_path / "c.yaml", tmp_path / "v.json")
    assert view is None and why
