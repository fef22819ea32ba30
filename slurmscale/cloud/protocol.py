"""What slurmscale needs from a cloud: four idempotent calls keyed by our own ids."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, Protocol

from slurmscale.config import CapacityType, Pool
from slurmscale.model import (
    CapacityReservation,
    InstanceHealth,
    LaunchedInstance,
    LaunchResult,
    NetworkPlace,
)

TAG_CLUSTER = "slurmscale:cluster"
TAG_POOL = "slurmscale:pool"
TAG_NODE = "slurmscale:node"
TAG_GANG = "slurmscale:gang"
TAG_REQUEST = "slurmscale:request"


class CloudError(RuntimeError):
    """An API-level failure (throttling, permissions, bad config), as opposed to a capacity
    shortfall, which EC2 reports inside a successful CreateFleet response."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


@dataclass(frozen=True)
class CloudInstance:
    instance_id: str
    state: str
    tags: dict[str, str]
    private_ip: str = ""
    image_id: str = ""
    state_reason: str = ""  # EC2's StateReason.Code, e.g. Server.SpotInstanceTermination
    launched_at: datetime | None = None
    subnet_id: str = ""  # (so AZ): a node's fresh instance goes where its gang is


@dataclass(frozen=True)
class FleetSpec:
    """Where one fleet may launch: the instance types (preference order) and subnets it may
    choose from, the launch template version, whether it fills the pool's capacity
    reservations first (on-demand, the version targeting them), and its placement group.
    The later fleets of a gang too large for one are pinned to the first one's type and
    subnet, so the whole gang shares one AZ, one type and one placement group."""

    instance_types: tuple[str, ...]
    subnets: tuple[str, ...]
    launch_template_version: str
    reserved: bool = False
    placement_group: str | None = None
    # into a Capacity Block (market type capacity-block)
    capacity_block: bool = False
    # a reserved-capacity fleet into these reservations by id (their kinds: default,
    # capacity-block, interruptible), instead of a template version targeting them
    reservation_ids: tuple[str, ...] = ()
    reservation_kinds: tuple[str, ...] = ()
    # (instance type, subnet) overrides left out: offerings in capacity backoff
    excluded: frozenset[tuple[str, str]] = frozenset()

    def overrides(self) -> list[tuple[str, str]]:
        """The (instance type, subnet) pairs the fleet may launch on, in preference order
        (types first, then subnets, as the config lists them), those excluded left out."""
        return [(t, s) for t in self.instance_types for s in self.subnets
                if (t, s) not in self.excluded]

    def on_spot(self, pool: Pool) -> bool:
        """Does this fleet launch spot capacity? A spot pool's, unless it goes into reserved
        capacity or a Capacity Block: those are on-demand whatever the pool's type."""
        return (pool.capacity_type is CapacityType.SPOT and not self.reserved
                and not self.capacity_block)

    @classmethod
    def of(cls, pool: Pool) -> FleetSpec:
        return cls(tuple(pool.instance_types), tuple(pool.subnets),
                   pool.launch_template.version)


class CloudProvider(Protocol):
    def launch(self, pool: Pool, count: int, min_count: int, client_token: str,
               tags: dict[str, str], spec: FleetSpec | None = None) -> LaunchResult: ...

    def tag(self, instance_id: str, tags: dict[str, str]) -> None: ...

    def launched_with(self, tags: dict[str, str]) -> tuple[LaunchedInstance, ...]: ...

    def terminate(self, instance_ids: list[str]) -> None: ...

    def stop(self, instance_ids: list[str]) -> None:
        """StopInstances: the instances keep their volumes, private IP and tags, not their
        compute (a warm pool's, `config_pool.WarmPool`)."""
        ...

    def start(self, instance_id: str) -> None:
        """StartInstances for one stopped instance: refused (CloudError, e.g.
        InsufficientInstanceCapacity: EC2 keeps no capacity for a stopped instance) or
        under way. One at a time, so each refusal names its instance."""
        ...

    def find(self, tags: dict[str, str], include_terminated: bool = False,
             ids: list[str] | None = None) -> list[CloudInstance]:
        """Instances carrying all of `tags`, terminated ones too if asked (EC2 lists them for
        up to about an hour); `ids`: only these (an id EC2 does not know is left out, not an
        error)."""
        ...

    def capacity_reservations(self, ids: list[str]) -> list[CapacityReservation]: ...

    def subnet_zones(self, subnets: list[str]) -> dict[str, str]: ...

    def ensure_placement_group(self, name: str, tags: dict[str, str]) -> None: ...

    def placement_groups(self, tags: dict[str, str]) -> dict[str, dict[str, str]]: ...

    def delete_placement_group(self, name: str) -> None: ...

    def instance_health(self) -> list[InstanceHealth]: ...

    def instance_topology(self, instance_ids: list[str]) -> dict[str, NetworkPlace]:
        """Each instance's network nodes, top-down (DescribeInstanceTopology); an instance
        EC2 gives none for (not running, a type without topology) is left out."""
        ...

    def reservation_topology(self, reservation_ids: list[str]) -> dict[str, NetworkPlace]:
        """Where each reservation's capacity sits, before a launch into it
        (DescribeCapacityReservationTopology); one EC2 gives none for (not active or pending,
        a type without topology) is left out. An instance launched into a reservation sits
        where the reservation does."""
        ...


@dataclass(frozen=True)
class QueueMessage:
    receipt: str
    body: str


class EventQueue(Protocol):
    """Where EC2 events arrive (an SQS queue fed by an EventBridge rule)."""

    def receive(self, max_messages: int = 10) -> list[QueueMessage]: ...

    def delete(self, receipt: str) -> None: ...


class DnsRecord(NamedTuple):
    """A node's A record: its address and TTL."""

    ip: str
    ttl: int


class DnsZone(Protocol):
    """The zone that resolves node names (a Route 53 private hosted zone)."""

    def records(self) -> dict[str, DnsRecord]:
        """node name -> its A record, every one under the zone's domain."""
        ...

    def change(self, upsert: dict[str, str], delete: dict[str, DnsRecord]) -> None:
        """Set these names to these addresses and delete these records, in one change."""
        ...
