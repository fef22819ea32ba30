"""EC2's network topology into Slurm's.

On a real Slurm 22.05 (topology/tree): the test proxy answers DescribeInstanceTopology in
EC2's shape, laying four nodes out under two leaf network nodes (od-1 and od-3 under one, od-2
and od-4 under the other); the daemon renders topology.conf, reconfigures slurmctld once for
the burst, and a 2-node job then runs on two nodes that share a leaf. Without the topology
Slurm takes the first two idle nodes, od-[1-2], which share none.

On a real Slurm 26.05 (topology/block), before the launch: three reservations of one type
and AZ, one free instance under one spine, one under another, two under a third; a gang of
2 that must share a spine goes whole into the third (never one instance into each of the
first two, which is where it goes without the setting), and its nodes are one block in
Slurm's topology.conf, from the instances' own topology."""

from __future__ import annotations

import pytest

from slurmscale.hostlists import expand
from slurmscale.localcluster.options import PoolSpec
from slurmscale.localcluster.procs import wait_for
from tests.integration.slurm_releases import slurm_root
from tests.support.ec2_capacity import Reservation

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
    assert "TopologyPlugin=topology/tree" in c.slurmscale_conf.read_text()
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


CR_A, CR_B, CR_C = "cr-0a1b2c3d4e5f6000a", "cr-0a1b2c3d4e5f6000b", "cr-0a1b2c3d4e5f6000c"
LEAF_C = "nn-0a1b2c3d4e5f600c3"


