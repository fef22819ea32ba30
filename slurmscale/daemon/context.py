"""What every pass of the reconcile loop works with: the config, the store, the two adapters,
the clock and the audit log; and the one way an instance is terminated (recorded, logged)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Generic, TypeVar

from slurmscale import timeframe
from slurmscale.audit import Event
from slurmscale.cloud.protocol import CloudProvider, DnsZone, EventQueue
from slurmscale.config import AddressSource, Config
from slurmscale.daemon.executor.edits import SlurmEdits
from slurmscale.daemon.executor.effects import Effects, Terminate
from slurmscale.model import LaunchedInstance
from slurmscale.slurm.protocol import SlurmClient
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.rows import InstanceRow

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    """The daemon's time: steady (timeframe.py), the wall clock carried on by the monotonic
    one, so a step of the host's clock moves none of its timers."""
    return datetime.fromtimestamp(timeframe.FRAME.now(), UTC)


def host_now() -> datetime:
    """The host's clock now, as the daemon last noticed it: the audit log's times, which an
    admin reads beside slurmctld's log and `date`. (Steady time would lag them by every step
    since the daemon started: a VM paused and resumed, NTP setting the clock.)"""
    frame = timeframe.FRAME
    return datetime.fromtimestamp(frame.to_host(frame.now()), UTC)


def launched(row: InstanceRow) -> LaunchedInstance:
    """A recorded instance as a launch returned it (the store keeps no DNS name)."""
    return LaunchedInstance(row.instance_id, row.instance_type, row.lifecycle,
                            row.image_id or "", row.private_ip or "",
                            subnet_id=row.subnet_id or "",
                            capacity_reservation_id=row.capacity_reservation_id or "")


@dataclass
class TickResult:
    """What one pass did (the daemon logs it and schedules the next pass by `next_due`)."""

    drained: int = 0
    launched_gangs: int = 0
    failed_gangs: int = 0
    released_nodes: int = 0
    policy_actions: int = 0
    ec2_messages: int = 0  # EventBridge's messages read off the queue
    # why the events queue could not be read this pass (None: read, or none configured):
    # spot warnings, block events and scheduled changes go unhandled while it is set
    queue_error: str | None = None
    next_due: float | None = None
    # the pass's EC2 calls that failed, (call, error): it went on, but EC2 is not well
    cloud_failures: list[tuple[str, str]] = field(default_factory=list)
    # where its time went (pass_times.py): seconds by phase, and waiting on each outside
    phase_seconds: dict[str, float] = field(default_factory=dict)
    wait_seconds: dict[str, float] = field(default_factory=dict)


S = TypeVar("S", bound=LaunchStore, covariant=True)


@dataclass(frozen=True)
class PassContext(Generic[S]):
    """`store`: the SQL store in the daemon; the launch path (requests, launches, addresses)
    asks only for a `LaunchStore`, which the simulator's `MemoryStore` is too."""

    cfg: Config
    store: S
    slurm: SlurmClient
    cloud: CloudProvider
    clock: Clock
    event: Event
    queue: EventQueue | None = None  # EventBridge's messages (none configured: None)
    zone: DnsZone | None = None  # the nodes' names (`dns:`; none: None)

    # the pass's one executor (effects.py), built with the context: every pass module
    # applies through it, so the held-off edits' waits and the outcomes' policy are one
    executor: Effects = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "executor", Effects(self.slurm, self.store, self.event,
                                                     self.cloud, self.clock, self.queue,
                                                     self.zone))

    @property
    def edits(self) -> SlurmEdits:
        """Where the pass's edits of Slurm are made, each outcome said once (edits.py): the
        executor's own."""
        return self.executor.edits

    @property
    def effects(self) -> Effects:
        """Where the pass's effects are applied in order, each outcome returned
        (effects.py)."""
        return self.executor

    def address(self, node: str, inst: LaunchedInstance) -> tuple[str, str]:
        """The NodeAddr and NodeHostname slurmscale gives `node` running on `inst`."""
        match self.cfg.node_address:
            case AddressSource.LOOPBACK:
                return "127.0.0.1", node
            case AddressSource.PRIVATE_DNS:
                return inst.private_dns or inst.private_ip, inst.private_dns or node
            case _:
                return inst.private_ip, node

    def terminate(self, instance_ids: list[str], why: str) -> bool:
        """Terminate and record (the `Terminate` effect applied alone); False (an event says
        why) when EC2 did not do it."""
        return self.effects.apply([Terminate(tuple(instance_ids), why)])[0].taken
