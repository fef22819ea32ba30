"""Every column of every table, corrupted in turn, never stops the loop or a read command
(issue 65): a pass runs, every read of the store answers, and `status`, `events`, `report`,
`nodes` and `reservations list` end without a traceback. SQLite keeps any value in any
column (a hand edit, a broken disk): the bad value is one its column's type cannot be read
as (a word in a number, date or flag column, a node list that is not JSON, bytes that are
not text). The pass test runs every column; the commands, every table's first column of each
type."""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmscale.cli import cli
from slurmscale.config import Config
from slurmscale.config_file import parse_config
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.lifecycles import HoldState
from slurmscale.policy.model import PoolMemory
from slurmscale.spool import RequestKind, Spool
from slurmscale.store import tables as t
from slurmscale.store.repo import Store
from slurmscale.store.rows import (
    CapacityReservationRow,
    GraceRow,
    JobRow,
    OfferingRow,
    PreemptionRow,
    ReplacementRow,
    TimerKind,
)
from tests.support.fakes import FakeCloud, FakeSlurm
from tests.support.store_contract import hold
from tests.unit.conftest import base_config
from tests.unit.test_quarantine import admin_config
from tests.unit.test_reconcile import Clock, hook

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
# (table, column) of every column but the keys
COLUMNS = [(name, c.name) for name, tb in t.metadata.tables.items() for c in tb.columns
           if not c.primary_key]
BAD = {"Integer": "many", "Float": "lots", "DateTime": "not-a-date", "Boolean": "perhaps",
       "NameList": "spot-[1-2]", "Text": "\udcff", "String": "\udcff"}


