"""Time to run, launch by launch (issue 67, item 1): the bootstrap's tag, the phases kept per
instance by the daemon's launch-phase pass, and what `report`, the metrics and `status`
make of them."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmscale import node_init
from slurmscale.cli_status import launches_in_flight
from slurmscale.cloud.protocol import CloudInstance
from slurmscale.config_file import parse_config
from slurmscale.daemon.metrics import Metrics
from slurmscale.daemon.passes.launch_phases import LaunchPhasePass
from slurmscale.model import SlurmNode
from slurmscale.report.compute import build_report
from slurmscale.report.render import to_csv, to_json, to_text
from slurmscale.report.time_to_run import (
    BOOT_FIELDS,
    PHASES,
    TAG_BOOT_TIMES,
    TOTALS,
    in_flight,
    parse_boot_times,
    summarize,
)
from slurmscale.spool import RequestKind
from slurmscale.store.memory import MemoryStore
from slurmscale.store.rows import InstanceRow, LaunchPhasesRow
from tests.support.fakes import FakeSlurm, pass_context
from tests.unit.conftest import base_config
from tests.unit.test_reconcile import hook, world  # noqa: F401 (a fixture)
from tests.unit.test_report import T0 as RT0
from tests.unit.test_report import filled  # noqa: F401 (a fixture)

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
T = T0.timestamp()


def test_the_daemon_reads_the_tag_the_bootstrap_writes() -> None:
    assert TAG_BOOT_TIMES == node_init.TAG_BOOT_TIMES
    assert tuple(BOOT_FIELDS) == node_init.BOOT_STEPS
    steps = {"os": T + 20, "start": T + 40.5, "tag": T + 41, "checked": T + 43.25,
             "slurmd": T + 44}
    assert parse_boot_times(node_init.boot_times(steps)) == {
        "os_s": T + 20, "bootstrap_s": T + 40.5, "tagged_s": T + 41, "checked_s": T + 43.25,
        "slurmd_s": T + 44}
    # a step not reached is left out, not written as anything
    assert node_init.boot_times({"start": T, "tag": T + 1}) == f"start={T:.2f},tag={T + 1:.2f}"


@given(st.text(max_size=300))
def test_any_tag_value_parses_to_known_fields_with_finite_times(value: str) -> None:
    """Anyone with CreateTags on the instance may write the tag: whatever it holds, what is
    read is known fields with finite, positive times, never an exception."""
    got = parse_boot_times(value)
    assert set(got) <= set(BOOT_FIELDS.values())
    assert all(math.isfinite(v) and v > 0 for v in got.values())


def test_the_bootstrap_tags_its_times_once_slurmd_started_and_not_with_no_report(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tagged: list[tuple[str, str]] = []
    monkeypatch.setattr(node_init, "tag_self",
                        lambda md, iid, region, key, value: tagged.append((key, value)))
    a = node_init.parse_args(["--cluster", "c", "--no-report"])
    facts = {"instance_id": "i-1", "region": "us-east-1"}
    node_init.tell_times(a, node_init.Metadata(), facts, {"start": T})
    assert tagged == []
    node_init.tell_times(node_init.parse_args(["--cluster", "c"]), node_init.Metadata(), facts,
                         {"start": T, "slurmd": T + 3})
    assert tagged == [(TAG_BOOT_TIMES, f"start={T:.2f},slurmd={T + 3:.2f}")]

    def refused(*_a: object) -> None:
        raise OSError("connection refused")
    monkeypatch.setattr(node_init, "tag_self", refused)
    node_init.tell_times(node_init.parse_args(["--cluster", "c"]), node_init.Metadata(), facts,
                         {"start": T})  # (costs the figures, never the join)


def _inst(n: int, launched: datetime = T0) -> InstanceRow:
    return InstanceRow(instance_id=f"i-{n:017x}", node=f"spot-{n}", pool="gpu-spot",
                       gang_id="g", instance_type="p5.48xlarge", lifecycle="spot",
                       launch_template_version="1", state="running", launched_at=launched)


def _world():  # type: ignore[no-untyped-def]
    cfg = parse_config(base_config())
    store = MemoryStore()
    metrics = Metrics()
    p = LaunchPhasePass(pass_context(cfg, store, FakeSlurm()), metrics)
    insts = [_inst(1), _inst(2)]
    store.put_launch_phases([LaunchPhasesRow(
        instance_id=i.instance_id, node=i.node, pool=i.pool, job_nodes=2, requested_s=T - 3,
        answered_s=T) for i in insts])
    return store, metrics, p, insts


def _seen(insts: list[InstanceRow], tag: str | None) -> list[CloudInstance]:
    return [CloudInstance(i.instance_id, "running", {TAG_BOOT_TIMES: tag} if tag else {},
                          launched_at=T0 - timedelta(seconds=1)) for i in insts]


def _observed(metrics: Metrics, phase: str) -> float:
    got = metrics.registry.get_sample_value("slurmscale_launch_phase_seconds_count",
                                            {"pool": "gpu-spot", "kind": "gang",
                                             "phase": phase})
    return got or 0.0


def test_each_phase_is_filled_in_as_its_signal_comes_and_measured_once() -> None:
    store, metrics, p, insts = _world()
    booting = [SlurmNode(i.node, "IDLE+CLOUD+POWERING_UP", i.node, i.node) for i in insts]
    p.run(booting, insts, _seen(insts, None), {}, T0 + timedelta(seconds=30))
    a, b = store.launch_phases()
    assert a.ec2_launch_s == T - 1 and a.bootstrap_s is None and a.registered_s is None
    tag = node_init.boot_times({"os": T - 500, "start": T + 40, "tag": T + 41,
                                "checked": T + 42, "slurmd": T + 43})
    p.run(booting, insts, _seen(insts, tag), {}, T0 + timedelta(seconds=50))
    a = store.launch_phases()[0]
    assert (a.bootstrap_s, a.slurmd_s) == (T + 40, T + 43)
    assert a.os_s is None, "a kernel older than the launch is not the instance's own"
    up = [SlurmNode(i.node, "ALLOCATED+CLOUD", i.node, i.node) for i in insts]
    p.run(up, insts, _seen(insts, tag), {}, T0 + timedelta(seconds=60))
    assert store.launch_phases()[0].registered_s == T + 60
    assert _observed(metrics, "boot") == 0, "measured once the node has run its job"
    started = {i.node: (T - 10, T + 75) for i in insts}
    p.run(up, insts, _seen(insts, tag), started, T0 + timedelta(seconds=80))
    a, b = store.launch_phases()
    assert (a.submitted_s, a.started_s) == (T - 10, T + 75) and store.launch_phases(
        open_only=True) == []
    assert _observed(metrics, "boot") == 2 and _observed(metrics, "sbatch->running") == 2
    p.run(up, insts, _seen(insts, tag), started, T0 + timedelta(seconds=90))
    assert _observed(metrics, "boot") == 2, "a launch is measured once"
    (t,) = summarize(store.launch_phases())
    figures = {f.phase: f for f in t.phases}
    assert (t.pool, t.kind, t.launches) == ("gpu-spot", "gang", 2)
    assert figures["resume->fleet"].median_s == 3 and figures["boot"].median_s == 41
    assert figures["->job"].median_s == 15 and figures["sbatch->running"].median_s == 85
    assert figures["resume->running"].median_s == 78 and figures["register"].n == 2


def test_a_launch_no_longer_running_or_past_its_follow_time_is_not_followed() -> None:
    store, _, p, insts = _world()
    up = [SlurmNode(i.node, "ALLOCATED+CLOUD", i.node, i.node) for i in insts]
    p.run(up, insts[:1], [], {}, T0 + timedelta(seconds=5))  # (the second terminated)
    a, b = store.launch_phases()
    assert a.registered_s == T + 5 and b.registered_s is None
    p.run(up, insts, [], {}, T0 + timedelta(hours=3))
    assert store.launch_phases()[1].registered_s is None


def test_a_job_that_started_before_the_launch_is_not_its_first_job() -> None:
    store, _, p, insts = _world()
    up = [SlurmNode(i.node, "ALLOCATED+CLOUD", i.node, i.node) for i in insts]
    p.run(up, insts, [], {insts[0].node: (T - 900, T - 600)}, T0 + timedelta(seconds=5))
    assert store.launch_phases()[0].started_s is None


def test_a_slow_phase_says_what_shortens_it_and_the_report_shows_the_table(filled) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    cfg, store = filled
    t = (RT0 + timedelta(hours=1)).timestamp()
    rows = [LaunchPhasesRow(instance_id=f"i-{k}", node=f"od-{k}", pool="gpu-od", job_nodes=1,
                            requested_s=t, answered_s=t + 1, ec2_launch_s=t + 1,
                            bootstrap_s=t + 301, tagged_s=t + 302, checked_s=t + 303,
                            slurmd_s=t + 304, registered_s=t + 310, submitted_s=t - 2,
                            started_s=t + 330) for k in range(3)]
    store.put_launch_phases(rows)
    r = build_report(cfg, store, RT0, RT0 + timedelta(hours=6))
    (ttr,) = r.time_to_run
    assert ttr.kind == "single" and any(s.startswith("boot 300s") and "Fast Snapshot Restore"
                                        in s for s in ttr.slow)
    assert not any(s.startswith("tag") for s in ttr.slow)
    text = to_text(r)
    assert "Time to run" in text and "gpu-od single nodes, 3 instance(s):" in text
    assert "boot 5.0m/5.0m" in text and "sbatch->running 5.5m/5.5m" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    got = {(x["section"], x["name"], x["field"]): x["value"]
           for x in csv.DictReader(io.StringIO(to_csv(r)))}
    assert got[("time_to_run", "gpu-od/single/boot", "median_s")] == "300.0"
    assert json.loads(to_json(r))["time_to_run"][0]["phases"][1]["median_s"] == 300.0
    # outside the window: not counted
    assert build_report(cfg, store, RT0 + timedelta(hours=2),
                        RT0 + timedelta(hours=6)).time_to_run == []


def test_status_names_each_launch_in_flight_by_where_it_is() -> None:
    rows = [LaunchPhasesRow(instance_id=f"i-{k}", node=f"spot-{k}", pool="gpu-spot",
                            job_nodes=4, answered_s=T) for k in range(1, 5)]
    rows[3].bootstrap_s = T + 40
    gone = LaunchPhasesRow(instance_id="i-9", node="spot-9", pool="gpu-spot", job_nodes=1,
                           answered_s=T)
    running = {r.instance_id for r in rows}
    assert launches_in_flight([*rows, gone], running, T + 130) == [
        {"pool": "gpu-spot", "nodes": "spot-[1-3]",
         "where": "booting 2m10s, bootstrap not yet seen"},
        {"pool": "gpu-spot", "nodes": "spot-4",
         "where": "booting 2m10s, bootstrap waiting for its node tag"}]
    assert in_flight(rows[0], T - 5).startswith("booting 0m00s")


def test_every_phase_has_two_known_ends_and_the_totals_span_them() -> None:
    fields = set(LaunchPhasesRow.__dataclass_fields__)
    assert all({ph.begins, ph.ends} <= fields for ph in PHASES + TOTALS)
    assert PHASES[-1].ends == TOTALS[0].ends == TOTALS[1].ends == "started_s"


def test_a_launch_records_where_its_time_to_run_begins(world) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    r, cloud, slurm, clock, spool = world
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    clock.now = clock.now + timedelta(seconds=2)
    r.tick()
    rows = r.store.launch_phases()
    assert sorted(x.node for x in rows) == ["spot-1", "spot-2"]
    assert {(x.job_nodes, x.requested_s, x.answered_s) for x in rows} == {
        (2, clock.now.timestamp() - 2, clock.now.timestamp())}


def test_a_pass_that_learns_nothing_new_writes_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """(on the SQL store, whose rows carry their ORM state besides their fields)"""
    from slurmscale.store.repo import Store

    cfg = parse_config(base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}"))
    store = Store(cfg.store_url)
    store.upgrade()
    insts = [_inst(1), _inst(2)]
    store.put_launch_phases([LaunchPhasesRow(
        instance_id=i.instance_id, node=i.node, pool=i.pool, job_nodes=2, answered_s=T)
        for i in insts])
    writes: list[int] = []
    real = store.put_launch_phases
    store.put_launch_phases = lambda rows: (writes.append(len(rows)), real(rows))[1]  # type: ignore[method-assign]
    p = LaunchPhasePass(pass_context(cfg, store, FakeSlurm()))
    booting = [SlurmNode(i.node, "IDLE+CLOUD+POWERING_UP", i.node, i.node) for i in insts]
    p.run(booting, insts, _seen(insts, None), {}, T0 + timedelta(seconds=5))
    assert writes == [2]  # (EC2's launch time learned)
    p.run(booting, insts, _seen(insts, None), {}, T0 + timedelta(seconds=10))
    assert writes == [2], "nothing new: no write"
    store.close()
