"""Governed mode on a real Slurm: nodes above the target are held (drained with slurmscale's
reason), a pending 4-node job raises the target by 4 in one decision, `slurmscale plan` says so
before the daemon acts, and the job runs on one 4-node fleet. Afterwards slurmscale powers the
idle nodes down itself and holds them again."""

from __future__ import annotations

import json

import pytest

from slurmscale.localcluster.cluster import LocalCluster
from slurmscale.localcluster.options import PoolSpec
from slurmscale.localcluster.procs import wait_for
from slurmscale.slurm.reasons import Why

pytestmark = pytest.mark.slurm

NODES = [f"gov-{i}" for i in range(1, 7)]


def _held(c: LocalCluster) -> list[str]:
    out = []
    for n in NODES:
        info = c.node(n)
        if "DRAIN" in info.get("State", "") and info.get("Reason", "").startswith(Why.HELD.value):
            out.append(n)
    return out


def test_governed_pool_raises_its_target_by_a_whole_gang_in_one_decision(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, proxy = make_cluster(pools=[PoolSpec("gpu-gov", "gov-", 6,
                                            policy={"mode": "governed"})])
    # Target 0 (min_nodes): every node is held out of scheduling.
    wait_for("all six nodes held", lambda: _held(c) == NODES, 60)

    c.stop_daemon()
    job = c.sbatch("-N", "4", "--gres=gpu:8", "-p", "gpu-gov", "--wrap", "sleep 3")
    wait_for("job pending", lambda: c.job_state(job) == "PENDING", 30)
    assert proxy.fleet_calls() == [], "held nodes are not powered up"

    # The plan, before the daemon acts: one raise of the target by the gang's four nodes.
    def plan() -> dict | None:
        p = json.loads(c.cli("plan", "--json").stdout)
        return p if p["pools"]["gpu-gov"]["pending_gangs"] else None

    p = wait_for("plan sees the pending gang", plan, 30)
    raises = [a for a in p["actions"] if a["kind"] == "raise_target"]
    assert len(raises) == 1 and raises[0]["count"] == 4, p["actions"]
    assert f"{job} (4 nodes)" in raises[0]["reason"] and "0 -> 4" in raises[0]["reason"]
    (unhold,) = [a for a in p["actions"] if a["kind"] == "unhold"]
    assert unhold["nodes"] == NODES[:4]
    assert _held(c) == NODES, "plan changes nothing"

    c.start_daemon()
    c.wait_job(job, {"RUNNING", "COMPLETED"}, 120)
    c.wait_job(job, {"COMPLETED"}, 120)
    calls = proxy.fleet_calls()
    assert [x.params.get("TargetCapacitySpecification.TotalTargetCapacity") for x in calls] == [
        "4"], "one CreateFleet for the whole gang"
    assert _held(c) == NODES[4:], "nodes above the target stay held"
    raised = [e for e in c.events() if e["kind"] == "target_raised"]
    assert len(raised) == 1 and "0 -> 4" in raised[0]["message"]

    # slurmscale (not Slurm's SuspendTime backstop) powers the idle nodes down, lowers the
    # target, and holds them again.
    wait_for("instances released", lambda: not c.cluster_instances(), 120)
    wait_for("all six held again", lambda: _held(c) == NODES, 90)
    kinds = [e["kind"] for e in c.events()]
    assert "scale_down" in kinds and "target_lowered" in kinds
