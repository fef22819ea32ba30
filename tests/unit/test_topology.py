"""EC2's network topology into Slurm's topology.conf (issue 43, item 3): the pure rendering,
the pass that reads EC2 in batches and reconfigures slurmctld at most once per interval, and
the EC2 adapter's batching."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmscale.cloud.ec2 import TOPOLOGY_IDS_PER_CALL, EC2Cloud
from slurmscale.cloud.protocol import CloudError, CloudInstance
from slurmscale.config import AwsSettings
from slurmscale.config_file import parse_config
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.passes.topology import TopologyPass
from slurmscale.hostlists import expand
from slurmscale.model import NetworkPlace
from slurmscale.store.memory import MemoryStore
from slurmscale.store.rows import InstanceRow
from slurmscale.topology import ROOT, UNPLACED, render, render_block, render_tree
from tests.support.fakes import FakeCloud, FakeSlurm
from tests.unit.conftest import base_config

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
NODES = [f"od-{i}" for i in range(1, 5)]


def switches(text: str) -> dict[str, tuple[str, str]]:
    """SwitchName -> (Switches|Nodes, its value)."""
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(r"SwitchName=(\S+) (Switches|Nodes)=(\S+)", line)
        if m:
            out[m[1]] = (m[2], m[3])
    return out


def test_each_network_node_is_a_switch_and_unplaced_nodes_hang_under_the_root() -> None:
    text = render_tree(NODES, {"od-1": ("nn-t", "nn-a", "nn-la"), "od-3": ("nn-t", "nn-a", "nn-la"),
                               "od-2": ("nn-t", "nn-b", "nn-lb")})
    assert switches(text) == {
        "nn-t": ("Switches", "nn-a,nn-b"), "nn-a": ("Switches", "nn-la"),
        "nn-b": ("Switches", "nn-lb"), "nn-la": ("Nodes", "od-[1,3]"),
        "nn-lb": ("Nodes", "od-2"), UNPLACED: ("Nodes", "od-4"),
        ROOT: ("Switches", f"nn-t,{UNPLACED}")}
    assert render_tree(NODES, {}) == render_tree(NODES, {"od-9": ("x",)}), "only known nodes"


def test_a_network_node_above_some_nodes_and_next_to_others_keeps_one_kind_a_line() -> None:
    """A 3-layer type's bottom node that is a 4-layer type's third: its nodes get a leaf."""
    got = switches(render_tree(["a-1", "b-1"], {"a-1": ("n1", "n2", "n3"),
                                                "b-1": ("n1", "n2", "n3", "n4")}))
    assert got["n3"] == ("Switches", "n3-nodes,n4") and got["n3-nodes"] == ("Nodes", "a-1")


@given(st.dictionaries(st.sampled_from(NODES), st.tuples(
    st.sampled_from(["top-1", "top-2"]), st.sampled_from(["mid-1", "mid-2"]),
    st.sampled_from(["leaf-1", "leaf-2", "leaf-3"]))))
def test_every_node_is_in_exactly_one_leaf_and_every_switch_reaches_the_root(
        placed: dict[str, tuple[str, str, str]]) -> None:
    got = switches(render_tree(NODES, placed))
    in_leaves = [n for kind, v in got.values() if kind == "Nodes" for n in expand(v)]
    assert sorted(in_leaves) == NODES
    parent = {c: name for name, (kind, v) in got.items() if kind == "Switches"
              for c in v.split(",")}
    for name in got:
        hops = 0
        while name != ROOT:
            name, hops = parent[name], hops + 1
            assert hops <= 5


def blocks(text: str) -> list[tuple[str, str]]:
    """BlockName lines in file order: (name, nodes)."""
    return [(m[1], m[2]) for line in text.splitlines()
            if (m := re.fullmatch(r"BlockName=(\S+) Nodes=(\S+)", line))]


def test_a_block_is_an_ultraserver_or_else_a_leaf_neighbours_next_to_each_other() -> None:
    """topology/block: an UltraServer's instances (EC2's capacity block id) one block; any
    other instance's block its bottom network node; blocks under one spine written next to
    each other (Slurm pairs neighbours into larger blocks); unplaced nodes last."""
    nodes = [f"od-{i}" for i in range(1, 8)]
    got = blocks(render_block(nodes, {
        "od-1": NetworkPlace(("t", "s2", "l3")), "od-2": NetworkPlace(("t", "s1", "l1")),
        "od-3": NetworkPlace(("t", "s2", "l2")), "od-4": NetworkPlace(("t", "s1", "l1")),
        "od-5": NetworkPlace(("t", "s1", "l9"), "cr-ultra"),
        "od-6": NetworkPlace(("t", "s1", "l8"), "cr-ultra")}))
    assert got == [("l1", "od-[2,4]"), ("cr-ultra", "od-[5-6]"), ("l2", "od-3"),
                   ("l3", "od-1"), (UNPLACED, "od-7")]
    assert render("block", nodes, {}) == render_block(nodes, {})
    assert render("tree", nodes, {"od-1": NetworkPlace(("t", "s", "l"))}) == render_tree(
        nodes, {"od-1": ("t", "s", "l")})


@given(st.dictionaries(st.sampled_from(NODES), st.builds(
    NetworkPlace, st.tuples(st.sampled_from(["t"]), st.sampled_from(["s1", "s2"]),
                            st.sampled_from(["l1", "l2", "l3"])),
    st.sampled_from(["", "", "cr-u1"]))))
def test_every_node_is_in_exactly_one_block(placed: dict[str, NetworkPlace]) -> None:
    got = blocks(render_block(NODES, placed))
    assert sorted(n for _, v in got for n in expand(v)) == NODES
    assert len({b for b, _ in got}) == len(got)


# --- the pass -------------------------------------------------------------------------------
def _running(n: int) -> InstanceRow:
    return InstanceRow(instance_id=f"i-{n:017x}", node=f"od-{n}", pool="gpu-od", gang_id="g",
                       instance_type="p5.48xlarge", lifecycle="on-demand",
                       launch_template_version="2", state="running", launched_at=T0)


@pytest.fixture
def world(tmp_path: Path):  # type: ignore[no-untyped-def]
    d = base_config(topology={"file": str(tmp_path / "topology.conf"), "read_interval_s": 30,
                              "reconfigure_interval_s": 60})
    d["pools"][1]["max_nodes"] = 4
    cfg = parse_config(d)
    (tmp_path / "topology.conf").write_text(render_tree(
        [n for p in cfg.pools for n in p.node_names()], {}))
    cloud, slurm = FakeCloud(), FakeSlurm()
    events: list[tuple[str, str]] = []
    ctx = PassContext(cfg, MemoryStore(), slurm, cloud, lambda: T0,
                      lambda k, m, **_: events.append((k, m)))
    rows = [_running(n) for n in range(1, 5)]
    for r in rows:
        cloud.instances[r.instance_id] = CloudInstance(r.instance_id, "running", {})
    return ctx, cloud, slurm, events, rows, tmp_path / "topology.conf"


def test_placements_are_read_in_one_batch_written_and_slurmctld_reconfigured_once(world) -> None:  # type: ignore[no-untyped-def]
    ctx, cloud, slurm, events, rows, path = world
    cloud.topology = {rows[0].instance_id: NetworkPlace(("t", "a", "la")),
                      rows[2].instance_id: NetworkPlace(("t", "a", "la"))}
    p = TopologyPass(ctx)
    p.run(rows, 0.0)
    assert cloud.topology_reads == [sorted(r.instance_id for r in rows)]
    assert switches(path.read_text())["la"] == ("Nodes", "od-[1,3]")
    assert slurm.calls == [("reconfigure", [])]
    assert [k for k, _ in events] == ["topology_updated"] and "2 node(s) placed" in events[0][1]
    # EC2 places the other two 10 s later: asked again only after read_interval_s, and the
    # change reaches slurmctld no sooner than reconfigure_interval_s after the last
    cloud.topology.update({rows[1].instance_id: NetworkPlace(("t", "b", "lb")),
                           rows[3].instance_id: NetworkPlace(("t", "b", "lb"))})
    p.run(rows, 10.0)
    assert len(cloud.topology_reads) == 1
    p.run(rows, 30.0)
    assert cloud.topology_reads[-1] == sorted([rows[1].instance_id, rows[3].instance_id])
    assert switches(path.read_text())["lb"] == ("Nodes", "od-[2,4]")
    assert slurm.calls == [("reconfigure", [])], "not before reconfigure_interval_s"
    p.run(rows, 60.0)
    assert slurm.calls == [("reconfigure", [])] * 2
    p.run(rows, 200.0)
    assert len(cloud.topology_reads) == 2 and len(slurm.calls) == 2, "nothing new: no calls"
    # an instance gone: its node unplaced again (one more reconfigure)
    p.run(rows[1:], 300.0)
    assert switches(path.read_text())["la"] == ("Nodes", "od-3")
    assert len(slurm.calls) == 3


def test_a_restarted_daemon_finds_the_file_as_it_left_it_and_does_not_reconfigure(world) -> None:  # type: ignore[no-untyped-def]
    ctx, cloud, slurm, _, rows, path = world
    cloud.topology = {r.instance_id: NetworkPlace(("t", "a", "la")) for r in rows}
    TopologyPass(ctx).run(rows, 0.0)
    assert len(slurm.calls) == 1
    TopologyPass(ctx).run(rows, 1.0)  # the restart: the same placements, the same file
    assert len(slurm.calls) == 1


def test_a_file_written_and_not_yet_read_is_reconfigured_by_the_next_leader(world) -> None:  # type: ignore[no-untyped-def]
    """The leader wrote topology.conf and died before `scontrol reconfigure` (here: Slurm
    refused it, then the leader was gone). The next daemon finds the file as it wants it,
    and still tells slurmctld: the write is on the store until slurmctld has read it."""
    ctx, cloud, slurm, _, rows, path = world
    cloud.topology = {r.instance_id: NetworkPlace(("t", "a", "la")) for r in rows}
    slurm.fail = True
    TopologyPass(ctx).run(rows, 0.0)
    assert switches(path.read_text())["la"] == ("Nodes", "od-[1-4]") and slurm.calls == []
    slurm.fail = False
    standby = TopologyPass(ctx)
    standby.run(rows, 1.0)
    assert slurm.calls == [("reconfigure", [])]
    standby.run(rows, 100.0)
    TopologyPass(ctx).run(rows, 200.0)
    assert len(slurm.calls) == 1, "read by slurmctld: not again"


def test_failures_are_said_once_and_change_nothing_slurm_has(world) -> None:  # type: ignore[no-untyped-def]
    ctx, cloud, slurm, events, rows, path = world
    cloud.down = CloudError("RequestLimitExceeded", "slow down")
    p = TopologyPass(ctx)
    p.run(rows, 0.0)
    assert slurm.calls == [] and events == [], "EC2 unreadable: the file as it was"
    cloud.down = None
    cloud.topology = {rows[0].instance_id: NetworkPlace(("t", "a", "la"))}
    slurm.fail = True
    p.run(rows, 31.0)
    p.run(rows, 32.0)
    assert [k for k, _ in events] == ["topology_failed"]
    slurm.fail = False
    p.run(rows, 33.0)
    assert slurm.calls == [("reconfigure", [])] and events[-1][0] == "topology_updated"


# --- the EC2 adapter ------------------------------------------------------------------------
def test_the_adapter_asks_100_ids_a_call_and_follows_each_calls_pages() -> None:
    cloud = EC2Cloud(AwsSettings(region="us-east-1"))
    calls: list[dict[str, Any]] = []

    def answer(name: str, **kw: Any) -> dict[str, Any]:
        calls.append(kw)
        ids = kw["InstanceIds"]
        if "NextToken" not in kw and len(ids) == TOPOLOGY_IDS_PER_CALL:
            return {"Instances": [{"InstanceId": ids[0], "NetworkNodes": ["a", "b", "c"]}],
                    "NextToken": "more"}
        return {"Instances": [{"InstanceId": ids[-1], "NetworkNodes": ["a", "b", "d"]},
                              {"InstanceId": "i-notrunning", "NetworkNodes": []}]}
    cloud._call = answer  # type: ignore[method-assign]
    ids = [f"i-{n:017x}" for n in range(150)]
    got = cloud.instance_topology(ids)
    assert [len(c["InstanceIds"]) for c in calls] == [100, 100, 50]
    assert "MaxResults" not in calls[0] and calls[1]["NextToken"] == "more"
    assert got == {ids[0]: NetworkPlace(("a", "b", "c")), ids[99]: NetworkPlace(("a", "b", "d")),
                   ids[149]: NetworkPlace(("a", "b", "d"))}
