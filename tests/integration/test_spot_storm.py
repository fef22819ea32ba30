"""Spot storms and silent reclaims on a real Slurm, with the EC2 side at the moto boundary.

Storm: six single-node jobs submitted to both partitions run on six spot nodes; the spot pool's
on-demand buffer (50 % of the GPUs in use) keeps three on-demand nodes warm. Warnings arrive for
three spot nodes at once -> those three jobs are requeued (restart count 1, never FAILED) and
restart on the warm on-demand nodes without any new launch; all six complete.

Silent reclaim: an instance that EC2 reports terminated with Server.SpotInstanceTermination,
with no event on the queue, is found on the reconcile pass and its job requeued.

Steering: a job preempted max_preemptions times runs on the on-demand partition only; a
spot-only job stuck while spot has no capacity gets the on-demand partition added (when the
admin allows it)."""

from __future__ import annotations

import time

import pytest

from slurmscale.cloud.protocol import TAG_NODE
from slurmscale.hostlists import expand
from slurmscale.localcluster.cluster import LocalCluster
from slurmscale.localcluster.options import PoolSpec
from slurmscale.localcluster.procs import wait_for
from tests.support.eventbridge_messages import spot_warning

pytestmark = pytest.mark.slurm

BOTH = ("-p", "gpu-spot,gpu-od", "--gres=gpu:8", "-N", "1")


def _instances(c: LocalCluster) -> dict[str, str]:
    """node -> running instance id"""
    out = {}
    for inst in c.cluster_instances(("running",)):
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        out[tags.get(TAG_NODE, "")] = str(inst["InstanceId"])
    return out


def _idle(c: LocalCluster, node: str) -> bool:
    st = c.node(node).get("State", "")
    return st.startswith("IDLE") and "POWER" not in st and "DRAIN" not in st