def _cfg(d: Path) -> Config:
    return parse_config(base_config(
        spool_dir=str(d / "spool"), socket_path=str(d / "sock"),
        hook_log_file=str(d / "hooks.log"), store_url=f"sqlite:///{d / 'state.db'}",
        slurm={"bin_dir": str(d / "no-slurm")}))


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with rows in every table: a pass launched a gang and backed off a pool, and
    each other kind of record written as the daemon writes it."""
    d = tmp_path_factory.mktemp("seed")
    cfg = _cfg(d)
    store = Store(cfg.store_url)
    store.upgrade()
    store.lead(cfg.cluster_name, "host:1", NOW)
    clock = Clock()
    cloud, slurm = FakeCloud(), FakeSlurm()
    r = Reconciler(cfg, store, slurm, cloud, clock=clock)
    spool = Spool(cfg.spool_dir)
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    cloud.give = 0
    hook(spool, clock, RequestKind.RESUME, {2: ["spot-3", "spot-4"]})
    clock.now += timedelta(seconds=60)
    r.tick()
    store.keep_warm([store.active_instances()[0].instance_id], NOW)  # (a warm pool's stop)
    store.save_pool_memory({"gpu-spot": PoolMemory(3, 1.0, 2.0)}, NOW)
    store.put_offering(OfferingRow(pool="gpu-od", until_s=NOW.timestamp() + 60, repeats=1,
                                   last_code="x", updated_at=NOW))
    store.put_hold(hold("hold-1", HoldState.ACTIVE))
    store.add_preemption(PreemptionRow(at=NOW, job_id="1", node="spot-1", instance_id="i-1",
                                       pool="gpu-spot", instance_type="p5.48xlarge",
                                       lifecycle="spot", kind="spot", notice_time="t",
                                       cause="interrupted"))
    store.put_grace(GraceRow(job_id="1", node="spot-1", instance_id="i-1", pool="gpu-spot",
                             signal="USR1", signalled_at=NOW, requeue_at=NOW,
                             state="signalled", cause="interrupted", kind="spot"))
    store.add_replacement(ReplacementRow(at=NOW, detected_at=NOW, node="spot-1",
                                         pool="gpu-spot", instance_id="i-1",
                                         instance_type="p5.48xlarge", gpus=8,
                                         cause="not-responding", detail="d",
                                         jobs_requeued=1))
    store.save_capacity_reservations([CapacityReservationRow(
        id="cr-1", pool="gpu-spot", kind="default", instance_type="p5.48xlarge",
        availability_zone="a", total=2, available=1, state="active", start_at=NOW,
        end_at=NOW + timedelta(days=1), read_at=NOW)])
    store.add_job_starts([JobRow(job_id="9", pool="gpu-spot", user_name="u", num_nodes=2,
                                 gpus_per_node=8, submitted_at=NOW - timedelta(minutes=5),
                                 started_at=NOW, time_limit_s=600)])
    store.set_timers(TimerKind.LOST_NODE, {"spot-5": NOW.timestamp()}, {"spot-5": "n"})
    store.close()
    db = sqlite3.connect(d / "state.db")
    empty = [n for n in t.metadata.tables
             if db.execute(f"SELECT COUNT(*) FROM {n}").fetchone()[0] == 0]  # noqa: S608
    db.close()
    assert empty == [], f"tables the seed leaves empty: {empty}"
    return d


def _corrupt(seeded: Path, d: Path, table: str, column: str) -> Config | None:
    """A copy of the seeded store with `column` of every row of `table` bad; None for a
    column type with no bad value here."""
    kind = type(t.metadata.tables[table].c[column].type).__name__
    bad = BAD.get(kind)
    if bad is None:
        return None
    shutil.copy(seeded / "state.db", d / "state.db")
    shutil.copytree(seeded / "spool", d / "spool", dirs_exist_ok=True)
    db = sqlite3.connect(d / "state.db")
    db.text_factory = bytes
    value: object = (bad.encode("utf-8", "surrogateescape") if kind in ("Text", "String")
                     else bad)
    db.execute(f"UPDATE {table} SET {column} = ?", (value,))  # noqa: S608
    db.commit()
    db.close()
    return _cfg(d)


READS = ("pending_requests", "requests", "gangs", "active_instances", "instances",
         "live_gangs", "pool_memory", "holds", "exhausted_jobs", "offerings",
         "capacity_reservations", "graces", "replacements", "events", "running_job_ids")


@pytest.mark.parametrize(("table", "column"), COLUMNS)
def test_a_bad_column_never_stops_a_pass_or_a_read(seeded: Path, tmp_path: Path,
                                                   table: str, column: str) -> None:
    cfg = _corrupt(seeded, tmp_path, table, column)
    if cfg is None:
        return
    store = Store(cfg.store_url)
    try:
        for read in READS:
            getattr(store, read)()
        store.timers(TimerKind.LOST_NODE)
        store.jobs(NOW - timedelta(days=1), NOW + timedelta(days=1))
        store.preemptions("1")
        store.samples(NOW - timedelta(days=1), NOW + timedelta(days=1))
        clock = Clock()
        clock.now += timedelta(minutes=5)  # (after the seed's passes)
        r = Reconciler(cfg, store, FakeSlurm(), FakeCloud(), clock=clock)
        r.tick()
        clock.now += timedelta(minutes=1)
        r.tick()
    finally:
        store.close()


COMMANDS = (["status", "--json"], ["events", "--json"], ["nodes", "--all"],
            ["reservations", "list", "--all"], ["report", "--since", "30d", "--format", "json"])
# per table, its first column of each type: every table and every kind of bad value
ONE_OF_EACH = sorted({(name, next(c.name for c in tb.columns if not c.primary_key
                                  and type(c.type) is type(col.type)))
                      for name, tb in t.metadata.tables.items() for col in tb.columns
                      if not col.primary_key})


@pytest.mark.parametrize("where", ONE_OF_EACH)
def test_a_bad_column_never_ends_a_read_command_in_a_traceback(
        seeded: Path, tmp_path: Path, where: tuple[str, str]) -> None:
    d = tmp_path
    cfg = _corrupt(seeded, d, *where)
    if cfg is None:
        return
    path = admin_config(cfg, d)
    for args in COMMANDS:
        out = CliRunner().invoke(cli, ["--config", str(path), *args],
                                 env={"AWS_EC2_METADATA_DISABLED": "true"})
        assert out.exception is None or isinstance(out.exception, SystemExit), (
            where, args, out.exception, out.output[-2000:])
        if args[-1] == "json" or "--json" in args:
            json.loads(out.stdout or "{}")
