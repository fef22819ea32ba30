"""One store row that cannot be decoded (a date that is not one) never stops the loop: every
read skips it and names it, the pass goes on (a gang launches beside it), an event says so
once, and `status` and `nodes` list it instead of ending in a traceback."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from slurmscale.config import Config
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.spool import RequestKind, Spool
from slurmscale.store.repo import Store
from slurmscale.store.rows import HoldRow, InstanceRow, JobRow, OfferingRow, TimerKind
from tests.support.fakes import FakeCloud, FakeSlurm
from tests.unit.conftest import base_config
from tests.unit.test_reconcile import Clock, hook

BAD = "i-00000000000000bd"


def _cli(path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`slurmscale --config PATH ARGS...` as an admin runs it (no instance metadata)."""
    env = {**os.environ, "AWS_EC2_METADATA_DISABLED": "true"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(path), *args],
                              capture_output=True, text=True, timeout=60, env=env)
    return run


def admin_config(cfg: Config, d: Path) -> Path:
    """The config an admin's commands read: `cfg`'s store and spool, no Slurm to ask."""
    data = base_config(spool_dir=cfg.spool_dir, socket_path=cfg.socket_path,
                       hook_log_file=cfg.hook_log_file, store_url=cfg.store_url,
                       slurm={"bin_dir": str(d / "no-slurm")})
    path = d / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    path.chmod(0o644)
    return path


def _store_with_a_bad_row(cfg: Config) -> Store:
    store = Store(cfg.store_url)
    store.upgrade()
    store.add_instances([InstanceRow(
        instance_id=iid, node=node, pool="gpu-spot", gang_id="g0", instance_type="p5.48xlarge",
        lifecycle="spot", launch_template_version="3", state="running",
        launched_at=datetime(2026, 12, 1, tzinfo=UTC))
        for iid, node in ((BAD, "spot-8"), ("i-00000000000000aa", "spot-7"))])
    db = sqlite3.connect(cfg.store_url.removeprefix("sqlite:///"))
    db.execute("UPDATE instances SET launched_at = 'not-a-date' WHERE instance_id = ?", (BAD,))
    db.commit()
    db.close()
    return store


def test_every_read_skips_the_row_and_names_it(cfg: Config) -> None:
    _store_with_a_bad_row(cfg).close()
    store = Store(cfg.store_url)
    try:
        assert [r.instance_id for r in store.active_instances()] == ["i-00000000000000aa"]
        assert [r.instance_id for r in store.instances()] == ["i-00000000000000aa"]
        assert store.instance(BAD) is None
        assert set(store.last_instances(["spot-7", "spot-8"])) == {"spot-7"}
        assert store.quarantined == {
            ("instances", BAD): "ValueError: Invalid isoformat string: 'not-a-date'"}
    finally:
        store.close()


def test_the_pass_goes_on_and_says_so_once(cfg: Config) -> None:
    store = _store_with_a_bad_row(cfg)
    cloud, slurm, clock = FakeCloud(), FakeSlurm(), Clock()
    r = Reconciler(cfg, store, slurm, cloud, clock=clock)
    try:
        hook(Spool(cfg.spool_dir), clock, RequestKind.RESUME, {42: ["spot-1", "spot-2"]})
        r.tick()
        assert len(cloud.launches) == 1 and set(slurm.addresses) == {"spot-1", "spot-2"}
        r.tick()
        quarantined = [e for e in store.events() if e.kind == "row_quarantined"]
        assert len(quarantined) == 1 and BAD in quarantined[0].message
    finally:
        store.close()


def test_status_and_nodes_list_the_row_without_a_traceback(cfg: Config,
                                                           tmp_path: Path) -> None:
    _store_with_a_bad_row(cfg).close()
    data = base_config(spool_dir=cfg.spool_dir, socket_path=cfg.socket_path,
                       hook_log_file=cfg.hook_log_file, store_url=cfg.store_url,
                       slurm={"bin_dir": str(tmp_path / "no-slurm")})  # Slurm unreadable
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    path.chmod(0o644)
    run = _cli(path)
    st = run("status", "--json")
    assert st.returncode == 4 and "Traceback" not in st.stderr, st.stderr  # (no daemon)
    assert json.loads(st.stdout)["quarantined_rows"] == [{
        "table": "instances", "key": BAD,
        "error": "ValueError: Invalid isoformat string: 'not-a-date'"}]
    text = run("status")
    assert "store rows that cannot be read" in text.stdout and BAD in text.stdout
    nodes = run("nodes", "--all")
    assert "Traceback" not in nodes.stderr and nodes.returncode == 3, nodes.stderr


