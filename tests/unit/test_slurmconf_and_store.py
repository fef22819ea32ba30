from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from slurmscale.slurmconf import render_gres_conf, render_slurm_conf
from slurmscale.store.repo import Store
from slurmscale.store.tables import metadata
from tests.support.history import seed


def test_slurm_conf_matches_the_pools(cfg) -> None:  # type: ignore[no-untyped-def]
    text = render_slurm_conf(cfg)
    assert "ResumeProgram=/usr/local/lib/slurmscale/resume_suspend/slurmscale-resume" in text
    assert "ResumeFailProgram=" in text and "SuspendProgram=" in text
    # (no sizes in the config and none from EC2 given: Slurm's own defaults, nothing made up)
    assert ("NodeName=spot-[1-8] Gres=gpu:8 Feature=spot,p5.48xlarge State=CLOUD"
            in text)
    assert "PartitionName=gpu-od Nodes=od-[1-2] State=UP" in text
    assert "SuspendTime=6000" in text and "ResumeTimeout=900" in text
    assert "JobRequeue=1" in text
    assert "PartitionName=gpu-spot Nodes=spot-[1-8]" in text and "PriorityTier=2" in text
    assert "NodeName=od-[1-2] Name=gpu Count=8 File=/dev/nvidia[0-7]" in render_gres_conf(cfg)


def test_migrations_match_the_models(cfg) -> None:  # type: ignore[no-untyped-def]
    store = Store(cfg.store_url)
    store.upgrade()
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []
    store.upgrade()  # idempotent


def test_read_commands_refuse_an_unmigrated_store_and_say_what_to_do(cfg) -> None:  # type: ignore[no-untyped-def]
    store = Store(cfg.store_url)
    assert "run `slurmscale db upgrade`" in (store.schema_problem() or "")
    store.upgrade()
    assert store.schema_problem() is None


