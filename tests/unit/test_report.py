"""`slurmscale report` from a store with known contents: every number recomputed by hand."""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from click.testing import CliRunner

from slurmscale.cli import cli
from slurmscale.config_file import parse_config
from slurmscale.report.compute import build_report, percentile
from slurmscale.report.render import to_csv, to_html, to_text
from slurmscale.store.repo import Store
from slurmscale.store.rows import (
    GangRow,
    HoldRow,
    InstanceRow,
    JobRow,
    PreemptionCause,
    PreemptionRow,
    SampleRow,
)
from tests.support.history import seed
from tests.unit.conftest import base_config

T0 = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
H = timedelta(hours=1)


def _inst(iid: str, pool: str, lifecycle: str, start: datetime, end: datetime | None
          ) -> InstanceRow:
    return InstanceRow(instance_id=iid, node=f"n-{iid}", pool=pool, gang_id="g",
                       instance_type="p5.48xlarge", lifecycle=lifecycle,
                       launch_template_version="1", state="terminated" if end else "running",
                       launched_at=start, terminated_at=end)


def _job(jid: str, pool: str, nodes: int, submit: datetime, start: datetime,
         end: datetime | None) -> JobRow:
    return JobRow(job_id=jid, pool=pool, user_name="alice", num_nodes=nodes, gpus_per_node=8,
                  submitted_at=submit, started_at=start, ended_at=end)


@pytest.fixture
def filled(tmp_path):  # type: ignore[no-untyped-def]
    d = base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}",
                    prices={"p5.48xlarge": {"spot": 40.0, "on-demand": 100.0}})
    cfg = parse_config(d)
    store = Store(cfg.store_url)
    store.upgrade()
    seed(store, [
        _inst("a", "gpu-spot", "spot", T0 - H, T0 + 2 * H),  # 2 h in the window
        _inst("b", "gpu-spot", "spot", T0 + H, T0 + 3 * H),  # 2 h
        _inst("c", "gpu-od", "on-demand", T0 + 5 * H, None),  # running: 1 h to the end (6 h)
        _inst("old", "gpu-spot", "spot", T0 - 9 * H, T0 - 8 * H),  # before the window
    ])
    store.add_job_starts([
        _job("1", "gpu-spot", 2, T0, T0 + H, T0 + 2 * H),  # 1 h x 16 GPUs; wait 1 h
        _job("2", "gpu-spot", 1, T0 + H, T0 + H + timedelta(minutes=10), T0 + 2 * H),
        _job("3", "gpu-od", 1, T0 + 5 * H, T0 + 5 * H + timedelta(minutes=2), None),
        _job("4", "gpu-spot", 8, T0 - 2 * H, T0 - H, T0 + H),  # started before: busy only
    ])
    seed(store, [GangRow(id="g1", pool="gpu-spot", nodes="spot-[1-2]", size=2,
                         status="failed", client_token="t", launch_template_version="1",
                         error_code="InsufficientInstanceCapacity", created_at=T0 + H,
                         updated_at=T0 + H),
                 GangRow(id="g2", pool="gpu-spot", nodes="spot-[1-2]", size=2,
                         status="launched", client_token="t2", launch_template_version="1",
                         created_at=T0 + H, updated_at=T0 + H)])
    store.add_preemption(PreemptionRow(at=T0 + 2 * H, job_id="1", node="n-a",
                                       instance_id="a", pool="gpu-spot",
                                       instance_type="p5.48xlarge", lifecycle="spot",
                                       cause=PreemptionCause.INTERRUPTED,
                                       kind="EC2 Spot Instance Interruption Warning"))
    store.add_event("job_requeued", "job 1 requeued", T0 + 2 * H)
    store.add_event("block_job_requeued", "job 5 still running at the block's close",
                    T0 + 4 * H)
    store.add_event("leak_terminated", "i-x was running untracked", T0 + 3 * H)
    store.add_event("scale_down", "gpu-spot: idle", T0 + 3 * H)
    store.add_event("leak_terminated", "too old", T0 - 2 * H)  # outside the window
    seed(store, [HoldRow(name="slurmscale-gang-9", pool="gpu-spot", job_id="9",
                         user_name="bob", needed=4, nodes="[]",
                         created_s=(T0 + H).timestamp(), spent_gpu_s=2 * 3600.0,
                         accounted_s=(T0 + H).timestamp(), state="released",
                         released_s=(T0 + 2 * H).timestamp())])
    store.add_samples([SampleRow(at=T0 + i * 10 * timedelta(minutes=1), pool="gpu-spot",
                                 nodes_up=i % 3, nodes_busy=i % 2, nodes_booting=0,
                                 nodes_held=0, pending_gpus=8 * (i % 4),
                                 pending_gpu_hours=float(i), pending_gangs=i % 2)
                       for i in range(36)])
    yield cfg, store
    store.close()


