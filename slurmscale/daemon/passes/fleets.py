"""A gang's fleets: where they launch (reserved or normal capacity, which placement group)
and, for a gang larger than one fleet may be, several CreateFleet calls pinned to the first
one's instance type, subnet (so AZ) and placement group, all or nothing across them. The
reservations they launch into: reserved_capacity.py. The pools' subnets' AZs are read once.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import replace

from slurmscale.cloud.protocol import (
    TAG_CLUSTER,
    TAG_GANG,
    CloudError,
    FleetSpec,
)
from slurmscale.config import (
    CapacityType,
    Placement,
    Pool,
)
from slurmscale.crashpoints import crash_point
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.executor.effects import Applied, DropPlacementGroup, Fleet, PlacementGroup
from slurmscale.model import (
    FleetError,
    Gang,
    LaunchedInstance,
    LaunchResult,
)
from slurmscale.policy.routing import (
    Route,
    RouteKind,
    fleet_parts,
)
from slurmscale.store.protocol import LaunchStore

log = logging.getLogger(__name__)

Token = Callable[[str], str]


def _pinned(spec: FleetSpec, first: LaunchedInstance) -> FleetSpec:
    """The spec of a gang's later fleets: the first fleet's instance type and subnet (AZ)."""
    return replace(spec, instance_types=(first.instance_type,) if first.instance_type
                   else spec.instance_types,
                   subnets=(first.subnet_id,) if first.subnet_id else spec.subnets,
                   excluded=frozenset())


def gang_placement_group(cluster: str, gid: str) -> str:
    """The per-gang placement group's name: the cluster's, then a hash of the gang id."""
    return f"slurmscale-{cluster}-{hashlib.sha256(gid.encode()).hexdigest()[:16]}"


class GangFleets:
    """Launches one gang as one or several fleets (EC2's calls: effects, `effects.py`)."""

    def __init__(self, ctx: PassContext[LaunchStore], token: Token) -> None:
        """`token`: gang id (+ part) -> EC2 ClientToken."""
        self.ctx = ctx
        self.cfg = ctx.cfg
        self.token = token
        self.groups_made: set[str] = set()  # pools' groups known to exist

    def spec(self, pool: Pool, route: Route, gid: str,
             excluded: frozenset[tuple[str, str]] = frozenset()) -> FleetSpec:
        """The gang's fleet: where its route sends it, in its placement group, without the
        (type, subnet) overrides `excluded` (offerings in capacity backoff) on normal
        capacity, unless they are all the pool has (then it tries them all: EC2 says)."""
        spec = FleetSpec.of(pool)
        if route.kind is RouteKind.NORMAL and excluded and \
                replace(spec, excluded=excluded).overrides():
            spec = replace(spec, excluded=excluded)
        if route.kind is RouteKind.RESERVED and pool.capacity_type is CapacityType.CAPACITY_BLOCK:
            spec = replace(spec, instance_types=route.instance_types, subnets=route.subnets,
                           capacity_block=True, reservation_ids=route.reservation_ids,
                           reservation_kinds=("capacity-block",))
        elif route.kind is RouteKind.RESERVED:
            cr = pool.capacity_reservations
            assert cr is not None
            spec = replace(spec, instance_types=route.instance_types, subnets=route.subnets,
                           reserved=True)
            if cr.launch_template_version is not None:  # the template's way (a resource group)
                spec = replace(spec, launch_template_version=cr.launch_template_version)
            else:  # by id: the reservations the gang fits in
                spec = replace(spec, reservation_ids=route.reservation_ids,
                               reservation_kinds=route.reservation_kinds)
        group = self.placement_group(pool, gid)
        return replace(spec, placement_group=group) if group else spec

    def placement_group(self, pool: Pool, gid: str) -> str | None:
        if pool.placement is Placement.PER_GANG:
            return gang_placement_group(self.cfg.cluster_name, gid)
        return pool.placement_group

    def _ensure_group(self, name: str, gid: str | None) -> Applied | None:
        """The group made unless known to exist; its outcome (None: known)."""
        if name in self.groups_made:
            return None
        tags = {TAG_CLUSTER: self.cfg.cluster_name, **({TAG_GANG: gid} if gid else {})}
        (made,) = self.ctx.effects.apply([PlacementGroup(name, tags)])
        if made.taken and gid is None:  # a pool's group lives on; a gang's goes with the gang
            self.groups_made.add(name)
        return made

    def launch(self, pool: Pool, gang: Gang, gid: str, tags: dict[str, str],
               spec: FleetSpec, have: tuple[LaunchedInstance, ...] = ()
               ) -> LaunchResult | Applied:
        """All parts of the gang, stopping at the first that falls short (the caller rolls
        back everything carrying the gang's tag). Where EC2 refused or did not answer a call
        (the placement group, a CreateFleet), that call's outcome (its `code`).

        `have`: what an earlier attempt of this gang launched (found by its tag after a
        restart). Each part is all or nothing and sent in order, so `have` is whole parts: the
        first k; only the parts after them are sent (each with its own ClientToken, as the
        first attempt would have), pinned where the first part went. A count that is not a
        whole number of parts is a real shortfall."""
        if spec.placement_group:
            made = self._ensure_group(spec.placement_group,
                                      gid if pool.placement is Placement.PER_GANG else None)
            if made is not None and not made.taken:
                return made
        parts = fleet_parts(gang.size, self.cfg.aws.max_instances_per_fleet)
        got: list[LaunchedInstance] = list(have)
        fleets: list[str] = []
        errors: list[FleetError] = []
        code = message = ""
        first = 0
        if have:
            whole = [sum(parts[:k]) for k in range(len(parts) + 1)]
            if gang.coalesced or len(have) not in whole:
                return LaunchResult(tuple(have), "PartialCapacity", f"an earlier attempt "
                                    f"launched {len(have)} of {gang.size} instances", "")
            first = whole.index(len(have))
            spec = _pinned(spec, have[0])
        for i, n in enumerate(parts):
            if i < first:
                continue
            need = 1 if gang.coalesced else n
            token = self.token(gid if i == 0 else f"{gid}#{i}")
            (sent,) = self.ctx.effects.apply([Fleet(pool, n, need, token, tags, spec)])
            if sent.fleet is None:
                return sent
            r = sent.fleet
            got += r.instances
            fleets.append(r.fleet_id)
            errors += r.errors
            if len(r.instances) < n:
                code = r.error_code or "PartialCapacity"
                message = r.error_message or (f"fleet {i + 1} of {len(parts)} gave "
                                              f"{len(r.instances)} of {n} instances")
                if not gang.coalesced:  # all or nothing: the rest is not even asked for
                    break
            if i == 0 and len(parts) > 1 and r.instances:
                # the rest of the gang goes where the first fleet went
                spec = _pinned(spec, r.instances[0])
            if i + 1 < len(parts):
                crash_point("launch:between_fleets")
        return LaunchResult(tuple(got), code, message, ",".join(f for f in fleets if f),
                            errors=tuple(errors))

    def sweep_groups(self, live_gangs: set[str]) -> list[str]:
        """Per-gang placement groups whose gang has no instance left: deleted (EC2 refuses
        while an instance is still shutting down; tried again next pass). Returns those
        deleted."""
        if not any(p.placement is Placement.PER_GANG for p in self.cfg.pools):
            return []
        try:
            groups = self.ctx.cloud.placement_groups({TAG_CLUSTER: self.cfg.cluster_name})
        except CloudError as e:
            log.warning("cannot list placement groups: %s", e)
            return []
        done = self.ctx.effects.apply([
            DropPlacementGroup(name) for name, tags in sorted(groups.items())
            if tags.get(TAG_GANG) and tags[TAG_GANG] not in live_gangs])
        return [a.effect.name for a in done
                if a.taken and isinstance(a.effect, DropPlacementGroup)]
