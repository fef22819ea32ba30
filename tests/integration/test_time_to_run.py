"""Time to run on a real Slurm with moto (issue 67, item 1): single nodes launched with a
boot slow enough to watch, their launches in flight in `status`, then each phase in the
report's table and the metrics once the jobs run. The four-node gang's own table is shown
in tests/integration/test_elastic_loop.py."""

from __future__ import annotations

import json

import pytest

from slurmscale.localcluster.procs import wait_for

pytestmark = pytest.mark.slurm

BOOT_DELAY_S = 12.0  # the local instances' boot: long enough for `status` to see it


def test_launches_in_flight_in_status_then_each_phase_in_the_report(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, _ = make_cluster(boot_delay=BOOT_DELAY_S, metrics=True)
    jobs = [c.sbatch("-N", "1", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 10")
            for _ in range(2)]

    def in_flight() -> list[dict[str, str]]:
        return json.loads(c.cli("status", "--json").stdout).get("launches_in_flight") or []
    wait_for("the launches in flight in status", in_flight, 60)
    flight = in_flight()
    assert {f["pool"] for f in flight} == {"gpu-spot"}
    assert all(f["where"].startswith("booting ") for f in flight), flight
    assert "launches in flight:" in c.cli("status").stdout

    for job in jobs:
        c.wait_job(job, {"RUNNING", "COMPLETED"}, 120)

    def measured() -> dict[str, dict[str, float]]:
        rep = json.loads(c.cli("report", "--since", "1h", "--format", "json").stdout)
        single = [t for t in rep["time_to_run"] if t["kind"] == "single"]
        return {f["phase"]: f for f in single[0]["phases"]} if single else {}
    wait_for("both launches' first jobs in the report",
             lambda: measured().get("sbatch->running", {}).get("n") == 2, 60)
    figures = measured()
    assert all(figures[ph]["n"] == 2 for ph in ("resume->fleet", "boot", "tag", "checks",
                                                 "slurmd", "register", "->job"))
    # the boot is the agent's delay, then the bootstrap starts: the phase holds it
    assert BOOT_DELAY_S - 1 <= figures["boot"]["median_s"] < BOOT_DELAY_S + 30
    assert figures["sbatch->running"]["median_s"] >= BOOT_DELAY_S
    assert json.loads(c.cli("status", "--json").stdout)["launches_in_flight"] == []
    text = c.scrape()
    assert ('slurmscale_launch_phase_seconds_count{kind="single",phase="boot",'
            'pool="gpu-spot"} 2.0') in text
    print("single nodes, time to run (median s): " + ", ".join(
        f"{k} {v['median_s']:.1f}" for k, v in figures.items() if v["median_s"] is not None))
