"""A gang's fleets: where they launch (reserved or normal capacity, which placement group)
and, for a gang larger than one fleet may be, several CreateFleet calls pinned to the first
one's instance type, subnet (so AZ) and placement group, all or nothing across them.

The reservations are read with one DescribeCapacityReservations for every pool's ids, at
most every `RESERVATIONS_TTL_S` (and counted down locally as gangs launch into them), so a
burst of gangs costs one describe. The pools' subnets' AZs are read once. A pool whose gangs
must share a network node (`gang_network`) has its reservations' topology read with them.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from slurmscale.audit import Kind
from slurmscale.cloud.eventbridge import Ec2Event, EventKind, aws_time
from slurmscale.cloud.protocol import (
    TAG_CLUSTER,
    TAG_GANG,
    CloudError,
    FleetSpec,
)
from slurmscale.config import (
    BLOCK_WARNING_LEAD_S,
    CapacityType,
    Placement,
    Pool,
    ReservationPreference,
)
from slurmscale.crashpoints import crash_point
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.effects import Applied, DropPlacementGroup, Fleet, PlacementGroup
from slurmscale.model import (
    INTERRUPTIBLE,
    CapacityReservation,
    FleetError,
    Gang,
    GangNetwork,
    LaunchedInstance,
    LaunchResult,
    NetworkPlace,
)
from slurmscale.policy.routing import (
    Route,
    RouteKind,
    fleet_parts,
    reclaims_exhausted,
    route_gang,
    take,
)
from slurmscale.store.protocol import LaunchStore, ReconcileStore
from slurmscale.store.rows import CapacityReservationRow

log = logging.getLogger(__name__)

Token = Callable[[str], str]

RESERVATIONS_TTL_S = 30.0
# A block past its start that EC2 still called scheduled is read again this soon: the pass
# that opens a window must see the block active, or its first gangs would be refused.
STATE_DUE_TTL_S = 2.0
# States a reservation leaves by itself when its start comes
BEFORE_START = frozenset({"scheduled", "pending", "payment-pending", "assessing", "delayed"})


def _pinned(spec: FleetSpec, first: LaunchedInstance) -> FleetSpec:
    """The spec of a gang's later fleets: the first fleet's instance type and subnet (AZ)."""
    return replace(spec, instance_types=(first.instance_type,) if first.instance_type
                   else spec.instance_types,
                   subnets=(first.subnet_id,) if first.subnet_id else spec.subnets,
                   excluded=frozenset())


def _warned(r: CapacityReservation, end: float | None) -> CapacityReservation:
    if end is None or (r.end is not None and r.end <= end):
        return r
    return replace(r, end=end)


def gang_placement_group(cluster: str, gid: str) -> str:
    """The per-gang placement group's name: the cluster's, then a hash of the gang id."""
    return f"slurmscale-{cluster}-{hashlib.sha256(gid.encode()).hexdigest()[:16]}"


class ReservedCapacity:
    """The pools' capacity reservations as EC2 last reported them (each read recorded on
    the store for status, plan, report and metrics)."""

    def __init__(self, ctx: PassContext[ReconcileStore]) -> None:
        cfg = ctx.cfg
        self.cfg = cfg
        self.cloud = ctx.cloud
        self.event = ctx.event
        self.store = ctx.store
        self.ids = sorted({i for p in cfg.pools if p.capacity_reservations
                           for i in p.capacity_reservations.ids})
        self._read_at: float | None = None
        self._by_id: dict[str, CapacityReservation] = {}
        self._zones: dict[str, str] = {}
        self._failing = False
        self._missing: list[str] = []
        self.readable = True  # the last read answered
        # block id -> the end an Expiration Warning implies, when earlier than EC2's date
        # (a late config, a skewed clock): the block closes by it
        self.warned_end: dict[str, float] = {}
        # where each reservation's capacity sits (DescribeCapacityReservationTopology), read
        # with the reservations for the pools whose gangs must share a network node
        self.topology_ids = sorted({i for p in cfg.pools if p.capacity_reservations
                                    and p.capacity_reservations.gang_network
                                    is not GangNetwork.ANY
                                    for i in p.capacity_reservations.ids})
        self.places: dict[str, NetworkPlace] = {}
        self._topology_failing = False

    def _save(self, found: list[CapacityReservation], now: float) -> None:
        """EC2's capacity reservations as last read, for status, plan and reports."""
        pool_of = {i: p.name for p in self.cfg.pools if p.capacity_reservations
                   for i in p.capacity_reservations.ids}

        def at(t: float | None) -> datetime | None:
            return None if t is None else datetime.fromtimestamp(t, UTC)
        self.store.save_capacity_reservations([CapacityReservationRow(
            id=r.id, pool=pool_of.get(r.id, ""), kind=r.reservation_type,
            instance_type=r.instance_type, availability_zone=r.availability_zone,
            total=r.total, available=r.available, state=r.state, start_at=at(r.start),
            end_at=at(r.end), read_at=datetime.fromtimestamp(now, UTC)) for r in found])

    def reservations(self, now: float) -> dict[str, CapacityReservation]:
        """id -> reservation; those EC2 did not return are missing (an event says so once)."""
        if not self.ids:
            return {}
        if self._read_at is not None and now - self._read_at < self._ttl(now):
            return self._by_id
        try:
            found = self.cloud.capacity_reservations(self.ids)
        except CloudError as e:
            if not e.code.startswith("InvalidCapacityReservationId"):
                if not self._failing:
                    self.event(Kind.CLOUD_ERROR, f"reading capacity reservations: {e}; gangs "
                               "launch on normal capacity until they can be read")
                self._failing = True
                self.readable = False
                return {}
            # one bad id fails the whole call: read them one by one, skip the bad ones
            found = []
            for i in self.ids:
                try:
                    found += self.cloud.capacity_reservations([i])
                except CloudError as e1:
                    log.warning("capacity reservation %s: %s", i, e1)
        missing = sorted(set(self.ids) - {r.id for r in found})
        if missing and (self._read_at is None or set(missing) - set(self._missing)):
            self.event(Kind.CAPACITY_RESERVATION_MISSING, f"EC2 does not know capacity "
                       f"reservation(s) {', '.join(missing)}: not used (check "
                       "pools[].capacity_reservations.ids)")
        self._missing = missing
        self._failing = False
        self.readable = True
        self._by_id = {r.id: r for r in found}
        self._read_at = now
        self._read_places([i for i in self.topology_ids if i in self._by_id])
        if found:
            self._save(found, now)
        return self._by_id

    def _read_places(self, ids: list[str]) -> None:
        """The reservations' topology, read again with each read of the reservations (a
        pending one gets its place when EC2 has one); what was known is kept on a failure,
        which is said once: the gangs then fit only where the last answer allows."""
        if not ids:
            return
        try:
            self.places = self.cloud.reservation_topology(ids)
        except CloudError as e:
            if not self._topology_failing:
                self.event(Kind.CLOUD_ERROR, f"reading the capacity reservations' topology: "
                           f"{e}; gangs go where the last answer allows (a reservation with "
                           "no known place takes a gang alone)")
            self._topology_failing = True
            return
        self._topology_failing = False

    def _ttl(self, now: float) -> float:
        due = any(r.state in BEFORE_START and r.start is not None and r.start <= now
                  for r in self._by_id.values())
        return STATE_DUE_TTL_S if due else RESERVATIONS_TTL_S

    def starting(self, pool: Pool, now: float) -> CapacityReservation | None:
        """A reservation of the pool whose start time has come while EC2, as last read, still
        reports it before its start (EC2 turns a block active at its start, a read may come
        a moment earlier): a gang refused now would fit a pass later."""
        return next((r for r in self.of_pool(pool, now) if r.state in BEFORE_START
                     and r.start is not None and r.start <= now), None)

    def of_pool(self, pool: Pool, now: float) -> list[CapacityReservation]:
        cr = pool.capacity_reservations
        if cr is None:
            return []
        by_id = self.reservations(now)
        return [_warned(by_id[i], self.warned_end.get(i)) for i in cr.ids if i in by_id]

    def changed(self) -> None:
        """Read the reservations again at the next ask (one was reclaimed, say)."""
        self._read_at = None

    def block_event(self, ev: Ec2Event, now: datetime) -> bool:
        """A Capacity Block event from the queue: "Delivered" re-reads the blocks at once; an
        Expiration Warning (40 minutes before the block's end, its terminations 10 minutes
        on) closes the block's window at once if it is still open (a late config, a skewed
        clock, a margin below AWS's lead): its end is taken as the warning's time plus the
        margin, so the pass requeues and powers down now."""
        self.changed()  # its state or end has changed
        if ev.kind is EventKind.BLOCK_DELIVERED:
            self.event(Kind.BLOCK_DELIVERED, f"capacity block {ev.reservation_id} delivered "
                       f"({ev.time}): blocks read again")
            return True
        warned = aws_time(ev.time) or now.timestamp()
        end = min(warned + min(BLOCK_WARNING_LEAD_S, self.cfg.block_end_margin_s()),
                  ev.end or math.inf)
        self.warned_end[ev.reservation_id] = min(end, self.warned_end.get(
            ev.reservation_id, math.inf))
        self.event(Kind.BLOCK_EXPIRING, f"capacity block {ev.reservation_id}: Expiration Warning "
                   f"at {ev.time} (EC2's terminations begin 10 minutes on): its window is "
                   "closed from then on")
        return True

    def launched(self, ids: tuple[str, ...], n: int) -> None:
        """`n` instances went into `ids`: count them down until the next read."""
        after = take(list(self._by_id.values()), ids, n)
        self._by_id = {r.id: r for r in after}

    def zones(self, pool: Pool) -> dict[str, str]:
        """The pool's subnets (config order) -> AZ; {} if EC2 cannot say (no reserved route)."""
        if not all(s in self._zones for s in pool.subnets):
            try:
                self._zones.update(self.cloud.subnet_zones(list(pool.subnets)))
            except CloudError as e:
                log.warning("cannot read the AZs of %s's subnets: %s", pool.name, e)
                return {}
        return {s: self._zones[s] for s in pool.subnets if s in self._zones}

    def route(self, pool: Pool, gang: Gang, now: float, reclaimed: int = 0) -> Route:
        """Where the gang goes. `reclaimed`: the most times one of its jobs' runs was taken
        back by an interruptible reservation's owner; from `max_reclaims` on the gang skips
        interruptible reservations for the pool's other capacity (a job that keeps losing
        its run there might never end)."""
        cr = pool.capacity_reservations
        if cr is None:
            return Route(RouteKind.NORMAL, "no reservations")
        block = pool.capacity_type is CapacityType.CAPACITY_BLOCK
        rs = self.of_pool(pool, now)
        if block:  # a block past its window's close takes no gang: its instances end with it
            close_s = self.cfg.block_end_margin_s()
            rs = [r for r in rs if r.end is None or now < r.end - close_s]
        # (preference `only`: the reservations are the pool's only capacity)
        shun = (reclaims_exhausted(reclaimed, cr.max_reclaims) and not block
                and cr.preference is not ReservationPreference.ONLY)
        if shun:
            rs = [r for r in rs if r.reservation_type != INTERRUPTIBLE]
        route = route_gang(gang.size, pool.instance_types, self.zones(pool), rs,
                           ReservationPreference.ONLY if block else cr.preference,
                           cr.gang_network, self.places)
        if not shun:
            return route
        return replace(route, reason=f"{route.reason} (interruptible reservations skipped: a "
                       f"job's run reclaimed {reclaimed} time(s), max_reclaims "
                       f"{cr.max_reclaims})")


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