NOW = datetime.now(UTC)


def _store_with_bad_numbers(cfg: Config) -> None:
    """An offering until 1e308, a hold created 'abc', a job of 'many' nodes: SQLite keeps any
    value in any column, and each of these once got past the reads (a pass failing on
    `datetime.fromtimestamp(1e308)`, `report` on a TypeError). Each beside a good row."""
    store = Store(cfg.store_url)
    store.upgrade()
    for pool in ("gpu-spot", "gpu-od"):
        store.put_offering(OfferingRow(pool=pool, until_s=NOW.timestamp() + 60, repeats=1,
                                       last_code="InsufficientInstanceCapacity",
                                       updated_at=NOW))
    for name in ("hold-1", "hold-2"):
        store.put_hold(HoldRow(
            name=name, pool="gpu-spot", job_id=name[-1], user_name="u", needed=2,
            nodes='["spot-1", "spot-2"]', created_s=NOW.timestamp() - 60,
            accounted_s=NOW.timestamp() - 60, state="active"))
    store.add_job_starts([JobRow(job_id=j, pool="gpu-spot", user_name="u", num_nodes=2,
                                 gpus_per_node=8, submitted_at=NOW - timedelta(minutes=9),
                                 started_at=NOW - timedelta(minutes=5)) for j in ("1", "2")])
    store.close()
    db = sqlite3.connect(cfg.store_url.removeprefix("sqlite:///"))
    db.execute("UPDATE offerings SET until_s = 1e308 WHERE pool = 'gpu-spot'")
    db.execute("UPDATE holds SET created_s = 'abc' WHERE name = 'hold-1'")
    db.execute("UPDATE jobs SET num_nodes = 'many' WHERE job_id = '1'")
    db.commit()
    db.close()


BAD_NUMBERS = {
    ("offerings", "gpu-spot"): "ValueError: 1e+308 in a FLOAT column is out of range",
    ("holds", "hold-1"): "ValueError: 'abc' in a FLOAT column is not a number",
    ("jobs", "1"): "ValueError: 'many' in an INTEGER column is not a number"}


def test_a_number_that_is_not_one_or_out_of_range_is_quarantined(cfg: Config) -> None:
    _store_with_bad_numbers(cfg)
    store = Store(cfg.store_url)
    try:
        assert [o.pool for o in store.offerings()] == ["gpu-od"]
        assert [h.name for h in store.holds()] == ["hold-2"]
        assert [j.job_id for j in store.jobs(NOW - timedelta(hours=1), NOW)] == ["2"]
        assert store.quarantined == BAD_NUMBERS
        r = Reconciler(cfg, store, FakeSlurm(), FakeCloud(), clock=Clock())
        r.tick()  # the pass goes on
        said = [e.message for e in store.events() if e.kind == "row_quarantined"]
        assert any(m.startswith("offerings row gpu-spot cannot be read") for m in said), said
    finally:
        store.close()


def test_status_and_report_list_bad_numbers_without_a_traceback(cfg: Config,
                                                                tmp_path: Path) -> None:
    _store_with_bad_numbers(cfg)
    path = admin_config(cfg, tmp_path)
    run = _cli(path)
    st = run("status", "--json")
    assert "Traceback" not in st.stderr, st.stderr
    listed = {(q["table"], q["key"]): q["error"] for q in json.loads(st.stdout)["quarantined_rows"]}
    assert listed == {k: v for k, v in BAD_NUMBERS.items() if k[0] in ("offerings", "holds")}
    rep = run("report", "--since", "1h", "--format", "json")
    assert rep.returncode == 0 and "Traceback" not in rep.stderr, rep.stderr
    assert json.loads(rep.stdout)