def test_every_number_matches_the_store(filled) -> None:  # type: ignore[no-untyped-def]
    cfg, store = filled
    r = build_report(cfg, store, T0, T0 + 6 * H)
    spot, od = r.pools
    assert (spot.instances, spot.node_hours, spot.gpu_hours_provisioned) == (2, 4.0, 32.0)
    # busy: job 1 1 h x 16, job 2 50 min x 8, job 4 1 h (in window) x 64
    assert spot.gpu_hours_busy == pytest.approx(16 + 8 * 50 / 60 + 64, abs=1e-3)
    assert spot.gpu_hours_idle == 0.0, "busy beyond provisioned (job 4's nodes) clamps at 0"
    assert spot.est_cost_usd == 4 * 40.0
    assert (od.node_hours, od.gpu_hours_provisioned, od.est_cost_usd) == (1.0, 8.0, 100.0)
    assert od.gpu_hours_busy == pytest.approx(8 * 58 / 60, abs=1e-3)
    assert r.totals.est_cost_usd == 260.0
    one, mid, big = r.waits
    assert (one.jobs, one.p50_s, one.p95_s) == (2, 120.0, 600.0)
    assert (mid.jobs, mid.p50_s) == (1, 3600.0)
    assert big.jobs == 0 and big.p50_s is None, "job 4 started before the window"
    assert (r.gang_time_to_start.jobs, r.gang_time_to_start.max_s) == (1, 3600.0)
    # requeues: off an interrupted node, and off a block pool at its window's close
    assert (r.preemptions, r.requeues, r.launches, r.launch_failures) == (1, 2, 1, 1)
    assert [(e.pool, e.code, e.gangs) for e in r.capacity_errors] == [
        ("gpu-spot", "InsufficientInstanceCapacity", 1)]
    assert r.reservation_idle_gpu_hours == 2.0 and r.reservations[0].job_id == "9"
    assert r.anomalies["leak_terminated"] == 1 and r.scale_actions["scale_down"] == 1
    assert r.unpriced == []


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([5.0], 95) == 5.0
    assert percentile(list(map(float, range(1, 101))), 95) == 95.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0


def test_the_renderings_carry_the_same_numbers(filled) -> None:  # type: ignore[no-untyped-def]
    cfg, store = filled
    r = build_report(cfg, store, T0, T0 + 6 * H)
    rows = list(csv.DictReader(io.StringIO(to_csv(r))))
    got = {(x["section"], x["name"], x["field"]): x["value"] for x in rows}
    assert got[("usage", "gpu-spot", "gpu_hours_provisioned")] == "32.0"
    assert got[("queue_wait", "1 node", "p95_s")] == "600.0"
    assert got[("counts", "", "preemptions")] == "1"
    text = to_text(r)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "InsufficientInstanceCapacity x1" in text
    from slurmscale.report.render import MAX_POINTS

    page = to_html(r, store.sample_series(T0, T0 + 6 * H, MAX_POINTS),
                   {"gpu-spot": 8, "gpu-od": 8}, (T0.timestamp(), (T0 + 6 * H).timestamp()))
    assert page.count("<svg") == 2 and "<script" not in page
    assert "260.00" in page and "slurmscale-gang-9" in page


def _conf(tmp_path, **over):  # type: ignore[no-untyped-def]
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(base_config(**over)))
    os.chmod(p, 0o644)
    return str(p)