def test_a_schema_upgrade_killed_half_way_leaves_nothing_behind(cfg, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """SQLite DDL is transactional here: a daemon killed during `upgrade` (simulated by a
    migration failing after its first table) leaves no half schema, and the next upgrade
    works."""
    import pytest
    from alembic import op
    from sqlalchemy import inspect

    real = op.create_table
    calls = {"n": 0}

    def dies_on_second(*a, **kw):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("killed")
        return real(*a, **kw)

    store = Store(cfg.store_url)
    monkeypatch.setattr(op, "create_table", dies_on_second)
    with pytest.raises(KeyboardInterrupt):
        store.upgrade()
    monkeypatch.setattr(op, "create_table", real)
    assert inspect(store.engine).get_table_names() == []
    store.upgrade()
    assert store.schema_problem() is None


def test_events_json_times_events_to_the_millisecond(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Scripts (and the HA test) measure handovers shorter than a second from `events --json`;
    the table keeps whole seconds for width."""
    import json
    import os
    from datetime import UTC, datetime

    import yaml
    from click.testing import CliRunner

    from slurmscale.cli import cli

    from .conftest import base_config

    conf = tmp_path / "slurmscale.yaml"
    conf.write_text(yaml.safe_dump(base_config(store_url=f"sqlite:///{tmp_path / 's.db'}")))
    os.chmod(conf, 0o600)
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    store.upgrade()
    store.add_event("leader_acquired", "x", datetime(2026, 11, 29, 20, 29, 30, 987654, UTC))
    r = CliRunner().invoke(cli, ["--config", str(conf), "events", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["events"][0]["at"] == "2026-11-29T20:29:30.987+00:00"
    r = CliRunner().invoke(cli, ["--config", str(conf), "events"])
    assert "2026-11-29T20:29:30+00:00" in r.output


def test_last_instances_is_each_nodes_newest_whatever_its_state(cfg) -> None:  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime, timedelta

    from slurmscale.store.rows import InstanceRow

    store = Store(cfg.store_url)
    store.upgrade()
    t0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    seed(store, [
        InstanceRow(instance_id=f"i-{k}", node=node, pool="gpu-spot", gang_id="g",
                    instance_type="p5.48xlarge", lifecycle="spot", launch_template_version="3",
                    private_ip=f"10.0.0.{k}", state=state, launched_at=t0 + timedelta(hours=k))
        for k, node, state in ((1, "spot-1", "terminated"), (3, "spot-1", "terminated"),
                               (2, "spot-1", "terminated"), (4, "spot-2", "running"))])
    last = store.last_instances(["spot-1", "spot-2", "spot-3"])
    assert {n: r.instance_id for n, r in last.items()} == {"spot-1": "i-3", "spot-2": "i-4"}
    store.close()


def test_the_schema_head_and_revision_are_read_without_alembic_and_agree_with_it(
        tmp_path) -> None:
    import subprocess
    import sys

    from alembic.config import Config as AlembicConfig
    from alembic.script import ScriptDirectory

    from slurmscale.store.repo import ALEMBIC_INI, Store, current_revision, schema_head

    head = ScriptDirectory.from_config(AlembicConfig(str(ALEMBIC_INI))).get_current_head()
    assert schema_head() == head
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    with store.engine.connect() as conn:
        assert current_revision(conn) is None
    assert store.schema_problem() is not None
    store.upgrade()
    with store.engine.connect() as conn:
        assert current_revision(conn) == head
    assert store.schema_problem() is None
    store.close()
    # a read-only command's path (open the store, check its schema) imports no Alembic
    code = (f"import sys; from slurmscale.store.repo import Store; "
            f"s = Store('sqlite:///{tmp_path / 's.db'}'); assert s.schema_problem() is None; "
            "print('alembic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def test_the_cause_migration_reads_each_old_preemptions_cause_from_its_kind(cfg) -> None:  # type: ignore[no-untyped-def]
    """0010 adds preemptions.cause; the rows already there get it from what `kind` said."""
    from alembic import command
    from alembic.config import Config as AlembicConfig
    from sqlalchemy import text

    from slurmscale.store.repo import ALEMBIC_INI

    store = Store(cfg.store_url)
    acfg = AlembicConfig(str(ALEMBIC_INI))
    with store.engine.begin() as conn:
        acfg.attributes["connection"] = conn
        command.upgrade(acfg, "0009")
        for i, kind in enumerate(("EC2 Spot Instance Interruption Warning",
                                  "EC2 Capacity Reservation Instance Interruption Warning",
                                  "vanished:Server.SpotInstanceTermination",
                                  "unhealthy:ec2_status")):
            conn.execute(text(
                "INSERT INTO preemptions (at, job_id, node, instance_id, pool, instance_type, "
                "lifecycle, kind, notice_time) VALUES ('2026-12-01 00:00:00', :j, 'n', :i, "
                "'p', 't', 'spot', :k, '')"), {"j": str(i), "i": f"i-{i}", "k": kind})
    store.upgrade()
    assert [(p.job_id, p.cause) for p in store.preemptions()] == [
        ("0", "interrupted"), ("1", "reclaimed"), ("2", "vanished"), ("3", "unhealthy")]


def test_every_record_and_its_table_name_the_same_fields() -> None:
    """store/rows.py's records and store/tables.py's columns are written twice (the records
    stay free of SQLAlchemy); a field without a column would silently never be stored."""
    from dataclasses import fields

    from sqlalchemy import inspect as sa_inspect

    from slurmscale.store import rows, tables

    mapped = {m.class_ for m in tables._mapper.mappers}
    records = {c for c in vars(rows).values()
               if isinstance(c, type) and c.__module__ == rows.__name__
               and hasattr(c, "__dataclass_fields__")}
    assert mapped == records
    for cls in records:
        table = sa_inspect(cls).local_table
        assert {f.name for f in fields(cls)} == set(table.c.keys()), cls.__name__
