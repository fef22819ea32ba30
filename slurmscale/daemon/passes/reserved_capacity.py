"""The pools' capacity reservations and Capacity Blocks as EC2 last reported them: read with
one DescribeCapacityReservations for every pool's ids, at most every `RESERVATIONS_TTL_S`
(and counted down locally as gangs launch into them), so a burst of gangs costs one describe;
a pool whose gangs must share a network node (`gang_network`) has its reservations' topology
read with them. Each read is recorded on the store for status, plan, report and metrics."""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from datetime import UTC, datetime

from slurmscale.audit import Kind
from slurmscale.cloud.eventbridge import Ec2Event, EventKind, aws_time
from slurmscale.cloud.protocol import CloudError
from slurmscale.config import (
    BLOCK_WARNING_LEAD_S,
    CapacityType,
    Pool,
    ReservationPreference,
)
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.executor.effects import Timers
from slurmscale.model import (
    INTERRUPTIBLE,
    CapacityReservation,
    Gang,
    GangNetwork,
    NetworkPlace,
)
from slurmscale.policy.routing import (
    Route,
    RouteKind,
    reclaims_exhausted,
    route_gang,
    take,
)
from slurmscale.store.protocol import ReconcileStore
from slurmscale.store.rows import CapacityReservationRow, TimerKind

log = logging.getLogger(__name__)

RESERVATIONS_TTL_S = 30.0
# A block past its start that EC2 still called scheduled is read again this soon: the pass
# that opens a window must see the block active, or its first gangs would be refused.
STATE_DUE_TTL_S = 2.0
# States a reservation leaves by itself when its start comes
BEFORE_START = frozenset({"scheduled", "pending", "payment-pending", "assessing", "delayed"})
# States a reservation does not leave (CapacityReservation.State in the EC2 API reference)
ENDED = frozenset({"expired", "cancelled", "failed", "payment-failed", "unsupported"})


def _warned(r: CapacityReservation, end: float | None) -> CapacityReservation:
    if end is None or (r.end is not None and r.end <= end):
        return r
    return replace(r, end=end)


class ReservedCapacity:
    """The pools' capacity reservations as EC2 last reported them (each read recorded on
    the store for status, plan, report and metrics)."""

    def __init__(self, ctx: PassContext[ReconcileStore]) -> None:
        cfg = ctx.cfg
        self.cfg = cfg
        self.cloud = ctx.cloud
        self.event = ctx.event
        self.store = ctx.store
        self.effects = ctx.effects
        self.ids = sorted({i for p in cfg.pools if p.capacity_reservations
                           for i in p.capacity_reservations.ids})
        self._read_at: float | None = None
        self._by_id: dict[str, CapacityReservation] = {}
        self._zones: dict[str, str] = {}
        self._failing = False
        self._missing: list[str] = []
        self.readable = True  # the last read answered
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
        # a warning's close is over with its block (gone from EC2, or ended)
        self.effects.apply([Timers(TimerKind.BLOCK_WARNED, over=tuple(sorted(
            i for i in self.warned_ends() if i not in self._by_id
            or self._by_id[i].state in ENDED)))])
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
        warned = self.warned_ends() if pool.capacity_type is CapacityType.CAPACITY_BLOCK else {}
        return [_warned(by_id[i], warned.get(i)) for i in cr.ids if i in by_id]

    def warned_ends(self) -> dict[str, float]:
        """Block id -> the end an Expiration Warning implies, when earlier than EC2's date (a
        late config, a skewed clock): the block closes by it. On the store (timers of kind
        BLOCK_WARNED, since = that end): the warning's message is deleted once read, and a
        standby that takes over closes the block as the leader would have."""
        return self.store.timers(TimerKind.BLOCK_WARNED)

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
        was = self.warned_ends().get(ev.reservation_id, math.inf)
        if end < was:
            self.effects.apply([Timers(TimerKind.BLOCK_WARNED, {ev.reservation_id: end})])
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
