"""What slurmscale relies on EC2 to do, as checks any `CloudProvider` must pass.

`tests/unit/test_ec2_contract.py` runs them against the simulator's EC2 (`sim/ec2_adapter.py`)
and against the real adapter (`cloud/ec2.py`) talking to an in-process moto server behind the
fault-injecting proxy (what moto lacks — capacity errors, reclaims, placement groups,
reservations — is injected there in EC2's response shapes). A difference is a bug in the
simulator, or a behaviour it was never told about.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import pytest

from slurmscale.cloud.protocol import (
    TAG_CLUSTER,
    TAG_GANG,
    TAG_NODE,
    CloudError,
    CloudProvider,
    FleetSpec,
)
from slurmscale.config import CapacityType, Pool
from slurmscale.model import NetworkPlace

ICE = "InsufficientInstanceCapacity"


class Ec2Side(Protocol):
    cloud: CloudProvider

    def pool(self, capacity: CapacityType) -> Pool: ...

    def short(self, market: str, keep: int) -> None:
        """EC2 can give only `keep` more instances of this market (spot | on-demand) to the
        next CreateFleet."""

    def reclaim(self, instance_id: str) -> None:
        """AWS takes the spot instance back (no event needed to see it)."""

    def add_reservation(self, rid: str, instance_type: str, total: int) -> None: ...

    def add_block(self, rid: str, instance_type: str, total: int, start: float, end: float
                  ) -> None:
        """A Capacity Block of `total` instances from `start` to `end` (Unix seconds)."""

    def impair(self, instance_id: str) -> None:
        """The instance fails EC2's instance status check (reachability)."""

    def lay_out(self, instance_id: str, node: str, layers: tuple[str, ...]) -> None:
        """EC2's network puts the instance (running as `node`) under `layers`, top-down."""

    def place_reservation(self, rid: str, place: NetworkPlace) -> None:
        """EC2's network holds the reservation's capacity at `place`."""


def _tags(gang: str) -> dict[str, str]:
    return {TAG_CLUSTER: "contract", TAG_GANG: gang}


def a_gang_launches_whole_with_its_tags(side: Ec2Side) -> None:
    pool = side.pool(CapacityType.SPOT)
    got = side.cloud.launch(pool, 4, 4, "tok-a", _tags("g-a"))
    assert len(got.instances) == 4 and got.error_code == ""
    assert {i.lifecycle for i in got.instances} == {"spot"}
    assert {i.instance_type for i in got.instances} <= set(pool.instance_types)
    assert all(i.private_ip and i.instance_id.startswith("i-") for i in got.instances)
    ids = sorted(i.instance_id for i in got.instances)
    found = side.cloud.find(_tags("g-a"))
    assert sorted(i.instance_id for i in found) == ids
    assert {i.state for i in found} <= {"pending", "running"}
    assert all(i.tags[TAG_GANG] == "g-a" for i in found)
    assert [i.instance_id for i in side.cloud.launched_with(_tags("g-a"))] == ids


def on_demand_pools_launch_on_demand(side: Ec2Side) -> None:
    got = side.cloud.launch(side.pool(CapacityType.ON_DEMAND), 2, 2, "tok-b", _tags("g-b"))
    assert [i.lifecycle for i in got.instances] == ["on-demand", "on-demand"]


def short_of_the_minimum_gets_nothing(side: Ec2Side) -> None:
    side.short("spot", 2)
    got = side.cloud.launch(side.pool(CapacityType.SPOT), 3, 3, "tok-c", _tags("g-c"))
    assert got.instances == () and got.error_code == ICE
    assert side.cloud.find(_tags("g-c")) == []


def below_the_target_above_the_minimum_gets_what_there_is(side: Ec2Side) -> None:
    side.short("spot", 1)
    got = side.cloud.launch(side.pool(CapacityType.SPOT), 3, 1, "tok-d", _tags("g-d"))
    assert len(got.instances) == 1 and got.error_code == ICE and got.error_message


