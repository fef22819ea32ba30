"""One store row that cannot be decoded (a date that is not one) never stops the loop: every
read skips it and names it, the pass goes on (a gang launches beside it), an event says so
once, and `status` and `nodes` list it instead of ending in a traceback."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import yaml

from slurmscale.config import Config
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.spool import RequestKind, Spool
from slurmscale.store.repo import Store
from slurmscale.store.rows import InstanceRow
from tests.support.fakes import FakeCloud, FakeSlurm
from tests.unit.conftest import base_config
from tests.unit.test_reconcile import Clock, hook

BAD = "i-00000000000000bd"


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
    env = {**os.environ, "AWS_EC2_METADATA_DISABLED": "true"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(path), *args],
                              capture_output=True, text=True, timeout=60, env=env)
    st = run("status", "--json")
    assert st.returncode == 0 and "Traceback" not in st.stderr, st.stderr
    assert json.loads(st.stdout)["quarantined_rows"] == [{
        "table": "instances", "key": BAD,
        "error": "ValueError: Invalid isoformat string: 'not-a-date'"}]
    text = run("status")
    assert "store rows that cannot be read" in text.stdout and BAD in text.stdout
    nodes = run("nodes", "--all")
    assert "Traceback" not in nodes.stderr and nodes.returncode in (0, 2), nodes.stderr
