"""A spot interruption on a real Slurm: a running 2-node gang gets an EC2 Spot Instance
Interruption Warning (an SQS message in EventBridge's format, as the rule would deliver it) for
one of its nodes -> the job is requeued (restart count 1, never FAILED), the node drained and
powered down, its instance terminated, and the job completes on new capacity. Malformed and
foreign messages are dropped with an event."""

from __future__ import annotations

import pytest

from slurmscale.cloud.protocol import TAG_NODE
from slurmscale.hostlists import expand
from slurmscale.localcluster.cluster import LocalCluster
from slurmscale.localcluster.procs import wait_for
from slurmscale.slurm.reasons import Why
from tests.support.eventbridge_messages import spot_warning

pytestmark = pytest.mark.slurm


def _instance_of(c: LocalCluster, node: str) -> str:
    for inst in c.cluster_instances(("running",)):
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        if tags.get(TAG_NODE) == node:
            return str(inst["InstanceId"])
    raise AssertionError(f"no running instance for {node}")


def test_a_spot_warning_requeues_the_gang_which_then_completes(make_cluster) -> None:  # type: ignore[no-untyped-def]
    spot_warning_scenario(make_cluster)


def spot_warning_scenario(make_cluster, slurm_root: str = "/") -> None:  # type: ignore[no-untyped-def]
    """(test_slurm_releases runs it on the newer Slurms.)"""
    # the warning puts gpu-spot in capacity backoff; this spot-only job waits it out
    c, _proxy = make_cluster(capacity={"unavailable_ttl_s": 5, "max_unavailable_ttl_s": 10},
                             slurm_root=slurm_root)
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 20")
    c.wait_job(job, {"RUNNING"}, 150)
    victim = expand(c.job(job)["NodeList"])[0]
    iid = _instance_of(c, victim)

    c.send_event("{this is not json")
    c.send_event(spot_warning("i-00000000000000fe"))  # not ours
    c.send_event(spot_warning(iid))

    wait_for("the job requeued once",
             lambda: c.job(job).get("Restarts") == "1", 60)
    info = c.node(victim)
    assert Why.INTERRUPTED.value in info.get("Reason", "") or "POWER" in info.get("State", ""), info
    wait_for(f"{iid} terminated", lambda: iid not in
             {i["InstanceId"] for i in c.cluster_instances(("pending", "running"))}, 120)
    state = c.wait_job(job, {"COMPLETED"}, 240)  # wait_job fails at once on FAILED
    assert state == "COMPLETED" and c.job(job)["Restarts"] == "1"

    events = c.events()
    kinds = [e["kind"] for e in events]
    assert kinds.count("event_dropped") == 2
    assert "job_requeued" in kinds and "node_evacuated" in kinds
    assert kinds.count("capacity_unavailable") == 1
    dropped = " ".join(e["message"] for e in events if e["kind"] == "event_dropped")
    assert "not JSON" in dropped and "i-00000000000000fe" in dropped
    # the interrupted node came back to service once powered down
    wait_for(f"{victim} undrained", lambda: "DRAIN" not in c.node(victim).get("State", ""), 120)