def a_capacity_error_names_the_overrides_it_could_not_fill(side: Ec2Side) -> None:
    """CreateFleet's Errors name each override (type, subnet) EC2 could not fill: the
    capacity backoff keys on them (an offering, not the whole pool)."""
    pool = side.pool(CapacityType.SPOT)
    side.short("spot", 0)
    got = side.cloud.launch(pool, 2, 2, "tok-o", _tags("g-o"))
    assert got.instances == () and got.errors
    assert {(e.code, e.instance_type, e.subnet) for e in got.errors} == {
        (ICE, t, s) for t in pool.instance_types for s in pool.subnets}


def a_fleet_launches_only_on_the_overrides_it_keeps(side: Ec2Side) -> None:
    """Overrides left out (offerings in backoff) are not launched on: the fleet's next
    choice is."""
    pool = side.pool(CapacityType.ON_DEMAND)
    (first,), (subnet,) = pool.instance_types, pool.subnets
    spec = replace(FleetSpec.of(pool), instance_types=(first, "p4d.24xlarge"),
                   excluded=frozenset({(first, subnet)}))
    got = side.cloud.launch(pool, 1, 1, "tok-x", _tags("g-x"), spec)
    assert [(i.instance_type, i.subnet_id) for i in got.instances] == [
        ("p4d.24xlarge", subnet)]


def terminated_instances_are_listed_only_when_asked(side: Ec2Side) -> None:
    got = side.cloud.launch(side.pool(CapacityType.ON_DEMAND), 2, 2, "tok-e", _tags("g-e"))
    gone, kept = sorted(i.instance_id for i in got.instances)
    side.cloud.terminate([gone])
    assert [i.instance_id for i in side.cloud.find(_tags("g-e"))] == [kept]
    assert [i.instance_id for i in side.cloud.launched_with(_tags("g-e"))] == [kept]
    every = {i.instance_id: i for i in side.cloud.find(_tags("g-e"), include_terminated=True)}
    assert every[gone].state in ("shutting-down", "terminated")
    assert every[gone].state_reason == "Client.UserInitiatedShutdown"
    assert every[kept].state in ("pending", "running")


def instances_are_found_by_id_and_an_unknown_id_is_left_out(side: Ec2Side) -> None:
    """`find(ids=...)`: only those instances, terminated ones if asked; an id EC2 does not
    know (terminated over an hour ago) is left out, never an error for the others."""
    got = side.cloud.launch(side.pool(CapacityType.ON_DEMAND), 3, 3, "tok-i", _tags("g-i"))
    a, b, c = sorted(i.instance_id for i in got.instances)
    side.cloud.terminate([b])
    assert [i.instance_id for i in side.cloud.find(_tags("g-i"), ids=[a, b])] == [a]
    found = side.cloud.find(_tags("g-i"), include_terminated=True,
                            ids=[b, c, "i-0000000000000dead"])
    assert sorted(i.instance_id for i in found) == [b, c]
    assert {i.instance_id: i.state for i in found}[b] in ("shutting-down", "terminated")
    assert side.cloud.find(_tags("g-i"), ids=[]) == []


def an_instance_ec2_does_not_know_needs_no_terminating(side: Ec2Side) -> None:
    """TerminateInstances with an id EC2 does not have (gone long ago, a row written by hand)
    fails the whole call with InvalidInstanceID.NotFound on EC2; the adapter reads that id as
    terminated and terminates the others, so a stale row cannot fail every pass forever."""
    got = side.cloud.launch(side.pool(CapacityType.ON_DEMAND), 1, 1, "tok-n", _tags("g-n"))
    iid = got.instances[0].instance_id
    side.cloud.terminate(["i-0000000000000dead", iid])
    every = {i.instance_id: i for i in side.cloud.find(_tags("g-n"), include_terminated=True)}
    assert every[iid].state in ("shutting-down", "terminated")


