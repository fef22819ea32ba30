"""EC2's network topology into Slurm's, on a real Slurm 22.05 (topology/tree): the test proxy
answers DescribeInstanceTopology in EC2's shape, laying four nodes out under two leaf network
nodes (od-1 and od-3 under one, od-2 and od-4 under the other); the daemon renders
topology.conf, reconfigures slurmctld once for the burst, and a 2-node job then runs on two
nodes that share a leaf. Without the topology Slurm takes the first two idle nodes, od-[1-2],
which share none."""

from __future__ import annotations

import pytest

from slurmscale.localcluster.options import PoolSpec
from slurmscale.localcluster.procs import wait_for

pytestmark = pytest.mark.slurm

TOP = "nn-0a1b2c3d4e5f60001"
SPINE_A, LEAF_A = "nn-0a1b2c3d4e5f600a2", "nn-0a1b2c3d4e5f600a3"
SPINE_B, LEAF_B = "nn-0a1b2c3d4e5f600b2", "nn-0a1b2c3d4e5f600b3"


def test_ec2s_topology_places_a_gang_under_one_leaf(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, proxy = make_cluster(
        pools=[PoolSpec("gpu-od", "od-", 4, capacity_type="on-demand")],
        extra_config={"topology": {"read_interval_s": 2, "reconfigure_interval_s": 5}},
        min_idle=600, max_idle=900, suspend_time=1200)
    proxy.capacity.topology_by_node = {
        "od-1": (TOP, SPINE_A, LEAF_A), "od-3": (TOP, SPINE_A, LEAF_A),
        "od-2": (TOP, SPINE_B, LEAF_B), "od-4": (TOP, SPINE_B, LEAF_B)}
    assert "TopologyPlugin=topology/tree" in c.conf.read_text()
    first = c.sbatch("-N", "4", "-p", "gpu-od", "--gres=gpu:8", "--wrap", "sleep 1")
    c.wait_job(first, {"COMPLETED"}, 180)

    def placed() -> bool:
        return any(e["kind"] == "topology_updated" and "4 node(s) placed" in e["message"]
                   for e in c.events())
    wait_for("the topology of the four nodes in Slurm", placed, 60)
    shown = c.slurm("scontrol", "show", "topology")
    assert f"SwitchName={LEAF_A}" in shown and "Nodes=od-[1,3]" in shown, shown
    assert f"SwitchName={LEAF_B}" in shown and "Nodes=od-[2,4]" in shown, shown
    for n in range(1, 5):  # still up and idle: the gang starts on kept nodes
        node = c.node(f"od-{n}")
        assert "IDLE" in node["State"] and "POWER" not in node["State"], node
        # the reconfigure kept what slurmscale set at the resume (slurm.conf has localhost)
        assert (node["NodeAddr"], node["NodeHostName"]) == ("127.0.0.1", f"od-{n}"), node

    gang = c.sbatch("-N", "2", "-p", "gpu-od", "--gres=gpu:8", "--wrap", "sleep 5")
    c.wait_job(gang, {"RUNNING", "COMPLETED"}, 60)
    nodes = c.job(gang)["NodeList"]
    assert nodes in ("od-[1,3]", "od-[2,4]"), f"the gang spans two leaves: {nodes}"
    events = c.events()
    updates = [e for e in events if e["kind"] == "topology_updated"]
    assert len(updates) <= 3, [e["message"] for e in updates]
    reads = [x for x in proxy.calls if x.action == "DescribeInstanceTopology"]
    assert reads and all(x.status == 200 for x in reads)
    print(f"topology: the gang on {nodes}; {len(updates)} reconfigure(s), "
          f"{len(reads)} DescribeInstanceTopology call(s)")
