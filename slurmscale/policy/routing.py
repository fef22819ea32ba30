"""Which capacity a gang launches on, and in how many fleets. Pure: no I/O, no clock.

Capacity already paid for comes first, but a gang is never split across it: a gang goes to a
pool's capacity reservations only when the WHOLE gang fits in the free reserved capacity of
one instance type in one Availability Zone (a gang shares one AZ, one type and one placement
group, and a reservation is per type and AZ), and, where the pool asks it (`gang_network`),
under one network node or UltraServer by EC2's reservation topology. Any other gang launches
on the pool's normal capacity, or, with preference `only`, is refused (its job requeues).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from slurmscale.model import (
    CapacityReservation,
    GangNetwork,
    NetworkPlace,
    ReservationPreference,
)

# Our own code for a gang refused because the reservations cannot take it whole (preference
# `only`); the node reason says it, and it is no EC2 capacity error (no backoff follows).
NO_RESERVED_FIT = "ReservedCapacityTooSmall"


class RouteKind(StrEnum):
    RESERVED = "reserved"  # every instance in the pool's capacity reservations
    NORMAL = "normal"  # the pool's own capacity type (spot or on-demand)
    REFUSED = "refused"  # preference `only` and the gang does not fit whole


@dataclass(frozen=True)
class Route:
    kind: RouteKind
    reason: str
    instance_types: tuple[str, ...] = ()  # RESERVED: the one type the reservations hold
    subnets: tuple[str, ...] = ()  # RESERVED: the pool's subnets in the reservations' AZ
    reservation_ids: tuple[str, ...] = ()
    reservation_kinds: tuple[str, ...] = ()  # their reservation_type, each once


@dataclass(frozen=True)
class Routed:
    """Where one gang was sent, and why (`plan` lists those of the last minutes)."""

    at: float  # Unix seconds
    pool: str
    job_id: str  # the gang's first job ("" for a batch of single nodes)
    nodes: str
    kind: RouteKind
    reason: str


def reclaims_exhausted(reclaimed: int, max_reclaims: int) -> bool:
    """Has a gang's job lost its run to an interruptible reservation's owner often enough
    (`capacity_reservations.max_reclaims`) that it goes to the pool's other capacity? A job
    that keeps losing its run there might never end. The daemon's route and the simulator's
    paid-capacity model both ask this."""
    return reclaimed >= max_reclaims


def route_gang(size: int, instance_types: Sequence[str], subnet_zones: Mapping[str, str],
               reservations: Sequence[CapacityReservation],
               preference: ReservationPreference, network: GangNetwork = GangNetwork.ANY,
               places: Mapping[str, NetworkPlace] | None = None) -> Route:
    """Where a gang of `size` nodes goes. `subnet_zones`: the pool's subnets (config order)
    to their AZ; `reservations`: the pool's reservations as last read. The first instance
    type (pool order) and subnet (pool order) whose active reservations together have `size`
    free wins; with none, the normal capacity (or a refusal, preference `only`).

    With `network` other than `any`, reservations count together only when they share that
    network node (or UltraServer) by `places` (reservation id -> DescribeCapacityReservation-
    Topology's answer): a gang is never split across them. A reservation EC2 placed nowhere
    is a group of its own. Of the groups it fits in, the gang takes the one with the fewest
    free (a larger group stays whole for a larger gang)."""
    if preference is ReservationPreference.NONE:
        return Route(RouteKind.NORMAL, "reservations not used (preference none)")
    if not reservations:
        why = "no reservation known to EC2 right now"
        return Route(RouteKind.REFUSED, why + " (preference only)") \
            if preference is ReservationPreference.ONLY else Route(RouteKind.NORMAL, why)
    places = places or {}
    free: dict[tuple[str, str], dict[str, list[CapacityReservation]]] = {}
    for r in reservations:
        if r.active and r.available > 0:
            key = network.key(places.get(r.id))
            groups = free.setdefault((r.instance_type, r.availability_zone), {})
            groups.setdefault(f"?{r.id}" if key is None else key, []).append(r)
    best, best_all = 0, 0
    zones = list(dict.fromkeys(subnet_zones.values()))  # each AZ once, in subnet order
    for t in instance_types:
        for az in zones:
            groups = free.get((t, az), {})
            sizes = {k: sum(r.available for r in rs) for k, rs in groups.items()}
            best = max(best, *sizes.values(), 0)
            best_all = max(best_all, sum(sizes.values()))
            fits = sorted((n, k) for k, n in sizes.items() if n >= size)
            if fits:
                n, key = fits[0]
                rs = groups[key]
                subnets = tuple(s for s, z in subnet_zones.items() if z == az)
                where = "" if network is GangNetwork.ANY else \
                    f" under one {network.value} ({_group(key)})"
                return Route(RouteKind.RESERVED,
                             f"fits whole in reserved {t} in {az}{where} ({n} free in "
                             f"{', '.join(r.id for r in rs)})",
                             (t,), subnets, tuple(r.id for r in rs),
                             tuple(sorted({r.reservation_type for r in rs})))
    if network is GangNetwork.ANY:
        why = (f"the reservations have at most {best} free node(s) of one type in one AZ, "
               f"the gang needs {size}")
    else:
        why = (f"the reservations have at most {best} free node(s) of one type under one "
               f"{network.value} ({best_all} in one AZ), the gang needs {size} and is never "
               "split across them")
    if preference is ReservationPreference.ONLY:
        return Route(RouteKind.REFUSED, why + " (preference only)")
    return Route(RouteKind.NORMAL, why + ": launched whole on normal capacity")


def _group(key: str) -> str:
    return f"{key[1:]} alone: EC2 gives no topology for it" if key.startswith("?") else key


def fleet_parts(size: int, max_per_fleet: int) -> list[int]:
    """A gang's sizes per CreateFleet: as few fleets as EC2's per-fleet maximum allows, the
    first ones full (5 nodes, at most 2 a fleet: 2, 2, 1)."""
    if size < 1 or max_per_fleet < 1:
        raise ValueError(f"size {size} and max_per_fleet {max_per_fleet} must be >= 1")
    full, rest = divmod(size, max_per_fleet)
    return [max_per_fleet] * full + ([rest] if rest else [])


def take(reservations: Sequence[CapacityReservation], ids: Sequence[str], n: int
         ) -> list[CapacityReservation]:
    """The reservations after `n` instances launched into those of `ids` (first ones first),
    so gangs routed in the same pass do not count the same free capacity twice."""
    out = []
    left = n
    for r in reservations:
        if r.id in ids and left > 0:
            used = min(left, r.available)
            left -= used
            r = CapacityReservation(r.id, r.instance_type, r.availability_zone, r.total,
                                    r.available - used, r.state, r.reservation_type, r.start,
                                    r.end)
        out.append(r)
    return out
