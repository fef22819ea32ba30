"""`plan --live` reads the store in a child process (store/snapshot.py): the snapshot answers
the policy's reads as the SQL store does, refuses anything else, and the command's own process
never imports SQLAlchemy - yet plans what it planned with the SQL store in hand."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import time
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmscale.config_file import load_config
from slurmscale.daemon.passes.capacity import REQUEUED_RECENTLY_S, current_plan
from slurmscale.daemon.plan_view import SOURCE_LIVE, plan_data
from slurmscale.lifecycles import HoldState, InstanceState
from slurmscale.policy.model import PoolMemory
from slurmscale.slurm.cli_backend import SlurmCLI
from slurmscale.store.repo import Store
from slurmscale.store.rows import (
    CapacityReservationRow,
    HoldRow,
    InstanceRow,
    JobRow,
    OfferingRow,
    PreemptionCause,
    PreemptionRow,
)
from slurmscale.store.snapshot import ReadOnly, StoreSnapshot
from tests.benchmarks import canned_slurm

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _hold(name: str, state: HoldState, exhausted: bool = False) -> HoldRow:
    return HoldRow(name=name, pool="p0", job_id=name[-3:], user_name="u", needed=2,
                   nodes=json.dumps(["p0-1", "p0-2"]), created_s=NOW - 600, spent_gpu_s=5.0,
                   accounted_s=NOW - 60, attached=False, state=state, reason="r",
                   exhausted=exhausted, released_s=None)


def _fill(store: Store) -> None:
    store.save_pool_memory({"p0": PoolMemory(target=3, above_since=NOW - 30,
                                             last_step_at=NOW - 90)}, _at(NOW))
    store.put_hold(_hold("slurmscale-gang-101", HoldState.ACTIVE))
    store.put_hold(_hold("slurmscale-gang-102", HoldState.ACTIVE, exhausted=True))
    store.put_hold(_hold("slurmscale-gang-102", HoldState.RELEASING, exhausted=True))
    store.put_offering(OfferingRow(pool="p1", until_s=NOW + 120, repeats=2,
                                   last_code="InsufficientInstanceCapacity",
                                   updated_at=_at(NOW)))
    store.save_capacity_reservations([CapacityReservationRow(
        id="cr-1", pool="p0", kind="default", instance_type="p5.48xlarge",
        availability_zone="us-east-1a", total=4, available=1, state="active", start_at=None,
        end_at=_at(NOW + 3600), read_at=_at(NOW))])
    for i, t in enumerate((NOW - 7200, NOW - 100)):
        store.add_preemption(PreemptionRow(
            at=_at(t), job_id=f"9{i}", node="p0-1", instance_id=f"i-{i}", pool="p0",
            instance_type="p5.48xlarge", lifecycle="spot", cause=PreemptionCause.INTERRUPTED,
            kind="EC2 Spot Instance Interruption Warning", notice_time=""))
    store.add_instances([InstanceRow(
        instance_id="i-paid", node="p0-3", pool="p0", gang_id="g", instance_type="p5.48xlarge",
        lifecycle="on-demand", launch_template_version="1", capacity_reservation_id="cr-1",
        state=InstanceState.RUNNING, launched_at=_at(NOW - 50))])


def _same(a: list[Any], b: list[Any]) -> bool:
    def values(rows: list[Any]) -> list[dict[str, Any]]:
        return [{f.name: getattr(r, f.name) for f in fields(r)} for r in rows]
    return values(a) == values(b)


def test_the_snapshot_reads_as_the_sql_store_reads(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    store.upgrade()
    _fill(store)
    since = NOW - 3600
    # through a pipe as plain values, back into records: the reader needs no ORM
    snap = StoreSnapshot.from_plain(pickle.loads(pickle.dumps(
        StoreSnapshot.read(store, since).to_plain())))
    assert snap.pool_memory() == store.pool_memory()
    for states in (None, (HoldState.ACTIVE.value,), (HoldState.RELEASING.value,)):
        assert _same(snap.holds(states), store.holds(states)), states
    assert _same([snap.hold("slurmscale-gang-102")], [store.hold("slurmscale-gang-102")])
    assert snap.hold("slurmscale-gang-999") is None
    assert snap.exhausted_jobs() == store.exhausted_jobs() == {"102"}
    assert _same(snap.offerings(), store.offerings())
    assert _same(snap.capacity_reservations(), store.capacity_reservations())
    assert snap.reserved_nodes() == store.reserved_nodes() == {"p0-3"}
    assert _same(snap.preemptions(since=since), store.preemptions(since=since))
    assert [p.job_id for p in snap.preemptions(since=since)] == ["91"]
    # a read it was not made with, and every write, are refused: never half an answer
    with pytest.raises(ReadOnly):
        snap.preemptions(since=NOW - 7300)
    with pytest.raises(ReadOnly):
        snap.put_hold(_hold("slurmscale-gang-103", HoldState.ACTIVE))
    with pytest.raises(ReadOnly):
        snap.save_pool_memory({}, _at(NOW))
    # a caller that edits what it read changes nothing
    snap.holds()[0].reason = "edited"
    assert {h.reason for h in snap.holds()} == {"r"}
    store.close()


def _cluster(tmp_path: Path) -> Path:
    now = time.time()
    bin_dir = canned_slurm.install(tmp_path, 300, 40, 100, now)
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(canned_slurm.config(tmp_path, bin_dir, 100)))
    conf.chmod(0o600)
    return conf


def _live(conf: Path) -> subprocess.CompletedProcess[str]:
    """`plan --json --live` as its own process; stderr's last line says whether that process
    (not the store's reader) ever imported SQLAlchemy, and how it ended: "at once" (its
    output out, the heap left to the kernel: cli_common.end_at_once) or "returned"."""
    code = ("import os, sys\nfrom slurmscale.entry import main\n"
            "me, end = os.getpid(), os._exit\n"
            "def said(how):\n"
            "    print('sqlalchemy imported:', 'sqlalchemy' in sys.modules, how,"
            " file=sys.stderr, flush=True)\n"
            "def at_once(code):\n"
            "    if os.getpid() == me:\n"
            "        said('at once')\n"
            "    end(code)\n"
            "os._exit = at_once\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
            "said('returned')\nsys.exit(code)\n")
    return subprocess.run([sys.executable, "-c", code, "--config", str(conf), "plan", "--json",
                           "--live"], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_policy_plans_the_same_from_the_snapshot_as_from_the_store(tmp_path: Path
                                                                       ) -> None:
    conf = _cluster(tmp_path)
    cfg = load_config(str(conf))
    store = Store(cfg.store_url)
    store.upgrade()
    now = time.time()
    store.save_pool_memory({"p1": PoolMemory(target=7, above_since=now - 30,
                                             last_step_at=now - 30)}, _at(now))
    store.put_offering(OfferingRow(pool="p3", until_s=now + 120, repeats=1,
                                   last_code="InsufficientInstanceCapacity", updated_at=_at(now)))
    # enough ended jobs for limit_use: auto to be learned in p1, from both
    store.add_job_starts([JobRow(job_id=str(i), pool="p1", user_name="u", num_nodes=1,
                                 gpus_per_node=8, submitted_at=_at(now - 7200),
                                 started_at=_at(now - 7200), ended_at=_at(now - 7200 + 60 * i),
                                 time_limit_s=7200) for i in range(1, 61)])
    slurm = SlurmCLI(cfg.slurm)
    window = cfg.reservations.limit_use_auto.learning().window_s

    def snapshot() -> StoreSnapshot:
        return StoreSnapshot.from_plain(pickle.loads(pickle.dumps(StoreSnapshot.read(
            store, now - REQUEUED_RECENTLY_S, now - window).to_plain())))
    with_store = plan_data(current_plan(cfg, slurm, store, now, standings=True), SOURCE_LIVE)
    with_snapshot = plan_data(current_plan(cfg, slurm, snapshot, now, standings=True),
                              SOURCE_LIVE)
    # and with the standings made aside, in a child process, as `plan --live` makes them
    aside = plan_data(current_plan(cfg, slurm, snapshot, now, standings=True, aside=True),
                      SOURCE_LIVE)
    assert with_snapshot == with_store == aside and aside["gangs"]
    assert with_store["pools"]["p1"]["target"] == 7 and with_store["reservations"]
    assert with_store["limit_use"]["p1"] == {
        "value": 0.2542, "jobs": 60, "source": "learned",
        "said": "0.25 learned from 60 job(s)"}, with_store["limit_use"]
    store.close()


def test_plan_live_reads_the_store_aside_without_sqlalchemy(tmp_path: Path) -> None:
    conf = _cluster(tmp_path)
    store = Store(load_config(str(conf)).store_url)
    store.upgrade()
    store.save_pool_memory({"p1": PoolMemory(target=7, above_since=None,
                                             last_step_at=time.time() - 30)}, _at(time.time()))
    store.close()
    out = _live(conf)
    assert out.returncode == 0, out.stderr
    # its output out, the command ended without freeing its heap object by object
    assert out.stderr.strip().endswith("sqlalchemy imported: False at once"), out.stderr
    live = json.loads(out.stdout)
    assert live["pools"]["p1"]["target"] == 7  # the daemon's memory, read by the child
    assert live["gangs"] and live["actions"]


def test_a_store_plan_live_cannot_use_is_one_line_and_its_exit_code(tmp_path: Path) -> None:
    conf = _cluster(tmp_path)  # its store never upgraded: `db upgrade` is the admin's to run
    out = _live(conf)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and out.stdout == "", out
    assert len(lines) == 2 and lines[0].startswith("slurmscale: ") and "upgrade" in lines[0], \
        out.stderr
    assert "Traceback" not in out.stderr


def test_a_store_that_fails_mid_read_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    conf = _cluster(tmp_path)
    url = load_config(str(conf)).store_url
    store = Store(url)
    store.upgrade()
    store.close()
    import sqlite3
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        db.execute("DROP TABLE holds")  # (the schema's revision still says all is there)
    out = _live(conf)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and out.stdout == "", out
    assert len(lines) == 2 and lines[0].startswith("slurmscale: cannot read the store: "), \
        out.stderr
    assert "holds" in lines[0] and "Traceback" not in out.stderr
