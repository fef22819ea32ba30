"""Capacity the way AWS sells it, against in-memory Slurm and EC2: gangs go whole into
capacity reservations or not at all, gangs larger than one fleet launch as several fleets
pinned together and roll back together, placement groups per pool or per gang."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmscale.cloud.ec2 import EC2Cloud
from slurmscale.cloud.protocol import FleetSpec
from slurmscale.config import AwsSettings, ConfigError, ReservationPreference
from slurmscale.config_file import parse_config
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.model import CapacityReservation, GangNetwork, NetworkPlace
from slurmscale.policy.decide import decide
from slurmscale.policy.model import NodeState, NodeView, PoolKnobs, Snapshot
from slurmscale.policy.routing import RouteKind, fleet_parts, route_gang
from slurmscale.spool import RequestKind, Spool
from slurmscale.store.repo import Store
from tests.support.fakes import FakeCloud, FakeSlurm
from tests.unit.conftest import base_config
from tests.unit.test_reconcile import Clock, hook


def _cr(id_: str, free: int, total: int = 8, itype: str = "p5.48xlarge",
        az: str = "us-east-1a", state: str = "active") -> CapacityReservation:
    return CapacityReservation(id_, itype, az, total, free, state)


# --- the pure routing -----------------------------------------------------------------------
ZONES = {"subnet-a": "us-east-1a", "subnet-b": "us-east-1b"}


def test_a_gang_that_fits_whole_goes_to_the_reservation_of_its_type_and_az() -> None:
    r = route_gang(4, ["p5.48xlarge"], ZONES, [_cr("cr-0000000b", 6, az="us-east-1b")],
                   ReservationPreference.USE_FIRST)
    assert r.kind is RouteKind.RESERVED
    assert r.subnets == ("subnet-b",) and r.instance_types == ("p5.48xlarge",)
    assert r.reservation_ids == ("cr-0000000b",)


def test_a_gang_larger_than_the_free_reserved_capacity_is_not_split() -> None:
    rs = [_cr("cr-0000000a", 2), _cr("cr-0000000b", 3, az="us-east-1b")]
    use_first = route_gang(4, ["p5.48xlarge"], ZONES, rs, ReservationPreference.USE_FIRST)
    assert use_first.kind is RouteKind.NORMAL and "at most 3" in use_first.reason
    only = route_gang(4, ["p5.48xlarge"], ZONES, rs, ReservationPreference.ONLY)
    assert only.kind is RouteKind.REFUSED


def test_reservations_of_one_type_and_az_add_up_and_inactive_ones_do_not_count() -> None:
    rs = [_cr("cr-0000000a", 2), _cr("cr-0000000c", 2),
          _cr("cr-0000000d", 8, state="expired")]
    r = route_gang(4, ["p5.48xlarge"], ZONES, rs, ReservationPreference.USE_FIRST)
    assert r.kind is RouteKind.RESERVED and r.reservation_ids == ("cr-0000000a", "cr-0000000c")
    none = route_gang(1, ["p5.48xlarge"], ZONES, rs, ReservationPreference.NONE)
    assert none.kind is RouteKind.NORMAL


@given(size=st.integers(1, 20),
       rs=st.lists(st.tuples(st.sampled_from(["p5.48xlarge", "p5e.48xlarge"]),
                             st.sampled_from(["us-east-1a", "us-east-1b", "us-east-1c"]),
                             st.integers(0, 10),
                             st.sampled_from(["active", "expired", "scheduled"])),
                   max_size=6),
       pref=st.sampled_from(list(ReservationPreference)))
def test_routing_never_splits_a_gang(size: int, rs: list[tuple[str, str, int, str]],
                                     pref: ReservationPreference) -> None:
    crs = [_cr(f"cr-{i:08x}", free, 10, t, az, state)
           for i, (t, az, free, state) in enumerate(rs)]
    r = route_gang(size, ["p5.48xlarge", "p5e.48xlarge"], ZONES, crs, pref)
    fits = {(t, az) for t in ("p5.48xlarge", "p5e.48xlarge") for az in ZONES.values()
            if sum(c.available for c in crs if c.active and (c.instance_type, c.availability_zone)
                   == (t, az)) >= size}
    if r.kind is RouteKind.RESERVED:
        chosen = {c for c in crs if c.id in r.reservation_ids}
        assert len({(c.instance_type, c.availability_zone) for c in chosen}) == 1
        assert sum(c.available for c in chosen) >= size and all(c.active for c in chosen)
        assert pref is not ReservationPreference.NONE
    else:
        assert not fits or pref is ReservationPreference.NONE
        assert (r.kind is RouteKind.REFUSED) == (pref is ReservationPreference.ONLY)


SPINE_A = NetworkPlace(("t", "sa", "la1"))
SPINE_A2 = NetworkPlace(("t", "sa", "la2"))
SPINE_B = NetworkPlace(("t", "sb", "lb1"), "cr-0000ffff")


def test_a_gang_that_must_share_a_spine_is_never_split_across_spines() -> None:
    """Issue 43, item 4: with gang_network, reservations add up only under one network node
    by their topology; the gang takes the smallest group it fits whole; else normal capacity
    (or a refusal, only), and the reason says where and why."""
    rs = [_cr("cr-0000000a", 2), _cr("cr-0000000b", 2), _cr("cr-0000000c", 3),
          _cr("cr-0000000d", 1)]
    places = {"cr-0000000a": SPINE_A, "cr-0000000b": SPINE_A2, "cr-0000000c": SPINE_B}

    def go(size: int, net: GangNetwork,
           pref: ReservationPreference = ReservationPreference.USE_FIRST
           ) -> tuple[RouteKind, tuple[str, ...], str]:
        r = route_gang(size, ["p5.48xlarge"], ZONES, rs, pref, net, places)
        return r.kind, r.reservation_ids, r.reason
    assert go(8, GangNetwork.ANY)[:2] == (RouteKind.RESERVED, tuple(sorted(
        ["cr-0000000a", "cr-0000000b", "cr-0000000c", "cr-0000000d"])))
    # spine: a and b share sa (4 free), c is under sb (3), d placed nowhere (alone, 1)
    kind, ids, why = go(4, GangNetwork.SPINE)
    assert (kind, ids) == (RouteKind.RESERVED, ("cr-0000000a", "cr-0000000b"))
    assert "under one spine (sa)" in why
    assert go(3, GangNetwork.SPINE)[:2] == (RouteKind.RESERVED, ("cr-0000000c",)), \
        "the smallest group it fits: sa's 4 kept for a gang of 4"
    kind, ids, why = go(5, GangNetwork.SPINE)
    assert (kind, ids) == (RouteKind.NORMAL, ()) and "at most 4 free node(s) of one type " \
        "under one spine (8 in one AZ)" in why and "never split" in why
    assert go(5, GangNetwork.SPINE, ReservationPreference.ONLY)[0] is RouteKind.REFUSED
    # leaf: a and b are under different leaves
    assert go(3, GangNetwork.LEAF)[:2] == (RouteKind.RESERVED, ("cr-0000000c",))
    assert go(4, GangNetwork.LEAF)[0] is RouteKind.NORMAL
    # ultraserver: only c is in one (EC2's capacity block id); d alone takes a gang of 1
    kind, ids, why = go(1, GangNetwork.ULTRASERVER)
    assert ids == ("cr-0000000d",) and "cr-0000000d alone: EC2 gives no topology" in why
    assert go(3, GangNetwork.ULTRASERVER)[1] == ("cr-0000000c",)


@given(size=st.integers(1, 12),
       rs=st.lists(st.tuples(st.integers(0, 6), st.sampled_from(["la", "lb", "lc", None]),
                             st.sampled_from(["sa", "sb"])), max_size=6),
       net=st.sampled_from([GangNetwork.LEAF, GangNetwork.SPINE]))
def test_a_gang_routed_by_network_fits_whole_under_one_node(
        size: int, rs: list[tuple[int, str | None, str]], net: GangNetwork) -> None:
    crs = [_cr(f"cr-{i:08x}", free) for i, (free, _, _) in enumerate(rs)]
    places = {f"cr-{i:08x}": NetworkPlace(("t", spine, leaf))
              for i, (_, leaf, spine) in enumerate(rs) if leaf}
    r = route_gang(size, ["p5.48xlarge"], ZONES, crs, ReservationPreference.USE_FIRST, net,
                   places)
    if r.kind is RouteKind.RESERVED:
        keys = {net.key(places.get(i)) or i for i in r.reservation_ids}
        assert len(keys) == 1 and sum(c.available for c in crs if c.id in r.reservation_ids) \
            >= size
    else:
        groups: dict[str, int] = {}
        for c in crs:
            k = net.key(places.get(c.id)) or c.id
            groups[k] = groups.get(k, 0) + c.available
        assert max(groups.values(), default=0) < size


@given(size=st.integers(1, 5000), cap=st.integers(1, 1000))
def test_fleet_parts_cover_the_gang_in_as_few_fleets_as_allowed(size: int, cap: int) -> None:
    parts = fleet_parts(size, cap)
    assert sum(parts) == size and all(1 <= p <= cap for p in parts)
    assert len(parts) == -(-size // cap)


# --- the config -----------------------------------------------------------------------------
def _pool(**over: Any) -> dict[str, Any]:
    p = dict(base_config()["pools"][1])
    p.update(over)
    return p


@pytest.mark.parametrize(("over", "words"), [
    ({"instance_types": ["p5.48xlarge", "p5.48xlarge"]}, "listed twice"),
    ({"placement_group": "pg", "placement": "per-gang"}, "not both"),
    ({"capacity_reservations": {"ids": ["cr-00000001"], "launch_template_version": 2}},
     "must differ"),
    ({"capacity_reservations": {"ids": ["cr-1"], "launch_template_version": 5}}, "cr-1"),
    ({"capacity_reservations": {"ids": ["cr-00000001", "cr-00000001"],
                                "launch_template_version": 5}}, "listed twice"),
    ({"capacity_reservations": {"ids": ["cr-00000001"], "launch_template_version": "$Latest"}},
     "pinned"),
    ({"capacity_reservations": {"ids": ["cr-00000001"], "launch_template_version": 5,
                                "gang_network": "spine"}}, "gang_network 'spine'"),
    ({"capacity_reservations": {"ids": ["cr-00000001"], "gang_network": "rack"}}, "rack"),
])
def test_capacity_config_is_refused_with_the_key_and_value(over: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_config(base_config(pools=[_pool(**over)]))


def test_types_of_one_shape_share_a_pool() -> None:
    cfg = parse_config(base_config(pools=[_pool(instance_types=["p5.48xlarge",
                                                                "p5e.48xlarge"])]))
    assert cfg.pools[0].instance_types == ["p5.48xlarge", "p5e.48xlarge"]


# --- the fleet request EC2 gets ---------------------------------------------------------------
def test_the_fleet_request_targets_reservations_and_placement_the_documented_way() -> None:
    cfg = parse_config(base_config(pools=[_pool(
        instance_types=["p5.48xlarge", "p5e.48xlarge"], placement_group="pg-1",
        capacity_reservations={"ids": ["cr-00000001"], "launch_template_version": 7})]))
    pool = cfg.pools[0]
    ec2 = EC2Cloud(AwsSettings(endpoint_url="http://127.0.0.1:9"))
    normal = ec2.fleet_request(pool, 4, 4, "t", {}, FleetSpec.of(pool))
    assert normal["OnDemandOptions"]["AllocationStrategy"] == "prioritized"
    assert "CapacityReservationOptions" not in normal["OnDemandOptions"]
    assert [o["Priority"] for o in normal["LaunchTemplateConfigs"][0]["Overrides"]] == [
        0.0, 0.0, 1.0, 1.0]
    reserved = ec2.fleet_request(pool, 4, 4, "t", {}, FleetSpec(
        ("p5.48xlarge",), ("subnet-2",), "7", reserved=True, placement_group="pg-1"))
    od = reserved["OnDemandOptions"]
    assert od["CapacityReservationOptions"] == {
        "UsageStrategy": "use-capacity-reservations-first"}
    assert od["MinTargetCapacity"] == 4 and od["SingleAvailabilityZone"] is True
    assert reserved["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["Version"] == "7"
    assert reserved["LaunchTemplateConfigs"][0]["Overrides"] == [
        {"InstanceType": "p5.48xlarge", "SubnetId": "subnet-2",
         "Placement": {"GroupName": "pg-1"}}]
    assert reserved["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand"


def test_a_block_fleet_names_the_open_blocks_by_id_in_a_shape_botocore_sends() -> None:
    """Each window's fleets go to that window's blocks (a template naming one block sent a
    second block's fleets to the first): reserved-capacity, ReservedCapacityOptions by id,
    no On-Demand/Spot target (EC2 user guide: not supported with reserved-capacity)."""
    import botocore.session
    from botocore.serialize import create_serializer

    cfg = parse_config(base_config(pools=[{
        **_pool(), "name": "cb", "partition": "cb", "node_prefix": "cb-",
        "capacity_type": "capacity-block",
        "capacity_reservations": {"ids": ["cr-0000000a", "cr-0000000b"]}}]))
    pool = cfg.pools[0]
    ec2 = EC2Cloud(AwsSettings(endpoint_url="http://127.0.0.1:9"))
    req = ec2.fleet_request(pool, 4, 4, "t", {"k": "v"}, FleetSpec(
        ("p5.48xlarge",), ("subnet-2",), "2", capacity_block=True,
        reservation_ids=("cr-0000000b",), reservation_kinds=("capacity-block",)))
    assert req["TargetCapacitySpecification"] == {
        "TotalTargetCapacity": 4, "DefaultTargetCapacityType": "reserved-capacity"}
    assert req["ReservedCapacityOptions"] == {
        "ReservationTypes": ["capacity-block"],
        "CapacityReservationTarget": {"CapacityReservationIds": ["cr-0000000b"]}}
    assert "OnDemandOptions" not in req and "SpotOptions" not in req
    model = botocore.session.get_session().get_service_model("ec2")
    wire = create_serializer("ec2").serialize_to_request(
        {**req, "LaunchTemplateConfigs": [{**req["LaunchTemplateConfigs"][0],
                                           "LaunchTemplateSpecification": {
                                               "LaunchTemplateName": "gpu", "Version": "2"}}]},
        model.operation_model("CreateFleet"))["body"]
    assert wire["ReservedCapacityOptions.ReservationType.1"] == "capacity-block"
    assert wire["ReservedCapacityOptions.CapacityReservationTarget.CapacityReservationId.1"] \
        == "cr-0000000b"


# --- the reconcile pass -----------------------------------------------------------------------
def _world(tmp_path, **pool_over: Any):  # type: ignore[no-untyped-def]
    d = base_config(spool_dir=str(tmp_path / "spool"), socket_path=str(tmp_path / "sock"),
                    hook_log_file=str(tmp_path / "hooks.log"),
                    store_url=f"sqlite:///{tmp_path / 'state.db'}",
                    aws={"max_instances_per_fleet": pool_over.pop("max_per_fleet", 1000)})
    d["pools"][1].update(max_nodes=8, **pool_over)
    cfg = parse_config(d)
    store = Store(cfg.store_url)
    store.upgrade()
    cloud, slurm, clock = FakeCloud(), FakeSlurm(), Clock()
    return Reconciler(cfg, store, slurm, cloud, clock=clock), cloud, slurm, clock, \
        Spool(cfg.spool_dir)


RESERVED = {"capacity_reservations": {"ids": ["cr-0000000a"], "launch_template_version": 5}}


def test_one_gang_fills_the_reservation_the_next_goes_whole_to_normal_capacity(
        tmp_path) -> None:
    r, cloud, _, clock, spool = _world(tmp_path, **RESERVED)
    cloud.reservations["cr-0000000a"] = _cr("cr-0000000a", 6, total=6)
    hook(spool, clock, RequestKind.RESUME, {1: [f"od-{i}" for i in range(1, 5)],
                                            2: [f"od-{i}" for i in range(5, 9)]})
    res = r.tick()
    assert res.launched_gangs == 2
    first, second = (x["spec"] for x in cloud.launches)
    assert first.reserved and first.launch_template_version == "5"
    assert not second.reserved and second.launch_template_version == "2"
    assert cloud.describes == 1, "one read for the pass, counted down locally"
    (cr,) = cloud.capacity_reservations(["cr-0000000a"])
    assert cr.available == 2, "never split: 2 left unused"
    rows = {i.node: i for i in r.store.active_instances()}
    assert {n for n, i in rows.items() if i.capacity_reservation_id} == {
        "od-1", "od-2", "od-3", "od-4"}
    assert rows["od-1"].launch_template_version == "5"
    assert rows["od-5"].launch_template_version == "2"


@pytest.mark.parametrize("reclaims", [1, 2])
def test_a_job_reclaimed_max_reclaims_times_skips_interruptible_reservations(
        tmp_path, reclaims: int) -> None:
    """A job whose runs an interruptible reservation's owner keeps taking back might never
    end there: from `max_reclaims` (2) reclaims on, its gang goes to the pool's other capacity
    and the launch says why; below that it goes into the reservation as before."""
    from slurmscale.cloud.eventbridge import EventKind
    from slurmscale.store.rows import PreemptionCause, PreemptionRow

    r, cloud, _, clock, spool = _world(tmp_path, capacity_reservations={
        "ids": ["cr-0000000a"]})
    cloud.reservations["cr-0000000a"] = CapacityReservation(
        "cr-0000000a", "p5.48xlarge", "us-east-1a", 8, 8, "active", "interruptible")
    for i in range(reclaims):
        r.store.add_preemption(PreemptionRow(
            at=clock() - timedelta(minutes=10 - i), job_id="1", node="od-1",
            instance_id=f"i-{i:017x}", pool="gpu-od", instance_type="p5.48xlarge",
            lifecycle="on-demand", cause=PreemptionCause.RECLAIMED,
            kind=EventKind.RESERVATION_INTERRUPTION.value))
    hook(spool, clock, RequestKind.RESUME, {1: ["od-1", "od-2"]})
    assert r.tick().launched_gangs == 1
    (launch,) = cloud.launches
    (asked,) = [e.message for e in r.store.events() if e.kind == "launch_requested"]
    if reclaims < 2:
        assert launch["spec"].reservation_ids == ("cr-0000000a",), asked
    else:
        assert launch["spec"].reservation_ids == () and not launch["spec"].reserved, asked
        assert "interruptible reservations skipped: a job's run reclaimed 2 time(s)" in asked


def test_the_daemon_reads_the_reservations_topology_and_keeps_a_gang_under_one_spine(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    """gang_network spine: the reservations' topology is read with them (one call each read);
    a gang of 3 goes whole into the one reservation under one spine with room, not across
    the two that have it only together."""
    ids = ["cr-0000000a", "cr-0000000b", "cr-0000000c"]
    r, cloud, _, clock, spool = _world(tmp_path, capacity_reservations={
        "ids": ids, "gang_network": "spine"})
    for rid, free in zip(ids, (2, 2, 3), strict=True):
        cloud.reservations[rid] = _cr(rid, free)
    cloud.reservation_places = {"cr-0000000a": SPINE_A, "cr-0000000b": SPINE_B,
                                "cr-0000000c": NetworkPlace(("t", "sc", "lc1"))}
    hook(spool, clock, RequestKind.RESUME, {1: ["od-1", "od-2", "od-3"]})
    assert r.tick().launched_gangs == 1
    (launch,) = cloud.launches
    assert launch["spec"].reservation_ids == ("cr-0000000c",)
    assert cloud.reservation_topology_reads == [ids]
    (asked,) = [e.message for e in r.store.events() if e.kind == "launch_requested"]
    assert "under one spine (sc)" in asked
    placed = cloud.instance_topology([i.instance_id for i in r.store.active_instances()])
    assert {p.nodes[1] for p in placed.values()} == {"sc"}, "its instances sit there too"
    # `plan` says where the gang went and why (for the last 10 minutes of launches)
    from slurmscale.daemon.plan_view import plan_data
    assert r.capacity.last is not None
    (route,) = plan_data(r.capacity.last, "daemon")["routes"]
    assert (route["pool"], route["job_id"], route["nodes"], route["kind"]) == (
        "gpu-od", "1", "od-[1-3]", "reserved") and "under one spine (sc)" in route["reason"]
    clock.now += timedelta(minutes=11)
    r.tick()
    assert r.capacity.last.routes == (), "older than 10 minutes: no longer shown"


def test_only_reserved_capacity_refuses_a_gang_that_does_not_fit(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = _world(tmp_path, capacity_reservations={
        **RESERVED["capacity_reservations"], "preference": "only"})
    cloud.reservations["cr-0000000a"] = _cr("cr-0000000a", 2)
    hook(spool, clock, RequestKind.RESUME, {1: ["od-1", "od-2", "od-3"]})
    res = r.tick()
    assert res.failed_gangs == 1 and cloud.launches == []
    (nodes, reason), = slurm.powered_down
    assert nodes == ["od-1", "od-2", "od-3"] and "ReservedCapacityTooSmall" in reason


def test_an_unknown_reservation_id_does_not_stop_the_others(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r, cloud, _, clock, spool = _world(tmp_path, capacity_reservations={
        "ids": ["cr-0000000a", "cr-0000000f"], "launch_template_version": 5})
    cloud.reservations["cr-0000000a"] = _cr("cr-0000000a", 4)
    hook(spool, clock, RequestKind.RESUME, {1: ["od-1", "od-2"]})
    assert r.tick().launched_gangs == 1
    assert cloud.launches[0]["spec"].reserved
    kinds = [e.kind for e in r.store.events()]
    assert kinds.count("capacity_reservation_missing") == 1


def test_a_gang_larger_than_one_fleet_is_several_fleets_pinned_together(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r, cloud, _, clock, spool = _world(tmp_path, max_per_fleet=2, placement="per-gang")
    hook(spool, clock, RequestKind.RESUME, {1: [f"od-{i}" for i in range(1, 6)]})
    assert r.tick().launched_gangs == 1
    assert [(x["count"], x["min"]) for x in cloud.launches] == [(2, 2), (2, 2), (1, 1)]
    specs = [x["spec"] for x in cloud.launches]
    assert specs[0].subnets == ("subnet-1", "subnet-2")
    assert all(s.subnets == ("subnet-1",) for s in specs[1:]), "pinned to the first's subnet"
    assert len({s.placement_group for s in specs}) == 1 and specs[0].placement_group
    assert len({x["token"] for x in cloud.launches}) == 3, "each fleet its own idempotency"
    assert len(r.store.active_instances()) == 5
    assert list(cloud.groups) == [specs[0].placement_group]


def test_a_short_last_fleet_rolls_back_every_part_of_the_gang(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = _world(tmp_path, max_per_fleet=2, placement="per-gang")
    cloud.fail_launch_no = 3
    hook(spool, clock, RequestKind.RESUME, {1: [f"od-{i}" for i in range(1, 6)]})
    assert r.tick().failed_gangs == 1
    assert len(cloud.launches) == 3
    assert cloud.running() == [] and r.store.active_instances() == []
    (nodes, reason), = slurm.powered_down
    assert len(nodes) == 5 and "InsufficientInstanceCapacity" in reason
    # the gang's placement group goes once nothing of the gang is left
    clock.now += timedelta(seconds=10)
    r.tick()
    assert cloud.groups == {}
    assert "placement_group_deleted" in [e.kind for e in r.store.events()]


def test_an_idle_node_on_paid_capacity_is_kept_unless_told_otherwise() -> None:
    def plan(release: bool) -> list[str]:
        k = PoolKnobs("p", 8, 4, min_idle_s=10, max_idle_s=100, release_paid_idle=release)
        nodes = (NodeView("p-1", "p", NodeState.IDLE, 0.0, paid=True),
                 NodeView("p-2", "p", NodeState.IDLE, 0.0))
        p = decide(Snapshot(now=1000.0, pools=(k,), nodes=nodes, jobs=()))
        return [n for a in p.actions if a.kind.value == "release" for n in a.nodes]
    assert plan(release=False) == ["p-2"]
    assert sorted(plan(release=True)) == ["p-1", "p-2"]


# --- slurmscale check: the launch templates EFA and reservations rely on ----------------------
def test_check_names_templates_without_efa_or_the_targets_fleet_needs() -> None:
    from slurmscale.check_launch import check_templates, templates_to_read

    cfg = parse_config(base_config(pools=[
        _pool(efa=True, capacity_reservations={"ids": ["cr-0000000a"],
                                               "launch_template_version": 5}),
        {**_pool(), "name": "cb", "partition": "cb", "node_prefix": "cb-",
         "capacity_type": "capacity-block",
         "capacity_reservations": {"ids": ["cr-0000000b"]}}]))
    assert templates_to_read(cfg) == [("gpu-od", "2"), ("gpu-od", "5"), ("cb", "2")]
    efa = {"NetworkInterfaces": [{"DeviceIndex": 0, "InterfaceType": "efa"}]}
    target = {"CapacityReservationSpecification": {"CapacityReservationTarget": {
        "CapacityReservationResourceGroupArn": "arn:aws:resource-groups:r:1:group/g"}}}
    block = {"InstanceMarketOptions": {"MarketType": "capacity-block"}}
    pinned = {"CapacityReservationSpecification": {"CapacityReservationTarget": {
        "CapacityReservationId": "cr-0000000b"}}}
    node = {"MetadataOptions": {"HttpTokens": "required", "InstanceMetadataTags": "enabled"},
            "IamInstanceProfile": {"Arn": "arn:aws:iam::123456789012:instance-profile/n"},
            "UserData": "IyEvYmluL3NoCmV4ZWMgcHl0aG9uMyBub2RlLWluaXQucHkK"}  # (exec ... node-init)
    good = {("gpu-od", "2"): {**node, **efa}, ("gpu-od", "5"): {**node, **efa, **target},
            ("cb", "2"): {**node, **block}}
    assert check_templates(cfg, good) == []
    bad = {("gpu-od", "2"): {**node, **target}, ("gpu-od", "5"): {**node, **efa},
           ("cb", "2"): {**node, **block, **pinned}}
    codes = sorted(p.code for p in check_templates(cfg, bad))
    assert codes == ["block_template", "efa_missing", "reservation_template",
                     "reservation_template"], codes
    unread = check_templates(cfg, {("cb", "2"): "AuthFailure: no"})
    assert [p.code for p in unread] == ["template_unreadable"]


def test_check_says_when_a_template_keeps_its_nodes_from_joining_by_themselves(cfg) -> None:  # type: ignore[no-untyped-def]
    import base64
    import gzip

    from slurmscale.check_launch import check_templates
    from slurmscale.cli_node import render_user_data

    spot = cfg.pool("gpu-spot")
    user_data = base64.b64encode(render_user_data(cfg, spot).encode()).decode()
    tags_on = {"HttpTokens": "required", "InstanceMetadataTags": "enabled"}
    role = {"Arn": "arn:aws:iam::123456789012:instance-profile/nodes"}

    def problems(**data: object) -> list[tuple[str, str]]:
        data.setdefault("IamInstanceProfile", role)
        return [(p.severity, p.code) for p in check_templates(cfg, {("gpu-spot", "3"): data})]
    assert problems(MetadataOptions=tags_on, UserData=user_data) == []
    # gzip'd user data (cloud-init takes it) is read too
    packed = base64.b64encode(gzip.compress(render_user_data(cfg, spot).encode())).decode()
    assert problems(MetadataOptions=tags_on, UserData=packed) == []
    assert problems(MetadataOptions={"HttpTokens": "required"}, UserData=user_data) == [
        ("error", "metadata_tags")]
    # IMDSv1 open, no instance profile (the bootstrap can neither report nor read the key)
    assert problems(MetadataOptions={"InstanceMetadataTags": "enabled"}) == [
        ("error", "imdsv2"), ("warning", "userdata_bootstrap")]
    assert problems(MetadataOptions=tags_on, UserData=user_data, IamInstanceProfile={}) == [
        ("error", "instance_profile")]


def test_check_reads_the_template_versions_from_ec2(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import boto3
    from moto.server import ThreadedMotoServer

    from slurmscale.check_launch import gather_templates

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=url)
        ec2.create_launch_template(LaunchTemplateName="gpu-efa", LaunchTemplateData={
            "ImageId": "ami-0a1b2c3d4e5f60718",
            "NetworkInterfaces": [{"DeviceIndex": 0, "InterfaceType": "efa"}]})
        cfg = parse_config(base_config(aws={"endpoint_url": url}, pools=[_pool(
            efa=True, launch_template={"name": "gpu-efa", "version": 1})]))
        got = gather_templates(cfg)
        assert got[("gpu-od", "1")]["NetworkInterfaces"][0]["InterfaceType"] == "efa"
        missing = parse_config(base_config(aws={"endpoint_url": url}, pools=[_pool(
            efa=True, launch_template={"name": "gpu-efa", "version": 7})]))
        assert isinstance(gather_templates(missing)[("gpu-od", "7")], str)
        # metadata options as moto keeps them: version 2 puts tags in metadata, 1 does not
        ec2.create_launch_template_version(LaunchTemplateName="gpu-efa", LaunchTemplateData={
            "ImageId": "ami-0a1b2c3d4e5f60718", "MetadataOptions": {
                "HttpTokens": "required", "InstanceMetadataTags": "enabled"},
            "NetworkInterfaces": [{"DeviceIndex": 0, "InterfaceType": "efa"}]})
        from slurmscale.check_launch import check_templates
        codes = {v: sorted(p.code for p in check_templates(c, gather_templates(c)))
                 for v, c in ((v, parse_config(base_config(aws={"endpoint_url": url}, pools=[
                     _pool(efa=True, launch_template={"name": "gpu-efa", "version": v})])))
                     for v in (1, 2))}
        assert codes == {1: ["imdsv2", "instance_profile", "metadata_tags",
                             "userdata_bootstrap"],
                         2: ["instance_profile", "userdata_bootstrap"]}
    finally:
        server.stop()


def test_check_reads_each_reservation_id_against_ec2() -> None:
    from slurmscale.check_launch import check_reservations
    from slurmscale.model import CapacityReservation

    cfg = parse_config(base_config(pools=[
        _pool(capacity_reservations={"ids": ["cr-0000000a", "cr-0000000c"]}),
        {**_pool(), "name": "cb", "partition": "cb", "node_prefix": "cb-",
         "capacity_type": "capacity-block",
         "capacity_reservations": {"ids": ["cr-0000000b"]}}]))

    def cr(rid: str, kind: str = "default", itype: str = "p5.48xlarge") -> CapacityReservation:
        return CapacityReservation(rid, itype, "us-east-1a", 4, 4, "active", kind)
    good = {"cr-0000000a": cr("cr-0000000a", "interruptible"), "cr-0000000c": cr("cr-0000000c"),
            "cr-0000000b": cr("cr-0000000b", "capacity-block")}
    assert check_reservations(cfg, good) == []
    bad = {"cr-0000000a": "InvalidCapacityReservationId.NotFound: no such id",
           "cr-0000000c": cr("cr-0000000c", "capacity-block"),
           "cr-0000000b": cr("cr-0000000b", "capacity-block", "p4d.24xlarge")}
    assert sorted(p.code for p in check_reservations(cfg, bad)) == [
        "reservation_kind", "reservation_type", "reservation_unknown"]
    # issue 45: one in another AZ than the pool's subnets, an expired one, a block past its
    # end (EC2 may still say active for a moment), a cancelled block
    subnets = {s: "us-east-1b" for p in cfg.pools for s in p.subnets}
    now = 1_800_000_000.0
    elsewhere = {**good, "cr-0000000c": replace(cr("cr-0000000c"), state="expired"),
                 "cr-0000000b": replace(cr("cr-0000000b", "capacity-block"), end=now - 60)}
    found = check_reservations(cfg, elsewhere, subnets, now=now)
    assert sorted(p.code for p in found) == ["reservation_gone", "reservation_gone",
                                             "reservation_zone", "reservation_zone",
                                             "reservation_zone"], [p.line() for p in found]
    zone = next(p for p in found if p.code == "reservation_zone")
    assert "us-east-1a" in zone.message and "us-east-1b" in zone.message
    cancelled = {**good, "cr-0000000b": replace(cr("cr-0000000b", "capacity-block"),
                                                state="cancelled")}
    assert [p.code for p in check_reservations(cfg, cancelled, now=now)] == ["reservation_gone"]
    assert check_reservations(cfg, good, {s: "us-east-1a" for s in subnets}, now=now) == []
    # issue 45: EC2 matches an instance to a reservation by type, platform, AZ and tenancy
    from slurmscale.check_launch import reserved_template
    templates = {reserved_template(p): {"ImageId": "ami-0a1b2c3d4e5f60718"}
                 for p in cfg.pools}
    rhel = {"ami-0a1b2c3d4e5f60718": "Red Hat Enterprise Linux"}
    ubuntu = {"ami-0a1b2c3d4e5f60718": "Linux/UNIX"}
    assert check_reservations(cfg, good, templates=templates, platforms=ubuntu) == []
    assert [p.code for p in check_reservations(cfg, good, templates=templates,
                                               platforms=rhel)] == ["reservation_platform"] * 3
    dedicated = {**good, "cr-0000000c": replace(cr("cr-0000000c"), tenancy="dedicated")}
    (t,) = check_reservations(cfg, dedicated, templates=templates, platforms=ubuntu)
    assert t.code == "reservation_tenancy" and "launches default" in t.message
    windows = {**good, "cr-0000000c": replace(cr("cr-0000000c"), platform="Windows")}
    (w,) = check_reservations(cfg, windows)  # the image unknown: Linux at least
    assert w.code == "reservation_platform" and "Windows" in w.message
