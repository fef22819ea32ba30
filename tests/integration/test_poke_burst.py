"""A burst of hook pokes on a real Slurm: 200 pokes in 10 s while a finished gang's idle nodes
are released. The daemon runs a bounded number of passes (one at a time, one queued, at
least 0.25 s apart) and decides the release once: Slurm's pending power-down (POWER_DOWN,
before POWERING_DOWN) is not idle capacity to release again (the same scale_down used to be
logged about 16 times in one second)."""

from __future__ import annotations

import time

import pytest

from slurmscale.api_client import poke
from slurmscale.hostlists import expand
from slurmscale.localcluster.procs import wait_for

pytestmark = pytest.mark.slurm


def test_two_hundred_pokes_are_a_bounded_number_of_passes_and_one_release(
        make_cluster) -> None:
    c, _proxy = make_cluster(tick_seconds=5.0, min_idle=3.0, max_idle=6.0)
    job = c.sbatch("-N", "4", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 1")
    assert c.wait_job(job, {"COMPLETED"}, 150) == "COMPLETED"
    sock = str(c.root / "run" / "slurmscale.sock")
    log = c.root / "log" / "slurmscale-daemon.log"
    before = log.read_text().count("tick: ")
    t0 = time.monotonic()
    answered = 0
    for i in range(200):  # 20 a second for 10 s, as a burst of resume hooks pokes
        answered += poke(sock, timeout=1.0)
        time.sleep(max(0.0, t0 + (i + 1) * 0.05 - time.monotonic()))
    burst = time.monotonic() - t0
    wait_for("the idle gang released", lambda: not c.cluster_instances(), 120)
    releases = [e for e in c.events() if e["kind"] == "scale_down"]
    nodes = [n for e in releases for n in expand(e["node"] or "")]
    print(f"200 pokes in {burst:.1f} s ({answered} answered); scale_down events: "
          f"{[e['node'] for e in releases]}")
    assert answered == 200
    assert len(nodes) == 4 and sorted(set(nodes)) == sorted(nodes), "each release decided once"
    # (passes that did something are logged as `tick:` lines; an idle pass is not)
    acted = log.read_text().count("tick: ") - before
    assert acted <= 10, f"{acted} passes acted during the burst"