def tags_added_later_are_found(side: Ec2Side) -> None:
    got = side.cloud.launch(side.pool(CapacityType.ON_DEMAND), 1, 1, "tok-f", _tags("g-f"))
    iid = got.instances[0].instance_id
    side.cloud.tag(iid, {"slurmscale:node": "gpu-7"})
    found = side.cloud.find({"slurmscale:node": "gpu-7"})
    assert [i.instance_id for i in found] == [iid]
    assert found[0].tags[TAG_GANG] == "g-f"


def a_stopped_instance_keeps_its_tags_and_starts_again(side: Ec2Side) -> None:
    """A warm pool's instance (daemon/passes/warm_pool.py): stopped, it is listed with its
    tags (so the sweep knows it) but is no launch's to recover; started, it runs again; a
    stopped one terminates like any."""
    got = side.cloud.launch(side.pool(CapacityType.ON_DEMAND), 2, 2, "tok-w", _tags("g-w"))
    a, b = sorted(i.instance_id for i in got.instances)
    side.cloud.stop([a, b])
    found = {i.instance_id: i for i in side.cloud.find(_tags("g-w"))}
    assert {found[a].state, found[b].state} <= {"stopping", "stopped"}
    assert found[a].tags[TAG_GANG] == "g-w"
    assert side.cloud.launched_with(_tags("g-w")) == ()
    side.cloud.start(a)
    found = {i.instance_id: i for i in side.cloud.find(_tags("g-w"))}
    assert found[a].state in ("pending", "running") and found[b].state == "stopped"
    assert [i.instance_id for i in side.cloud.launched_with(_tags("g-w"))] == [a]
    side.cloud.terminate([b])
    assert [i.instance_id for i in side.cloud.find(_tags("g-w"))] == [a]
    try:  # (a warm row EC2 terminated meanwhile: its start is no start)
        side.cloud.start(b)
    except CloudError as e:
        assert e.code == "IncorrectInstanceState", e.code
    else:
        raise AssertionError("a terminated instance started")


def a_reclaimed_spot_instance_shows_why(side: Ec2Side) -> None:
    got = side.cloud.launch(side.pool(CapacityType.SPOT), 1, 1, "tok-g", _tags("g-g"))
    iid = got.instances[0].instance_id
    side.reclaim(iid)
    assert side.cloud.find(_tags("g-g")) == []
    (inst,) = side.cloud.find(_tags("g-g"), include_terminated=True)
    assert inst.state == "terminated"
    assert inst.state_reason == "Server.SpotInstanceTermination"


def placement_groups_hold_a_gang_until_it_is_gone(side: Ec2Side) -> None:
    pool = side.pool(CapacityType.ON_DEMAND)
    spec = FleetSpec(tuple(pool.instance_types), tuple(pool.subnets),
                     pool.launch_template.version, placement_group="ss-contract-pg")
    with pytest.raises(CloudError) as unknown:
        side.cloud.launch(pool, 2, 2, "tok-h", _tags("g-h"), spec)
    assert unknown.value.code == "InvalidPlacementGroup.Unknown"
    side.cloud.ensure_placement_group("ss-contract-pg", _tags("g-h"))
    side.cloud.ensure_placement_group("ss-contract-pg", _tags("g-h"))  # idempotent
    assert side.cloud.placement_groups({TAG_CLUSTER: "contract"}) == {
        "ss-contract-pg": _tags("g-h")}
    got = side.cloud.launch(pool, 2, 2, "tok-h", _tags("g-h"), spec)
    with pytest.raises(CloudError) as in_use:
        side.cloud.delete_placement_group("ss-contract-pg")
    assert in_use.value.code == "InvalidPlacementGroup.InUse"
    side.cloud.terminate([i.instance_id for i in got.instances])
    side.cloud.delete_placement_group("ss-contract-pg")
    assert side.cloud.placement_groups({TAG_CLUSTER: "contract"}) == {}


def subnets_answer_their_zone(side: Ec2Side) -> None:
    pool = side.pool(CapacityType.ON_DEMAND)
    assert side.cloud.subnet_zones(list(pool.subnets)) == {pool.subnets[0]: "us-east-1a"}