def test_a_storm_requeues_onto_the_warm_on_demand_buffer(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, proxy = make_cluster(
        pools=[PoolSpec("gpu-spot", "spot-", 6, fallback_pool="gpu-od",
                        spot={"on_demand_buffer": 0.5}),
               PoolSpec("gpu-od", "od-", 3, capacity_type="on-demand")],
        cred_expire=10,  # requeued jobs may start again 10 s later
        # Slurm's SuspendTime (the backstop) powers down a node idle that long, the buffer's
        # warm nodes too: the cluster's default 30 s raced the requeued jobs' restart on a
        # loaded machine (a warm node went 36 s idle, was suspended, and re-warmed by a launch)
        suspend_time=300)
    jobs = [c.sbatch(*BOTH, "--wrap", "sleep 60") for _ in range(6)]
    for j in jobs:
        c.wait_job(j, {"RUNNING"}, 150)
    on = {j: c.job(j)["NodeList"] for j in jobs}
    assert all(n.startswith("spot-") for n in on.values()), on
    # 6 busy spot nodes x 8 GPUs, 50 % -> 24 GPUs -> three idle on-demand nodes
    wait_for("three warm on-demand nodes",
             lambda: all(_idle(c, f"od-{i}") for i in (1, 2, 3)), 150)
    assert any(e["kind"] == "buffer_warmed" for e in c.events())
    launches = len(proxy.fleet_calls())

    inst = _instances(c)
    victims = sorted(on.values())[:3]
    hit = [j for j in jobs if on[j] in victims]
    t0 = time.monotonic()
    for node in victims:
        c.send_event(spot_warning(inst[node]))

    def restarted_on_demand() -> bool:
        return all(c.job(j).get("Restarts") == "1" and c.job(j)["JobState"] == "RUNNING"
                   and expand(c.job(j)["NodeList"])[0].startswith("od-") for j in hit)

    wait_for("the three requeued jobs running on the buffer", restarted_on_demand, 120)
    restart_s = time.monotonic() - t0
    assert len(proxy.fleet_calls()) == launches, "the buffer was warm: no launch was needed"
    for j in jobs:
        assert c.wait_job(j, {"COMPLETED"}, 240) == "COMPLETED"  # fails at once on FAILED
    assert sorted(c.job(j)["Restarts"] for j in jobs) == ["0"] * 3 + ["1"] * 3
    kinds = [e["kind"] for e in c.events()]
    assert kinds.count("job_requeued") == 3 and kinds.count("node_evacuated") == 3
    print(f"storm: 3 jobs restarted on warm on-demand nodes {restart_s:.1f}s after the "
          "warnings, no launch needed")


def test_an_instance_reclaimed_without_notice_is_found_and_its_job_requeued(make_cluster) -> None:  # type: ignore[no-untyped-def]
    # the reclaim puts gpu-spot in capacity backoff; this spot-only job waits it out
    c, proxy = make_cluster(cred_expire=10, capacity={"unavailable_ttl_s": 5,
                                                      "max_unavailable_ttl_s": 10})
    job = c.sbatch("-p", "gpu-spot", "--gres=gpu:8", "-N", "1", "--wrap", "sleep 15")
    c.wait_job(job, {"RUNNING"}, 150)
    node = c.job(job)["NodeList"]
    iid = _instances(c)[node]
    proxy.reclaimed.add(iid)  # EC2 now reports it terminated: Server.SpotInstanceTermination
    wait_for("the job requeued", lambda: c.job(job).get("Restarts") == "1", 60)
    assert c.wait_job(job, {"COMPLETED"}, 240) == "COMPLETED"
    msgs = [e["message"] for e in c.events() if e["kind"] == "node_evacuated"]
    assert len(msgs) == 1 and "Server.SpotInstanceTermination" in msgs[0] and iid in msgs[0]


def test_a_job_preempted_max_preemptions_times_moves_to_on_demand(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, _proxy = make_cluster(
        pools=[PoolSpec("gpu-spot", "spot-", 2, fallback_pool="gpu-od",
                        spot={"max_preemptions": 1, "on_demand_buffer": 0}),
               PoolSpec("gpu-od", "od-", 1, capacity_type="on-demand")],
        cred_expire=10)
    job = c.sbatch("-p", "gpu-spot", "--gres=gpu:8", "-N", "1", "--wrap", "sleep 15")
    c.wait_job(job, {"RUNNING"}, 150)
    c.send_event(spot_warning(_instances(c)[c.job(job)["NodeList"]]))
    wait_for("the job moved to gpu-od", lambda: c.job(job)["Partition"] == "gpu-od", 60)
    assert c.wait_job(job, {"COMPLETED"}, 240) == "COMPLETED"
    info = c.job(job)
    assert info["NodeList"].startswith("od-") and info["Restarts"] == "1", info
    assert any(e["kind"] == "job_steered" for e in c.events())


def test_a_spot_only_job_gets_the_fallback_partition_while_spot_is_out(make_cluster) -> None:  # type: ignore[no-untyped-def]
    from tests.support.ec2_proxy import Fault

    c, proxy = make_cluster(
        pools=[PoolSpec("gpu-spot", "spot-", 2, fallback_pool="gpu-od",
                        spot={"allow_partition_rewrite": True, "fallback_after_s": 5,
                              "on_demand_buffer": 0}),
               PoolSpec("gpu-od", "od-", 1, capacity_type="on-demand")],
        capacity={"unavailable_ttl_s": 600}, cred_expire=10)
    proxy.faults.append(Fault("CreateFleet", "none", code="InsufficientInstanceCapacity",
                              capacity_type="spot"))
    job = c.sbatch("-p", "gpu-spot", "--gres=gpu:8", "-N", "1", "--wrap", "sleep 1")
    # (Slurm may start it in gpu-od within milliseconds of the rewrite, and a started job's
    # Partition is the one it runs in: both say the fallback was added)
    wait_for("the fallback partition added",
             lambda: "gpu-od" in c.job(job)["Partition"].split(","), 120)
    assert c.wait_job(job, {"COMPLETED"}, 180) == "COMPLETED"
    assert c.job(job)["NodeList"].startswith("od-")
    rewritten = [e["message"] for e in c.events() if e["kind"] == "job_partition_rewritten"]
    assert len(rewritten) == 1 and "fallback_after_s 5" in rewritten[0]
