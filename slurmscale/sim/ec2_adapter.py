"""The simulated EC2 behind the daemon's `CloudProvider` protocol, and the queue its events
arrive on (`EventQueue`).

What it keeps is what the daemon asks EC2 for: instances with their tags, states and state
reasons; a capacity limit per market; subnets' zones; placement groups; capacity
reservations as DescribeCapacityReservations would list them. Its answers follow EC2's
documented behaviour, and `tests/support/ec2_contract.py` runs the same checks against it and
against the real adapter on moto behind the fault-injecting proxy:

- CreateFleet `instant` with MinTargetCapacity: EC2 launches at least the minimum or nothing;
  whatever it could not launch comes back as an `InsufficientInstanceCapacity` error beside
  the instances (a successful call). A fleet naming an unknown placement group is refused.
- A placement group: created with its tags, listed by tag, deleted only once no live
  instance is in it.
- A terminated instance stays listed (state `terminated`, with its state reason) for those who
  ask for terminated ones, for an hour (as EC2 keeps it visible); one AWS reclaims
  (`reclaim`) shows `Server.SpotInstanceTermination`.
- Capacity reservations: a reserved-capacity fleet naming reservations by id
  (`FleetSpec.reservation_ids`; EC2 API reference, CreateFleet's ReservedCapacityOptionsRequest)
  gets as many as they have free, each instance carrying its reservation's id, the rest an
  insufficient-capacity error and no fallback; an on-demand fleet whose template targets them
  (`FleetSpec.reserved`, UsageStrategy use-capacity-reservations-first) fills the unused ones
  first "up to the target On-Demand capacity" and launches the rest as ordinary on-demand (EC2
  user guide, "Use Capacity Reservations to reserve On-Demand capacity in EC2 Fleet"). A
  reservation's free count is what it had free less the live instances in it.
- A Capacity Block (reservation type `capacity-block`, with its start and end): its state
  follows its window - scheduled before the start, active until the end, expired after (EC2
  user guide, "Capacity Blocks for ML") - so a fleet into it before its start gets nothing but
  the capacity error; from `BLOCK_TERMINATION_LEAD_S` (30 minutes) before its end EC2
  terminates its instances (`take_back`; the user guide, "Monitor Capacity Blocks using
  EventBridge": "we begin terminating any instances that are running in the Capacity Block
  30 minutes before the reservation end time").
- Not modelled: ClientToken idempotency (the simulator never retries a launch; moto does not
  honour it either, so the contract cannot check it).
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from slurmscale.cloud.eventbridge import EventKind, event_message
from slurmscale.cloud.protocol import CloudError, CloudInstance, FleetSpec, QueueMessage
from slurmscale.config import Pool
from slurmscale.model import (
    CapacityReservation,
    FleetError,
    InstanceHealth,
    LaunchedInstance,
    LaunchResult,
    NetworkPlace,
)

SPOT = "spot"
ON_DEMAND = "on-demand"
USER_SHUTDOWN = "Client.UserInitiatedShutdown"
SPOT_RECLAIM = "Server.SpotInstanceTermination"
VISIBLE_AFTER_END = timedelta(hours=1)
BLOCK = "capacity-block"  # a Capacity Block's reservation type
WINDOW_STATES = frozenset({"scheduled", "active", "expired"})  # a block's, by its window
LIVE = frozenset({"pending", "running", "stopping", "stopped", "shutting-down"})


def reported(r: CapacityReservation, live_in: Callable[[str], int]) -> CapacityReservation:
    """The reservation as DescribeCapacityReservations reports it: what it had free less the
    live instances in it (`live_in`: its id -> how many)."""
    return replace(r, available=max(0, r.available - live_in(r.id)))


def free_places(reservations: Mapping[str, CapacityReservation], live_in: Callable[[str], int],
                itype: str, ids: Iterable[str]) -> list[str]:
    """One entry per free place (its reservation's id) in these active reservations of this
    instance type (`reported`)."""
    out: list[str] = []
    for rid in ids:
        r = reservations.get(rid)
        if r is not None and r.instance_type == itype and r.state == "active":
            out += [rid] * reported(r, live_in).available
    return out


def network_places(ids: Iterable[str], running: Callable[[str], bool],
                   own: Mapping[str, NetworkPlace], reservation_of: Callable[[str], str],
                   reservations: Mapping[str, NetworkPlace]) -> dict[str, NetworkPlace]:
    """DescribeInstanceTopology's answer for `ids`: a running instance's own place, else its
    reservation's (the reservation's topology is where its capacity sits before a launch:
    EC2 API reference, DescribeCapacityReservationTopology); none for any other."""
    out = {}
    for i in ids:
        if running(i):
            place = own.get(i) or reservations.get(reservation_of(i))
            if place is not None:
                out[i] = place
    return out


@dataclass
class _Instance:
    id: str
    instance_type: str
    lifecycle: str
    subnet: str
    tags: dict[str, str]
    launched_at: datetime
    private_ip: str
    group: str | None = None  # its placement group
    state: str = "running"
    state_reason: str = ""
    image_id: str = "ami-0a1b2c3d4e5f60718"
    impaired: bool = False  # failed EC2's instance status check (the simulator's node failure)
    reservation: str = ""  # the capacity reservation it runs in
    listed: CloudInstance | None = None  # as DescribeInstances lists it (None: changed since)

    def listing(self) -> CloudInstance:
        """What DescribeInstances says of it, made once per change (the sweep asks every
        pass)."""
        if self.listed is None:
            self.listed = CloudInstance(self.id, self.state, dict(self.tags), self.private_ip,
                                        self.image_id, self.state_reason, self.launched_at)
        return self.listed


@dataclass
class SimEc2:
    """Implements `CloudProvider`. `limit`: per market (`spot`, `on-demand`), how many of its
    instances may be live at once (None: no limit); a test or the simulator lowers it to make
    EC2 run short. `clock`: when things happen (launch times, event times)."""

    zones: dict[str, str] = field(default_factory=lambda: {"subnet-sim": "us-east-1a"})
    limit: dict[str, int | None] = field(default_factory=lambda: {SPOT: None, ON_DEMAND: None})
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    reservations: dict[str, CapacityReservation] = field(default_factory=dict)
    groups: dict[str, dict[str, str]] = field(default_factory=dict)
    instances: dict[str, _Instance] = field(default_factory=dict)
    topology: dict[str, NetworkPlace] = field(default_factory=dict)  # instance -> its place
    # reservation -> where its capacity sits (DescribeCapacityReservationTopology)
    reservation_places: dict[str, NetworkPlace] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _live: dict[str, int] = field(default_factory=lambda: {SPOT: 0, ON_DEMAND: 0})
    _ended: deque[tuple[datetime, str]] = field(default_factory=deque)  # in end order
    # seconds from an interruption warning to EC2 taking the instance (AWS: two minutes);
    # 0: at once (where nothing acts in the two minutes, the simulator's shortcut)
    notice_s: float = 0.0
    _due: dict[str, datetime] = field(default_factory=dict)  # warned instance -> its end
    # a warm pool's: the chance EC2 refuses a start (no capacity kept for a stopped
    # instance), drawn from `rng`; the instances started since `started()` was last asked;
    # each stopped instance since when; the stopped time of those started or gone since
    start_failure: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    just_started: list[str] = field(default_factory=list)
    starts: int = 0
    stopped_since: dict[str, float] = field(default_factory=dict)
    stopped_s: float = 0.0

    # --- launching ---------------------------------------------------------------------
    def launch(self, pool: Pool, count: int, min_count: int, client_token: str,
               tags: dict[str, str], spec: FleetSpec | None = None) -> LaunchResult:
        spec = spec or FleetSpec.of(pool)
        if spec.placement_group and spec.placement_group not in self.groups:
            raise CloudError("InvalidPlacementGroup.Unknown",
                             f"The Placement Group '{spec.placement_group}' is unknown.")
        market = SPOT if spec.on_spot(pool) else ON_DEMAND
        itype, subnet = (spec.overrides() or [(spec.instance_types[0], spec.subnets[0])])[0]
        # reserved capacity first: the named reservations only, or the matching ones
        slots = self._reserved_slots(itype, spec.reservation_ids or (
            tuple(self.reservations) if spec.reserved else ()))
        cap = self.limit.get(market)
        room = (0 if spec.reservation_ids else count if cap is None
                else max(0, cap - self._live[market]))
        got = min(count, len(slots) + room)
        if got < min_count:
            got = 0  # MinTargetCapacity: all of the minimum or nothing
        made = [self._new(itype, market, subnet, tags, spec.placement_group,
                          slots[i] if i < len(slots) else "") for i in range(got)]
        code = message = ""
        if got < count:
            code = "InsufficientInstanceCapacity"
            message = (f"We currently do not have sufficient {itype} capacity in the "
                       f"Availability Zone you requested ({self.zones.get(subnet, '')}).")
        return LaunchResult(
            instances=tuple(self._launched(i) for i in made), error_code=code,
            error_message=message, fleet_id=f"fleet-{next(self._ids):08x}-sim" if made else "",
            errors=(FleetError(code, itype, subnet),) if code else ())

    def _new(self, itype: str, market: str, subnet: str, tags: dict[str, str],
             group: str | None, reservation: str = "") -> _Instance:
        n = next(self._ids)
        inst = _Instance(f"i-{n:017x}", itype, market, subnet, dict(tags), self.clock(),
                         f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}", group,
                         reservation=reservation)
        self.instances[inst.id] = inst
        if not reservation:  # (reserved capacity is not the market's)
            self._live[market] += 1
        return inst

    def _in(self, rid: str) -> int:
        return sum(1 for i in self.instances.values() if i.reservation == rid
                   and i.state in LIVE)

    def _reserved_slots(self, itype: str, ids: tuple[str, ...]) -> list[str]:
        self._follow_windows()
        return free_places(self.reservations, self._in, itype, ids)

    def _follow_windows(self) -> None:
        """Each Capacity Block's state as its window says at the clock's time (a block that
        ended early - cancelled, failed - keeps its state)."""
        now = self.clock().timestamp()
        for rid, r in self.reservations.items():
            if r.reservation_type == BLOCK and r.state in WINDOW_STATES and r.start is not None:
                state = ("scheduled" if now < r.start else "expired"
                         if r.end is not None and now >= r.end else "active")
                if state != r.state:
                    self.reservations[rid] = replace(r, state=state)

    def take_back(self, rid: str) -> list[str]:
        """EC2 begins terminating the Capacity Block's instances (from 30 minutes before its
        end): its live ones, terminated; returns their ids. (With no state reason: the API
        reference's StateReason lists none for it.)"""
        gone = [i for i in self.instances.values() if i.reservation == rid and i.state in LIVE]
        for inst in gone:
            self._due.pop(inst.id, None)
            self._end(inst, "")
        return [i.id for i in gone]

    @staticmethod
    def _launched(i: _Instance) -> LaunchedInstance:
        return LaunchedInstance(instance_id=i.id, instance_type=i.instance_type,
                                lifecycle=i.lifecycle, image_id=i.image_id,
                                private_ip=i.private_ip, subnet_id=i.subnet,
                                capacity_reservation_id=i.reservation)

    # --- instances ---------------------------------------------------------------------
    def tag(self, instance_id: str, tags: dict[str, str]) -> None:
        inst = self._get(instance_id)
        inst.tags.update(tags)
        inst.listed = None

    def launched_with(self, tags: dict[str, str]) -> tuple[LaunchedInstance, ...]:
        return tuple(self._launched(i) for i in sorted(self._tagged(tags), key=lambda i: i.id)
                     if i.state in ("pending", "running"))

    def terminate(self, instance_ids: list[str]) -> None:
        for iid in instance_ids:
            if iid in self.instances:  # (one EC2 does not know needs no terminating)
                self._due.pop(iid, None)
                self._end(self._get(iid), USER_SHUTDOWN)

    def stop(self, instance_ids: list[str]) -> None:
        """Stopped at once (EC2's stopping state is not modelled): its compute given back to
        the market, its tags and address kept."""
        for iid in instance_ids:
            inst = self._get(iid)
            if inst.state in ("pending", "running"):
                self._due.pop(iid, None)
                if not inst.reservation:
                    self._live[inst.lifecycle] -= 1
                inst.state, inst.state_reason, inst.listed = (
                    "stopped", "Client.UserInitiatedShutdown", None)
                self.stopped_since[iid] = self.clock().timestamp()

    def start(self, instance_id: str) -> None:
        """Running again, its LaunchTime the start's ("the time that the instance was last
        launched": EC2 API reference, Instance); refused as EC2 refuses one with no capacity
        for it when the market's `limit` is reached."""
        inst = self._get(instance_id)
        if inst.state not in LIVE:
            raise CloudError("IncorrectInstanceState", f"The instance '{instance_id}' is not "
                             "in a state from which it can be started.")
        if inst.state != "stopped":
            return
        cap = self.limit.get(inst.lifecycle)
        if (cap is not None and self._live[inst.lifecycle] >= cap) or (
                self.start_failure and self.rng.random() < self.start_failure):
            raise CloudError("InsufficientInstanceCapacity",
                             f"We currently do not have sufficient {inst.instance_type} "
                             "capacity in the Availability Zone you requested "
                             f"({self.zones.get(inst.subnet, '')}).")
        self._live[inst.lifecycle] += 1
        inst.state, inst.state_reason, inst.listed = "running", "", None
        inst.launched_at = self.clock()
        self.stopped_s += inst.launched_at.timestamp() - self.stopped_since.pop(instance_id)
        self.just_started.append(instance_id)
        self.starts += 1

    def started(self) -> list[str]:
        """The instances started since this was last asked (the engine boots them warm)."""
        out, self.just_started = self.just_started, []
        return out

    def stopped_node_s(self) -> float:
        """Instance-seconds spent stopped, those stopped now counted to the clock's time."""
        now = self.clock().timestamp()
        return self.stopped_s + sum(now - t for t in self.stopped_since.values())

    def reclaim(self, instance_id: str, reservation: bool = False) -> str:
        """AWS takes a spot instance back (`reservation`: an interruptible reservation's owner
        takes a reserved one): the interruption warning EventBridge sends. The instance is
        terminated with EC2's reclaim reason `notice_s` later (`expire`), unless the daemon
        has released it by then; with `notice_s` 0 at once."""
        inst = self._get(instance_id)
        kind = EventKind.RESERVATION_INTERRUPTION if reservation else EventKind.SPOT_WARNING
        body = event_message(kind, inst.id,
                             self.clock().strftime("%Y-%m-%dT%H:%M:%SZ"),
                             **{"instance-action": "terminate"})
        if self.notice_s > 0:
            self._due.setdefault(inst.id, self.clock() + timedelta(seconds=self.notice_s))
        else:
            self._end(inst, SPOT_RECLAIM)
        return body

    def expire(self) -> None:
        """EC2 takes the warned instances whose two minutes are over."""
        now = self.clock()
        for iid, end in list(self._due.items()):
            if end <= now:
                del self._due[iid]
                self._end(self.instances[iid], SPOT_RECLAIM)

    def _end(self, inst: _Instance, why: str) -> None:
        if inst.id in self.stopped_since:
            self.stopped_s += self.clock().timestamp() - self.stopped_since.pop(inst.id)
        if inst.state in LIVE:
            if not inst.reservation and inst.state != "stopped":
                self._live[inst.lifecycle] -= 1
            inst.state, inst.state_reason, inst.listed = "terminated", why, None
            self._ended.append((self.clock(), inst.id))

    def _get(self, instance_id: str) -> _Instance:
        inst = self.instances.get(instance_id)
        if inst is None:
            raise CloudError("InvalidInstanceID.NotFound",
                             f"The instance ID '{instance_id}' does not exist")
        return inst

    def _tagged(self, tags: dict[str, str]) -> list[_Instance]:
        gone = self.clock() - VISIBLE_AFTER_END
        while self._ended and self._ended[0][0] < gone:
            del self.instances[self._ended.popleft()[1]]
        want = tags.items()  # (tags are strings: all of them carried is a subset, in C)
        return [i for i in self.instances.values() if want <= i.tags.items()]

    def find(self, tags: dict[str, str], include_terminated: bool = False,
             ids: list[str] | None = None) -> list[CloudInstance]:
        only = None if ids is None else set(ids)
        return [i.listing() for i in self._tagged(tags)
                if (include_terminated or i.state in LIVE)
                and (only is None or i.id in only)]

    # --- reservations, zones, placement groups --------------------------------------------
    def capacity_reservations(self, ids: list[str]) -> list[CapacityReservation]:
        self._follow_windows()
        missing = [i for i in ids if i not in self.reservations]
        if missing:
            raise CloudError("InvalidCapacityReservationId.NotFound",
                             f"The capacity reservation ID '{missing[0]}' does not exist")
        return [reported(self.reservations[i], self._in) for i in ids]

    def subnet_zones(self, subnets: list[str]) -> dict[str, str]:
        missing = [s for s in subnets if s not in self.zones]
        if missing:
            raise CloudError("InvalidSubnetID.NotFound",
                             f"The subnet ID '{missing[0]}' does not exist")
        return {s: self.zones[s] for s in subnets}

    def ensure_placement_group(self, name: str, tags: dict[str, str]) -> None:
        self.groups.setdefault(name, dict(tags))

    def placement_groups(self, tags: dict[str, str]) -> dict[str, dict[str, str]]:
        return {n: dict(t) for n, t in self.groups.items()
                if all(t.get(k) == v for k, v in tags.items())}

    def delete_placement_group(self, name: str) -> None:
        if name not in self.groups:
            raise CloudError("InvalidPlacementGroup.Unknown",
                             f"The Placement Group '{name}' is unknown.")
        if any(i.group == name and i.state in LIVE for i in self.instances.values()):
            raise CloudError("InvalidPlacementGroup.InUse",
                             f"There are instances in placement group {name}")
        del self.groups[name]

    def instance_health(self) -> list[InstanceHealth]:
        return [InstanceHealth(i.id, instance_status="impaired" if i.impaired else "ok")
                for i in self.instances.values() if i.state == "running"]

    def instance_topology(self, instance_ids: list[str]) -> dict[str, NetworkPlace]:
        # (the simulator's runs lay no network out: every instance is as one of a type EC2
        # gives no topology for; `topology` is there for the contract's check)
        return network_places(
            instance_ids, lambda i: i in self.instances and self.instances[i].state == "running",
            self.topology, lambda i: self.instances[i].reservation, self.reservation_places)

    def reservation_topology(self, reservation_ids: list[str]) -> dict[str, NetworkPlace]:
        return {r: self.reservation_places[r] for r in reservation_ids
                if r in self.reservation_places and r in self.reservations
                and self.reservations[r].state in ("active", "pending")}


@dataclass
class SimQueue:
    """Implements `EventQueue`: the SQS queue EventBridge fills, in memory (delivered once
    each, kept until deleted)."""

    messages: deque[QueueMessage] = field(default_factory=deque)
    _ids: itertools.count = field(default_factory=itertools.count)

    def put(self, body: str) -> None:
        self.messages.append(QueueMessage(f"r-{next(self._ids)}", body))

    def receive(self, max_messages: int = 10) -> list[QueueMessage]:
        return [self.messages[i] for i in range(min(max_messages, len(self.messages)))]

    def delete(self, receipt: str) -> None:
        for m in list(self.messages):
            if m.receipt == receipt:
                self.messages.remove(m)