def test_a_timer_that_is_not_a_time_is_skipped_and_its_wait_starts_again(cfg: Config) -> None:
    store = Store(cfg.store_url)
    store.upgrade()
    store.set_timers(TimerKind.LOST_NODE, {"spot-1": 1.8e9, "spot-2": 1.8e9, "spot-3": 1.8e9})
    db = sqlite3.connect(cfg.store_url.removeprefix("sqlite:///"))
    db.execute("UPDATE timers SET since_s = 'soon' WHERE subject = 'spot-1'")
    db.execute("UPDATE timers SET since_s = 1e308 WHERE subject = 'spot-2'")
    db.commit()
    db.close()
    assert store.timers(TimerKind.LOST_NODE) == {"spot-3": 1.8e9}
    store.close()


def test_a_bad_row_on_the_write_path_is_overwritten_not_failed_on(cfg: Config) -> None:
    """Issue 65: a pool's target 'lots' was quarantined by the reads, but `save_pool_memory`'s
    merge loaded the stored row first and every pass failed in its capacity phase; the same
    for `put_offering` and `save_capacity_reservations`. Now each write replaces the row whole:
    the pass goes on and the row reads back as written."""
    from slurmscale.policy.model import PoolMemory
    from slurmscale.store.rows import CapacityReservationRow

    store = Store(cfg.store_url)
    store.upgrade()
    store.save_pool_memory({"gpu-spot": PoolMemory(3, None, None)}, NOW)
    store.put_offering(OfferingRow(pool="gpu-spot", until_s=NOW.timestamp(), repeats=1,
                                   last_code="x", updated_at=NOW))
    cr = CapacityReservationRow(id="cr-1", pool="gpu-spot", kind="default",
                                instance_type="p5.48xlarge", availability_zone="a", total=2,
                                available=1, state="active", read_at=NOW)
    store.save_capacity_reservations([cr])
    db = sqlite3.connect(cfg.store_url.removeprefix("sqlite:///"))
    db.execute("UPDATE pool_state SET target = 'lots'")
    db.execute("UPDATE offerings SET repeats = 'often'")
    db.execute("UPDATE capacity_reservations SET total = 'all'")
    db.commit()
    db.close()
    try:
        assert store.pool_memory() == {} and store.offerings() == []
        assert store.capacity_reservations() == []
        r = Reconciler(cfg, store, FakeSlurm(), FakeCloud(), clock=Clock())
        r.tick()  # (raised before: the merge loaded the bad row)
        store.save_pool_memory({"gpu-spot": PoolMemory(4, None, None)}, NOW)
        store.put_offering(OfferingRow(pool="gpu-spot", until_s=NOW.timestamp(), repeats=2,
                                       last_code="x", updated_at=NOW))
        store.save_capacity_reservations([cr])  # (the record written before, again)
        assert store.pool_memory()["gpu-spot"].target == 4
        assert [o.repeats for o in store.offerings()] == [2]
        assert [c.total for c in store.capacity_reservations()] == [2]
    finally:
        store.close()


def test_a_hold_whose_nodes_are_not_a_list_is_quarantined(cfg: Config, tmp_path: Path) -> None:
    """`reservations list --all` ended in a JSONDecodeError traceback for a hold whose
    `nodes` was not JSON; now the read names it and the command lists the others."""
    _store_with_bad_numbers(cfg)
    db = sqlite3.connect(cfg.store_url.removeprefix("sqlite:///"))
    db.execute("UPDATE holds SET nodes = 'spot-[1-2]' WHERE name = 'hold-2'")
    db.commit()
    db.close()
    store = Store(cfg.store_url)
    try:
        assert store.holds() == [] and store.hold("hold-2") is None
        assert store.quarantined[("holds", "hold-2")].startswith(
            "ValueError: 'spot-[1-2]' in a node list column is not a JSON list of names")
    finally:
        store.close()
    path = admin_config(cfg, tmp_path)
    listed = _cli(path)("reservations", "list", "--all")
    assert "Traceback" not in listed.stderr, listed.stderr
