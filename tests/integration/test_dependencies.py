"""A dependency down: slurmctld stopped for a minute while a gang runs. The daemon keeps
running, terminates nothing for lack of information, records the outage once, and catches up:
the job completes and its nodes are released afterwards."""

from __future__ import annotations

import time

import pytest

from slurmscale.localcluster.procs import wait_for

pytestmark = pytest.mark.slurm


def test_slurmctld_down_for_a_minute_terminates_nothing(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, _proxy = make_cluster()
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 75")
    c.wait_job(job, {"RUNNING"}, 150)
    running = {i["InstanceId"] for i in c.cluster_instances(("running",))}
    assert len(running) == 2
    c.stop_slurmctld()
    down_until = time.monotonic() + 60

    def outage_over() -> bool:
        # every poll during the outage: the daemon alive, every instance still running
        assert c.procs.running("daemon"), "the daemon died while slurmctld was down"
        now_running = {i["InstanceId"] for i in c.cluster_instances(("running",))}
        assert now_running == running, f"terminated during the outage: {running - now_running}"
        return time.monotonic() >= down_until

    wait_for("a minute without slurmctld", outage_over, 90, interval=2.0)
    c.start_slurmctld()
    assert c.wait_job(job, {"COMPLETED"}, 180) == "COMPLETED"
    wait_for("the nodes released afterwards",
             lambda: not c.cluster_instances(("pending", "running")), 120)
    kinds = [e["kind"] for e in c.events()]
    assert kinds.count("slurm_read_failed") == 1 and "slurm_read_ok" in kinds
    assert "leak_terminated" not in kinds and "node_evacuated" not in kinds
