"""A dependency down: slurmctld stopped for a minute while a gang runs, or the EC2 endpoint
dropping every connection while a gang waits for its nodes. The daemon keeps running,
terminates nothing for lack of information, and catches up. (The database restarting is in
test_ha.py, on PostgreSQL.)"""

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


def test_ec2_endpoint_down_defers_the_launch_and_the_job_runs_after(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, proxy = make_cluster()
    first = c.sbatch("-N", "1", "--gres=gpu:8", "-p", "gpu-od", "--wrap", "sleep 300")
    c.wait_job(first, {"RUNNING"}, 150)
    running = {i["InstanceId"] for i in c.cluster_instances(("running",))}
    proxy.refusing = True
    gang = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 1")

    def deferred_three_times() -> bool:
        assert c.procs.running("daemon"), "the daemon died with EC2 unreachable"
        return [e["kind"] for e in c.events()].count("launch_deferred") >= 3
    wait_for("three deferred attempts (backing off)", deferred_three_times, 90, interval=1.0)
    # still waiting on its powering-up nodes: not failed, not requeued
    assert c.job_state(gang) == "CONFIGURING" and c.job(gang).get("Restarts") == "0"
    assert {i["InstanceId"] for i in c.cluster_instances(("running",))} == running
    refused = sum(1 for x in proxy.calls if x.status == -1)
    proxy.refusing = False

    assert c.wait_job(gang, {"COMPLETED"}, 150) == "COMPLETED"
    assert c.job(gang).get("Restarts") == "0", "the gang started late, never requeued"
    assert len(proxy.fleet_calls()) == 2, "one launch for each job"
    kinds = [e["kind"] for e in c.events()]
    assert "launch_failed" not in kinds and "leak_terminated" not in kinds
    assert c.job_state(first) == "RUNNING"
    print(f"EC2 endpoint down: {refused} calls refused, launch deferred "
          f"{kinds.count('launch_deferred')} times, gang ran after, 0 requeues")