def test_cron_use_quiet_file_output_and_clear_failures(filled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg, _store = filled
    conf = _conf(tmp_path, store_url=cfg.store_url)
    out = tmp_path / "r.json"
    run = CliRunner().invoke
    r = run(cli, ["--config", conf, "report", "--since", T0.isoformat(), "--until",
                  (T0 + 6 * H).isoformat(), "--format", "json", "-o", str(out)])
    assert r.exit_code == 0 and r.output == "", "quiet when writing a file"
    assert json.loads(out.read_text())["totals"]["gpu_hours_provisioned"] == 40.0
    r = run(cli, ["--config", conf, "report", "--since", "yesterday"])
    assert r.exit_code == 2 and "'yesterday'" in r.output
    r = run(cli, ["--config", conf, "report", "-o", str(tmp_path / "no" / "such" / "r.txt")])
    assert r.exit_code == 1 and "cannot write" in r.output
    r = run(cli, ["--config", _conf(tmp_path, store_url=f"sqlite:///{tmp_path}/empty.db"),
                  "report"])
    assert r.exit_code == 1 and "slurmscale db upgrade" in r.output


def test_the_status_screen_fits_80_columns() -> None:
    from slurmscale.cli_status import render

    d = {"cluster": "c" * 30, "at": "2026-11-29T12:00:00+00:00",
         "daemon": {"reachable": True, "role": "leader",
                    "last_tick": {"at": "2026-11-29T12:00:00+00:00"}},
         "pools": [{"name": "gpu-spot-p5-very-long-name", "capacity_type": "on-demand",
                    "target": 12, "max_nodes": 1024, "nodes_up": 1000, "nodes_busy": 999,
                    "nodes_booting": 100, "nodes_held": 24, "nodes_idle": 1,
                    "pending_gpus": 81920, "pending_gangs": 512}],
         "reservations": [{"name": "slurmscale-gang-1234567-x", "job_id": "1234567",
                           "state": "active", "nodes_held": 3, "nodes_needed": 16,
                           "idle_gpu_hours": 12.5}],
         "backoff": [{"pool": "gpu-spot", "until": "2026-11-29T12:03:00+00:00",
                      "code": "InsufficientInstanceCapacity", "repeats": 2}],
         "pending_requests": [{"received_at": "2026-11-29T12:00:00", "kind": "resume",
                               "hostlist": "spot-[1-1000]" * 5}],
         "recent_errors": [{"at": "2026-11-29T11:59:00", "kind": "launch_failed",
                            "message": "x" * 200}], "slurm_error": None}
    text = render(d)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "gpu-spot-p5-" in text and "until 12:03:00 UTC" in text


def test_status_runs_without_slurm_or_daemon_and_says_so(filled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg, _store = filled
    conf = _conf(tmp_path, store_url=cfg.store_url, socket_path=str(tmp_path / "none.sock"),
                 slurm={"bin_dir": str(tmp_path / "no-slurm-here")})
    r = CliRunner().invoke(cli, ["--config", conf, "status", "--json"])
    assert r.exit_code == 4, r.output  # (answered: no daemon, the worst, and no Slurm)
    d = json.loads(r.output.split("\nwarning")[0])
    assert d["daemon"]["reachable"] is False and d["slurm_error"]
    assert [p["name"] for p in d["pools"]] == ["gpu-spot", "gpu-od"]
    text = CliRunner().invoke(cli, ["--config", conf, "status"]).output
    assert "daemon NOT REACHABLE" in text and "Slurm not readable" in text


def test_a_month_of_samples_is_averaged_in_sql_to_at_most_max_points_per_pool() -> None:
    from slurmscale.report.render import MAX_POINTS
    from slurmscale.store.rows import SampleRow

    store = Store("sqlite://")
    store.upgrade()
    start = datetime(2026, 11, 1, tzinfo=UTC)
    with store.session() as s:
        s.add_all([SampleRow(at=start + timedelta(minutes=m), pool=p, nodes_up=m % 100,
                             nodes_busy=1, nodes_booting=0, nodes_held=0, pending_gpus=8 * p_i,
                             pending_gpu_hours=1.0, pending_gangs=0)
                   for m in range(43_200) for p_i, p in enumerate(("a", "b", "c"))])
        s.commit()
    series = store.sample_series(start, start + timedelta(days=30), MAX_POINTS)
    assert sorted(series) == ["a", "b", "c"]
    assert {len(v) for v in series.values()} == {MAX_POINTS}
    per = 43_200 // MAX_POINTS  # minutes a point (30 at 1,440 points)
    t0, up0, busy0, gpus0 = series["a"][0]  # the first point: minutes 0 .. per - 1
    assert t0 == start.timestamp() + (per - 1) * 30 and up0 == sum(range(per)) / per
    assert busy0 == 1
    assert [p[3] for p in series["c"]] == [16.0] * MAX_POINTS
    few = store.sample_series(start, start + timedelta(minutes=10), MAX_POINTS)
    assert [p[1] for p in few["a"]] == [float(m) for m in range(10)]  # fewer: as they are
