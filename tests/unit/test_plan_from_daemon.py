"""`slurmscale plan --json` answered by the running daemon: the entry point's fast path hands
the daemon's JSON through without the CLI's imports, and leaves everything it is not sure
of to the full CLI (other arguments, a config it does not read plainly, no daemon, an error
reply)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from slurmscale import entry
from slurmscale.daemon.api import ApiServer

PLAN = {"source": "daemon", "now": 1.0, "pools": {}, "actions": [], "reservations": [],
        "partition_rewrites": [], "gangs": [], "blocks": []}


@pytest.fixture
def served() -> Iterator[tuple[Path, dict[str, tuple[int, object]]]]:
    """A config whose socket a stand-in daemon serves; `reply` sets what /v1/plan answers."""
    with tempfile.TemporaryDirectory(prefix="ss-plan-") as d:  # socket paths are short
        sock = f"{d}/s.sock"
        reply: dict[str, tuple[int, object]] = {"plan": (200, json.dumps(PLAN).encode())}
        api = ApiServer(sock, {("GET", "/v1/plan"): lambda _b: reply["plan"]},
                        frozenset({os.geteuid()}))
        api.start()
        conf = Path(d) / "c.yaml"
        conf.write_text(yaml.safe_dump({"cluster_name": "x", "socket_path": sock}))
        os.chmod(conf, 0o644)
        try:
            yield conf, reply
        finally:
            api.stop()


def test_the_daemons_plan_is_printed_as_sent(served, capfd) -> None:  # type: ignore[no-untyped-def]
    conf, _ = served
    for argv in (["--config", str(conf), "plan", "--json"],
                 [f"--config={conf}", "plan", "--json"]):
        assert entry.daemon_plan(argv)
        assert json.loads(capfd.readouterr().out) == PLAN
    # anchors and aliases are composed, never expanded: a config that uses them is read
    text = conf.read_text()
    conf.write_text(text + "a: &a [1, 2]\nb: *a\nc: [*a, *a, *a, *a]\n")
    assert entry.daemon_plan(["--config", str(conf), "plan", "--json"])
    assert json.loads(capfd.readouterr().out) == PLAN


def test_anything_uncertain_goes_to_the_cli(served, capfd) -> None:  # type: ignore[no-untyped-def]
    conf, reply = served
    base = ["--config", str(conf)]
    for argv in (base + ["plan"], base + ["plan", "--json", "--live"], base + ["status"],
                 ["plan", "--json", "--config", str(conf)]):
        assert not entry.daemon_plan(argv), argv
    reply["plan"] = (503, {"error": "no capacity pass has completed yet"})
    assert not entry.daemon_plan(base + ["plan", "--json"])
    reply["plan"] = (200, json.dumps(PLAN).encode())
    text = conf.read_text()
    for edit, mode in ((text, 0o664),  # group-writable: load_config refuses it
                       ("socket_path: !!binary aGVsbG8=\n", 0o644),  # not a string
                       ("socket_path: [a]\n", 0o644),
                       ("[not, a, mapping]\n", 0o644),
                       ("socket_path: 7\n", 0o644),
                       ("cluster_name: [\n", 0o644)):
        conf.write_text(edit)
        os.chmod(conf, mode)
        assert not entry.daemon_plan(base + ["plan", "--json"]), (edit, oct(mode))
    assert capfd.readouterr().out == ""
    conf.unlink()
    assert not entry.daemon_plan(base + ["plan", "--json"])


def test_the_fast_path_imports_no_cli_libraries(served) -> None:  # type: ignore[no-untyped-def]
    conf, _ = served
    code = ("import sys\nfrom slurmscale import entry\n"
            f"assert entry.daemon_plan(['--config', {str(conf)!r}, 'plan', '--json'])\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'click', 'pydantic', 'sqlalchemy', 'alembic', 'boto3', 'logging'})\n"
            "print(heavy, file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=True)
    assert json.loads(r.stdout) == PLAN
    assert r.stderr.strip() == "[]", r.stderr


def test_the_daemon_serves_its_last_pass_once_per_pass(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """503 while it stands by or before its first pass; then the pass's plan with every
    pending gang's standing, serialised once per pass."""
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from slurmscale.config_file import parse_config
    from slurmscale.daemon.passes.capacity import CapacityPass
    from slurmscale.daemon.service import Daemon
    from slurmscale.model import QueueJob, SlurmNode
    from tests.support.fakes import FakeSlurm, pass_context
    from tests.unit.conftest import base_config

    cfg = parse_config(base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}"))
    d = Daemon(cfg)
    d.store.upgrade()
    try:
        assert d._plan(None)[0] == 503  # standing by
        slurm = FakeSlurm(table={f"spot-{i}": SlurmNode(f"spot-{i}", "IDLE+CLOUD+POWERED_DOWN",
                                                         f"spot-{i}", f"spot-{i}")
                                 for i in range(1, 9)})
        slurm.queue.append(QueueJob("77", ("gpu-spot",), 4, 8, 3600, "2026-11-29T11:00:00",
                                    "Resources", 100, "alice", "PENDING"))
        cp = CapacityPass(pass_context(cfg, d.store, slurm))
        d.reconciler = SimpleNamespace(capacity=cp, slurm=slurm)  # type: ignore[assignment]
        assert d._plan(None)[0] == 503  # no pass yet
        now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
        cp.run(now)
        status, body = d._plan(None)
        assert status == 200 and isinstance(body, bytes)
        data = json.loads(body)
        assert data["source"] == "daemon" and data["now"] == now.timestamp()
        assert [g["job_id"] for g in data["gangs"]] == ["77"], "standings completed"
        assert d._plan(None)[1] is body, "the same pass: the same bytes"
        cp.run(now)
        assert d._plan(None)[1] is not body, "a new pass: made again"
    finally:
        d.reconciler = None
        d.store.close()
