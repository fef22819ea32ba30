"""Leaked instances on a real local cluster: an instance tagged for this cluster that no node
expects is terminated once past the grace period; an untagged instance and another cluster's
instance survive every reconcile pass."""

from __future__ import annotations

import pytest

from slurmscale.cloud.protocol import TAG_CLUSTER, TAG_NODE
from slurmscale.localcluster.procs import wait_for

pytestmark = pytest.mark.slurm


def _run(c, tags: dict[str, str]) -> str:  # type: ignore[no-untyped-def]
    spec = [{"ResourceType": "instance",
             "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    r = c.ec2().run_instances(ImageId="ami-0a1b2c3d4e5f60718", MinCount=1, MaxCount=1,
                              InstanceType="p5.48xlarge", TagSpecifications=spec)
    return str(r["Instances"][0]["InstanceId"])


def test_a_leak_is_terminated_and_foreign_instances_are_never_touched(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, _proxy = make_cluster(daemon={"leak_grace_s": 5})
    # a node name no pool has, so the instance agent never boots a slurmd for it
    leak = _run(c, {TAG_CLUSTER: c.name, TAG_NODE: "lost-1"})
    foreign = _run(c, {})
    other = _run(c, {TAG_CLUSTER: "someone-else", TAG_NODE: "spot-1"})

    def state(iid: str) -> str:
        r = c.ec2().describe_instances(InstanceIds=[iid])
        return str(r["Reservations"][0]["Instances"][0]["State"]["Name"])

    wait_for("the leak terminated", lambda: state(leak) in ("shutting-down", "terminated"), 90)
    kinds = [e["kind"] for e in c.events()]
    assert "leak_terminated" in kinds
    msg = next(e["message"] for e in c.events() if e["kind"] == "leak_terminated")
    assert leak in msg and "lost-1" in msg
    # a normal job still launches and completes, and its instance is not taken for a leak
    job = c.sbatch("-p", "gpu-spot", "--gres=gpu:8", "-N", "1", "--wrap", "sleep 8")
    assert c.wait_job(job, {"COMPLETED"}, 180) == "COMPLETED"
    assert kinds.count("leak_terminated") == [e["kind"] for e in c.events()].count(
        "leak_terminated") == 1
    assert state(foreign) == "running" and state(other) == "running"