def test_a_gang_goes_whole_into_the_reservation_under_one_spine_and_is_one_block(
        make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, proxy = make_cluster(
        slurm_root=slurm_root("26.05"), start_daemon=False,
        pools=[PoolSpec("gpu-od", "od-", 4, capacity_type="on-demand", extra={
            "capacity_reservations": {"ids": [CR_A, CR_B, CR_C], "gang_network": "spine"}})],
        extra_config={"topology": {"plugin": "block", "read_interval_s": 2,
                                   "reconfigure_interval_s": 5}},
        min_idle=600, max_idle=900, suspend_time=1200)
    for rid, spine, leaf, free in ((CR_A, SPINE_A, LEAF_A, 1), (CR_B, SPINE_B, LEAF_B, 1),
                                   (CR_C, "nn-0a1b2c3d4e5f600c2", LEAF_C, 2)):
        proxy.capacity.add(Reservation(rid, "p5.48xlarge", free,
                                       network_nodes=(TOP, spine, leaf)))
    c.start_daemon()
    assert "TopologyPlugin=topology/block" in c.slurmscale_conf.read_text()
    job = c.sbatch("-N", "2", "-p", "gpu-od", "--gres=gpu:8", "--wrap", "sleep 1")
    c.wait_job(job, {"COMPLETED"}, 180)
    nodes = expand(c.job(job)["NodeList"])
    homes = proxy.capacity.in_reservation()
    assert sorted(homes.values()) == [CR_C, CR_C], f"split across spines: {homes}"
    (asked,) = [e["message"] for e in c.events() if e["kind"] == "launch_requested"]
    assert f"under one spine (nn-0a1b2c3d4e5f600c2) (2 free in {CR_C})" in asked, asked
    reads = [x for x in proxy.calls if x.action == "DescribeCapacityReservationTopology"]
    assert reads and all(x.status == 200 for x in reads)
    plan = c.cli("plan").stdout  # the daemon's plan says which and why
    assert f"launch       job {job} gang {c.job(job)['NodeList']}" in plan and \
        "-> reserved: fits whole in reserved p5.48xlarge in us-east-1a under one spine" in plan, \
        plan

    def placed() -> bool:
        return any(e["kind"] == "topology_updated" and "2 node(s) placed" in e["message"]
                   for e in c.events())
    wait_for("the gang's nodes in Slurm's topology", placed, 60)
    shown = c.slurm("scontrol", "show", "topology")
    assert f"BlockName={LEAF_C}" in shown and f"Nodes={c.job(job)['NodeList']}" in shown, shown
    print(f"topology/block: the gang on {nodes} in {CR_C}, {len(reads)} reservation "
          f"topology read(s); scontrol show topology:\n{shown}")


def test_the_daemon_in_the_shipped_units_sandbox_writes_topology_conf_only_as_the_unit_allows(
        make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Issue 64: the shipped unit's ProtectSystem=full makes /etc read-only for the daemon,
    whose `topology:` rewrites /etc/slurm/topology.conf. Run in the unit's own sandbox (its
    ProtectSystem=, ProtectHome= and ReadWritePaths= lines, read from the shipped file:
    tests/support/unit_sandbox.py), with the cluster's configuration directory as /etc/slurm:
    without the unit's `ReadWritePaths=-/etc/slurm/topology.conf` the write fails (and says
    so); with the unit as shipped, the same daemon writes it and Slurm takes it."""
    from tests.support.unit_sandbox import sandbox_prefix

    c, proxy = make_cluster(
        pools=[PoolSpec("gpu-od", "od-", 2, capacity_type="on-demand")],
        extra_config={"topology": {"read_interval_s": 2, "reconfigure_interval_s": 2}},
        min_idle=600, max_idle=900, suspend_time=1200, start_daemon=False)
    proxy.capacity.topology_by_node = {"od-1": (TOP, SPINE_A, LEAF_A),
                                       "od-2": (TOP, SPINE_A, LEAF_A)}
    conf_dir = c.conf.parent
    topology = conf_dir / "topology.conf"
    assert c.cfg.topology_file() == str(topology)
    c.o.daemon_prefix = sandbox_prefix(conf_dir, drop=("/etc/slurm/topology.conf",))
    c.start_daemon()
    job = c.sbatch("-N", "2", "-p", "gpu-od", "--gres=gpu:8", "--wrap", "sleep 1")
    c.wait_job(job, {"COMPLETED"}, 180)

    def said(kind: str) -> list[str]:
        return [e["message"] for e in c.events() if e["kind"] == kind]
    wait_for("the write refused", lambda: said("topology_failed"), 60)
    assert "Read-only file system" in said("topology_failed")[0], said("topology_failed")
    assert LEAF_A not in topology.read_text()

    c.procs.stop("daemon")
    c.o.daemon_prefix = sandbox_prefix(conf_dir)  # the unit as shipped
    c.start_daemon()
    wait_for("the topology written", lambda: any(
        "2 node(s) placed" in m for m in said("topology_updated")), 60)
    assert LEAF_A in topology.read_text()
    shown = c.slurm("scontrol", "show", "topology")
    assert f"SwitchName={LEAF_A}" in shown and "Nodes=od-[1-2]" in shown, shown


def test_blocks_kept_through_a_power_cycle_on_26_05(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Issue 64: topology/block on Slurm 26.05 through power saving. Four nodes come up, EC2
    lays them out under two leaves (two blocks); they power down (an admin's power_down:
    idle nodes stay up for minutes here, so that the last job finds them up), and the daemon
    puts them back in the unplaced block (their instances are gone); a job powers them up again,
    the daemon reads the new instances' places, and Slurm has both blocks back: a 2-node
    `--exclusive=topo` job then runs inside one of them. No node is ever left in no block
    (the failure `--exclusive=topo` jobs hit where a powered-down node drops out of its
    block), and the daemon never re-applies a topology that has not changed."""
    c, proxy = make_cluster(
        slurm_root=slurm_root("26.05"),
        pools=[PoolSpec("gpu-od", "od-", 4, capacity_type="on-demand")],
        extra_config={"topology": {"plugin": "block", "read_interval_s": 2,
                                   "reconfigure_interval_s": 5}},
        min_idle=600, max_idle=900, suspend_time=1200)
    proxy.capacity.topology_by_node = {
        "od-1": (TOP, SPINE_A, LEAF_A), "od-3": (TOP, SPINE_A, LEAF_A),
        "od-2": (TOP, SPINE_B, LEAF_B), "od-4": (TOP, SPINE_B, LEAF_B)}
    both = (f"BlockName={LEAF_A} BlockIndex=0 Nodes=od-[1,3]",
            f"BlockName={LEAF_B} BlockIndex=1 Nodes=od-[2,4]")

    def shows(*lines: str) -> bool:
        shown = c.slurm("scontrol", "show", "topology")
        return all(line in shown for line in lines)

    def powered_down() -> bool:
        return all("POWERED_DOWN" in c.node(f"od-{n}")["State"] for n in range(1, 5))

    def cycle() -> None:
        job = c.sbatch("-N", "4", "-p", "gpu-od", "--gres=gpu:8", "--wrap", "sleep 1")
        c.wait_job(job, {"COMPLETED"}, 180)
        wait_for("two blocks in Slurm", lambda: shows(*both), 60)

    cycle()
    c.slurm("scontrol", "update", "nodename=od-[1-4]", "state=power_down")
    wait_for("the four nodes powered down", powered_down, 180)
    wait_for("the four nodes back in the unplaced block", lambda: shows(
        "BlockName=slurmscale-unplaced BlockIndex=0 Nodes=od-[1-4]"), 60)
    cycle()
    topo = c.sbatch("-N", "2", "-p", "gpu-od", "--gres=gpu:8", "--exclusive=topo",
                    "--wrap", "sleep 1")
    c.wait_job(topo, {"COMPLETED"}, 60)
    assert c.job(topo)["NodeList"] in ("od-[1,3]", "od-[2,4]"), c.job(topo)
    updates = [e["message"] for e in c.events() if e["kind"] == "topology_updated"]
    # placed, unplaced, placed again (a burst may split across one more reconfigure each)
    assert 3 <= len(updates) <= 6, updates
    print(f"topology/block through a power cycle: {len(updates)} reconfigure(s); "
          f"the --exclusive=topo job on {c.job(topo)['NodeList']}")