def reservations_report_their_free_count(side: Ec2Side) -> None:
    side.add_reservation("cr-0123456789abcdef0", "p5.48xlarge", 4)
    (r,) = side.cloud.capacity_reservations(["cr-0123456789abcdef0"])
    assert (r.id, r.instance_type, r.total, r.available, r.state) == (
        "cr-0123456789abcdef0", "p5.48xlarge", 4, 4, "active")
    assert r.availability_zone == "us-east-1a"


def a_fleet_into_a_reservation_fills_it_and_a_termination_frees_it(side: Ec2Side) -> None:
    """A reserved-capacity fleet naming the reservation (the daemon's route into ODCRs and
    blocks): as many as it has free, each instance carrying its id, the rest EC2's capacity
    error and no fallback; its free count is its total less the live instances in it."""
    rid = "cr-0f111ed000000001a"
    side.add_reservation(rid, "p5.48xlarge", 2)
    pool = side.pool(CapacityType.ON_DEMAND)
    spec = FleetSpec(tuple(pool.instance_types), tuple(pool.subnets),
                     pool.launch_template.version, reservation_ids=(rid,),
                     reservation_kinds=("default",))
    got = side.cloud.launch(pool, 3, 1, "tok-r", _tags("g-r"), spec)
    assert len(got.instances) == 2 and got.error_code == ICE
    assert {i.capacity_reservation_id for i in got.instances} == {rid}
    assert len(side.cloud.find(_tags("g-r"))) == 2  # nothing outside it
    (r,) = side.cloud.capacity_reservations([rid])
    assert (r.total, r.available) == (2, 0)
    side.cloud.terminate([got.instances[0].instance_id])
    (r,) = side.cloud.capacity_reservations([rid])
    assert r.available == 1


def a_capacity_block_takes_instances_only_in_its_window(side: Ec2Side) -> None:
    """A Capacity Block as DescribeCapacityReservations reports it (reservation type
    capacity-block, its start and end, its state following them: scheduled, then active; EC2
    user guide, "Capacity Blocks for ML") and a fleet into it by id as the daemon's block
    route makes one: before its start nothing but EC2's capacity error, once active as many
    as it has free, each instance carrying its id."""
    now = time.time()
    on, later = "cr-0b10c00000000000a", "cr-0b10c00000000000b"
    side.add_block(on, "p5.48xlarge", 2, now - 3600, now + 7200)
    side.add_block(later, "p5.48xlarge", 2, now + 3600, now + 10800)
    a, b = side.cloud.capacity_reservations([on, later])
    assert (a.state, a.reservation_type, a.total, a.available) == (
        "active", "capacity-block", 2, 2), a
    assert b.state == "scheduled", b  # (its free count then: not documented; not read)
    assert a.start == pytest.approx(now - 3600, abs=2) and a.end == pytest.approx(now + 7200,
                                                                                  abs=2)
    assert b.start == pytest.approx(now + 3600, abs=2)
    pool = side.pool(CapacityType.ON_DEMAND)

    def into(rid: str) -> FleetSpec:
        return replace(FleetSpec.of(pool), capacity_block=True, reservation_ids=(rid,),
                       reservation_kinds=("capacity-block",))
    got = side.cloud.launch(pool, 2, 2, "tok-b1", _tags("g-b1"), into(later))
    assert not got.instances and got.error_code == ICE, got
    got = side.cloud.launch(pool, 3, 1, "tok-b2", _tags("g-b2"), into(on))
    assert len(got.instances) == 2 and got.error_code == ICE, got
    assert {i.capacity_reservation_id for i in got.instances} == {on}
    (a,) = side.cloud.capacity_reservations([on])
    assert a.available == 0


