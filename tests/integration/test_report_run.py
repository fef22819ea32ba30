"""`slurmscale report` on a store filled by a real local-cluster run: a capacity error, a
stream of small jobs, a starving 4-node gang that runs through a reservation, and a spot
interruption that requeues a job. The report's numbers are recomputed here from the store's
tables with plain SQL, and the HTML page is rendered in headless Chromium (screenshot kept
in test-artifacts/)."""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import subprocess
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from slurmscale.localcluster.options import PoolSpec
from slurmscale.localcluster.procs import wait_for
from tests.integration.test_reservations import (
    ADMIN_RES,
    _all_busy,
    _gang,
    small_job_stream,
)
from tests.support.ec2_proxy import Fault
from tests.support.eventbridge_messages import spot_warning

pytestmark = pytest.mark.slurm

ARTIFACTS = Path(os.environ.get("SLURMSCALE_TEST_ARTIFACTS",
                                Path(__file__).resolve().parents[2] / "test-artifacts"))


def _nearest_rank(values: list[float], q: float) -> float | None:
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)] if s else None


def _ts(text: str | None) -> float | None:
    if text is None:
        return None
    dt = datetime.fromisoformat(text)
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def _screenshot(page: Path, png: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("CI"):
            pytest.fail("CI must render the report: chromium missing (scripts/setup.sh)")
        pytest.skip("needs Debian's chromium")
    profile = tempfile.mkdtemp(prefix="ss-chromium-")
    try:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-dev-shm-usage", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--no-first-run",
                        f"--user-data-dir={profile}", f"--screenshot={png}",
                        "--window-size=1200,2600", page.as_uri()],
                       check=True, capture_output=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_the_report_of_a_real_run_matches_the_store_and_renders(make_cluster) -> None:  # type: ignore[no-untyped-def]
    t_start = datetime.now(UTC)
    c, proxy = make_cluster(pools=[PoolSpec("gpu-cap", "cap-", 5)], suspend_time=600,
                            capacity={"unavailable_ttl_s": 5},
                            reservations={"accumulate_after_s": 10,
                                          "hold_budget_gpu_hours": 1000, "max_hold_s": 500},
                            extra_config={"prices": {"p5.48xlarge": {"spot": 40.0,
                                                                     "on-demand": 98.0}}})
    c.slurm("scontrol", "create", "reservation", f"ReservationName={ADMIN_RES}",
            "StartTime=now", "Duration=300", "Nodes=cap-5", "Users=root")
    # 1. a capacity error: the first launch gets none of its instances
    proxy.faults.append(Fault("CreateFleet", "none"))
    with small_job_stream(c) as small:
        # 2. a starving gang that runs through a reservation
        wait_for("all four nodes busy with small jobs", lambda: _all_busy(c), 240)
        gang = _gang(c)
        c.wait_job(gang, {"RUNNING", "COMPLETED"}, 180)
    c.wait_job(gang, {"COMPLETED"}, 60)
    assert small
    # 3. a spot interruption under a running job: it is requeued (after the gang: Slurm
    # 22.05 can lose a node's GPU count when a job requeued seconds after starting runs
    # again elsewhere, which would starve the gang for reasons of Slurm's own)
    victim_job = c.sbatch("-N", "1", "--gres=gpu:8", "-p", "gpu-cap", "--wrap", "sleep 300")
    c.wait_job(victim_job, {"RUNNING"}, 120)
    node = c.job(victim_job)["NodeList"]
    victim = next(i for i in c.cluster_instances(("running",))
                  if {t["Key"]: t["Value"] for t in i.get("Tags", [])}
                  .get("slurmscale:node") == node)
    c.send_event(spot_warning(victim["InstanceId"]))
    wait_for("the interruption recorded (job requeued)",
             lambda: any(e["kind"] == "job_requeued" for e in c.events()), 60)
    assert c.job(victim_job).get("Restarts") == "1"
    c.slurm("scancel", str(victim_job))

    out = c.root / "report.html"
    # everything above is recorded; the report floors --until to whole seconds
    end = datetime.now(UTC) + timedelta(seconds=1)
    window = ["--since", t_start.isoformat(), "--until", end.isoformat()]
    r = c.cli("report", *window, "--format", "html", "-o", str(out))
    assert r.returncode == 0 and r.stdout == "", r.stderr
    rep = json.loads(c.cli("report", *window, "--format", "json").stdout)

    # recompute from the store's tables, independently of slurmscale's code
    assert c.cfg is not None
    db = sqlite3.connect(c.cfg.store_url.removeprefix("sqlite:///"))
    q = db.execute
    failed = q("select pool, error_code, count(*) from gangs where status='failed' "
               "group by 1, 2").fetchall()
    assert [(e["pool"], e["code"], e["gangs"]) for e in rep["capacity_errors"]] == failed
    assert failed and failed[0][1] == "InsufficientInstanceCapacity"
    assert rep["launches"] == q("select count(*) from gangs where status='launched'"
                                ).fetchone()[0] >= 1
    assert rep["preemptions"] == q("select count(*) from preemptions").fetchone()[0] >= 1
    holds = q("select name, spent_gpu_s from holds").fetchall()
    assert [h["name"] for h in rep["reservations"]] == [n for n, _ in holds] and holds
    assert rep["reservation_idle_gpu_hours"] == pytest.approx(
        sum(s for _, s in holds) / 3600, abs=1e-3)
    until = _ts(rep["until"])
    since_s = _ts(rep["since"])
    assert until and since_s
    node_h = sum(max(0.0, min(_ts(end) or until, until) - max(_ts(start), since_s)) / 3600
                 for start, end in q("select launched_at, terminated_at from instances"))
    pool = rep["pools"][0]
    assert pool["node_hours"] == pytest.approx(node_h, abs=1e-3)
    assert pool["gpu_hours_provisioned"] == pytest.approx(8 * node_h, abs=1e-3)
    assert pool["est_cost_usd"] == pytest.approx(40.0 * node_h, abs=0.01)
    jobs = q("select num_nodes, submitted_at, started_at from jobs").fetchall()
    waits = {n: [_ts(st) - _ts(sub) for nodes, sub, st in jobs  # type: ignore[operator]
                 if (nodes == 1) == (n == 1)] for n in (1, 4)}
    one = rep["waits"][0]
    assert one["jobs"] == len(waits[1]) >= 4
    assert one["p50_s"] == pytest.approx(_nearest_rank(waits[1], 50), abs=1e-3)
    assert one["p95_s"] == pytest.approx(_nearest_rank(waits[1], 95), abs=1e-3)
    gang_row = rep["gang_time_to_start"]
    assert gang_row["jobs"] == len(waits[4]) == 1
    assert gang_row["max_s"] == pytest.approx(waits[4][0], abs=1e-3)

    page = out.read_text()
    for needle in ("InsufficientInstanceCapacity", rep["reservations"][0]["name"],
                   f"{pool['gpu_hours_provisioned']:,.2f}", "<svg"):
        assert needle in page, needle
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(out, ARTIFACTS / "report.html")
    png = ARTIFACTS / "report.png"
    png.unlink(missing_ok=True)
    _screenshot(out, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    print(f"report: {rep['launches']} launches, {len(failed)} capacity error(s), "
          f"{rep['preemptions']} preemption(s), {len(holds)} reservation(s), "
          f"{one['jobs']} 1-node jobs (wait p50 {one['p50_s']:.0f}s), gang waited "
          f"{gang_row['max_s']:.0f}s; screenshot {png}")
    db.close()

    # the status screen on the same cluster: 80 columns, the pool, no error
    st = c.cli("status")
    assert st.returncode == 0, st.stderr
    assert "gpu-cap" in st.stdout and max(map(len, st.stdout.splitlines())) <= 80
    data = json.loads(c.cli("status", "--json").stdout)
    pool_now = data["pools"][0]
    assert data["daemon"]["role"] == "leader" and pool_now["name"] == "gpu-cap"
    assert 0 <= pool_now["nodes_up"] <= 5 and pool_now["pending_gpus"] == 0