def status_checks_list_running_instances_and_show_an_impaired_one(side: Ec2Side) -> None:
    got = side.cloud.launch(side.pool(CapacityType.ON_DEMAND), 3, 3, "tok-h", _tags("g-h"))
    bad, gone, ok = sorted(i.instance_id for i in got.instances)
    side.cloud.terminate([gone])
    side.impair(bad)
    seen = {h.instance_id: h for h in side.cloud.instance_health()}
    assert gone not in seen  # a terminated instance has no status to check
    assert seen[bad].impaired and seen[bad].instance_status == "impaired"
    assert not seen[ok].impaired and (seen[ok].system_status, seen[ok].instance_status) == (
        "ok", "ok")
    assert seen[ok].events == ()


def each_running_instance_has_its_network_nodes_and_the_others_none(side: Ec2Side) -> None:
    got = side.cloud.launch(side.pool(CapacityType.ON_DEMAND), 3, 3, "tok-t", _tags("g-t"))
    placed, unknown, gone = sorted(i.instance_id for i in got.instances)
    for n, i in enumerate((placed, unknown, gone), 1):
        side.cloud.tag(i, {TAG_NODE: f"gpu-{n}"})
    side.lay_out(placed, "gpu-1", ("nn-top", "nn-spine", "nn-leaf"))
    side.lay_out(gone, "gpu-3", ("nn-top", "nn-spine", "nn-other"))
    side.cloud.terminate([gone])
    # (running: its nodes, top-down; a type EC2 gives none for, or no longer running: left out)
    assert side.cloud.instance_topology([placed, unknown, gone]) == {
        placed: NetworkPlace(("nn-top", "nn-spine", "nn-leaf"))}


def a_reservation_shows_where_its_capacity_sits_and_its_instances_sit_there(side: Ec2Side
                                                                            ) -> None:
    """DescribeCapacityReservationTopology before a launch (an UltraServer's block id with
    it); a reservation EC2 placed nowhere is left out; an instance launched into one is
    where the reservation is."""
    placed, unplaced = "cr-0f111ed0000000a1b", "cr-0f111ed0000000a2c"
    side.add_reservation(placed, "p5.48xlarge", 2)
    side.add_reservation(unplaced, "p5.48xlarge", 2)
    here = NetworkPlace(("nn-top", "nn-spine", "nn-leaf"), "cr-0f111ed0000000b3d")
    side.place_reservation(placed, here)
    assert side.cloud.reservation_topology([placed, unplaced]) == {placed: here}
    pool = side.pool(CapacityType.ON_DEMAND)
    spec = FleetSpec(tuple(pool.instance_types), tuple(pool.subnets),
                     pool.launch_template.version, reservation_ids=(placed,),
                     reservation_kinds=("default",))
    got = side.cloud.launch(pool, 2, 2, "tok-rt", _tags("g-rt"), spec)
    ids = [i.instance_id for i in got.instances]
    assert len(ids) == 2
    assert side.cloud.instance_topology(ids) == {i: here for i in ids}


CHECKS: tuple[Callable[[Ec2Side], None], ...] = (
    a_capacity_error_names_the_overrides_it_could_not_fill,
    a_fleet_launches_only_on_the_overrides_it_keeps,
    instances_are_found_by_id_and_an_unknown_id_is_left_out,
    a_gang_launches_whole_with_its_tags,
    on_demand_pools_launch_on_demand,
    short_of_the_minimum_gets_nothing,
    below_the_target_above_the_minimum_gets_what_there_is,
    terminated_instances_are_listed_only_when_asked,
    an_instance_ec2_does_not_know_needs_no_terminating,
    tags_added_later_are_found,
    a_stopped_instance_keeps_its_tags_and_starts_again,
    a_reclaimed_spot_instance_shows_why,
    placement_groups_hold_a_gang_until_it_is_gone,
    subnets_answer_their_zone,
    reservations_report_their_free_count,
    a_fleet_into_a_reservation_fills_it_and_a_termination_frees_it,
    a_capacity_block_takes_instances_only_in_its_window,
    status_checks_list_running_instances_and_show_an_impaired_one,
    each_running_instance_has_its_network_nodes_and_the_others_none,
    a_reservation_shows_where_its_capacity_sits_and_its_instances_sit_there,
)

