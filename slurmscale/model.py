"""Immutable data passed between the adapters and the decisions. No I/O here."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

# a node in one of these is Slurm's to finish first (POWERED_DOWN: it has no instance)
POWER_TRANSITIONS = frozenset({"POWERED_DOWN", "POWERING_UP", "POWERING_DOWN", "POWER_DOWN"})
# a node powered down, or on its way: POWER_DOWN is a power-down Slurm has queued and its
# power-save thread has not yet begun (22.05: up to a second or more after the update), so a
# pass that tests only POWERING_DOWN sees the node up again and asks a second time
GOING_DOWN = frozenset({"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"})


@dataclass(frozen=True)
class SlurmNode:
    """One node as `scontrol show node` reports it."""

    name: str
    state: str  # e.g. "IDLE+CLOUD+POWERED_DOWN"
    addr: str
    hostname: str
    reason: str = ""
    partitions: tuple[str, ...] = ()
    last_busy: str = ""  # LastBusyTime, ISO local time as Slurm prints it
    alloc_gpus: int = 0  # from AllocTRES (gres/gpu=N)

    # cached: asked several times per node per pass (the instance is frozen)
    @functools.cached_property
    def flags(self) -> frozenset[str]:
        return frozenset(self.state.upper().split("+"))

    @functools.cached_property
    def base_state(self) -> str:
        return self.state.upper().split("+", 1)[0]


class QueueJob(NamedTuple):
    """One job from the per-tick fixed-field squeue read. A NamedTuple, not a dataclass: tens
    of thousands are built every pass and tuple construction is several times cheaper."""

    job_id: str
    partitions: tuple[str, ...]
    num_nodes: int
    gpus_per_node: int
    time_limit_s: int | None
    submit_time: str
    reason: str
    priority: int
    user: str
    state: str
    account: str = ""
    reservation: str = ""
    end_time: str = ""  # running jobs: start + time limit
    nodelist: str = ""  # running jobs: their nodes (a hostlist)
    start_time: str = ""  # running jobs: when they started (after their nodes booted)
    # pending jobs: when backfill plans to start it (squeue's StartTime; "N/A" or empty when
    # backfill has no plan for it: beyond bf_window or bf_max_job_test)
    expected_start: str = ""
    # a job array's line: its ArrayJobID; a pending line stands for `array_tasks` tasks, of
    # which at most `array_throttle` (its `%N`, 0: no limit) run at once
    array_job: str = ""
    array_tasks: int = 1
    array_throttle: int = 0


_READS = itertools.count(1)  # every QueueRead's serial: one read, one number


def next_read() -> int:
    """A new read's serial (QueueRead.serial): unique in the process, whoever reads."""
    return next(_READS)


class QueueRead(list[QueueJob]):
    """One squeue read's records in squeue's order, with what changed since an earlier read
    of the same command where the parse knows it (kv.LineMemo): `changed`, the records
    parsed afresh (new jobs, and jobs whose line changed); `dropped`, the earlier read's
    records not printed again (jobs gone, and the old records of the changed ones). `since`
    names that earlier read (its `serial`); None: no change known, only the records. The
    daemon's queue view works out a pass from the change alone when it saw that read
    (daemon/queue_view.QueueView), so a pass's cost follows what changed."""

    __slots__ = ("serial", "since", "changed", "dropped")

    def __init__(self, records: list[QueueJob], serial: int, since: int | None = None,
                 changed: list[QueueJob] | None = None,
                 dropped: list[QueueJob] | None = None) -> None:
        super().__init__(records)
        self.serial = serial
        self.since = since
        self.changed: list[QueueJob] = changed or []
        self.dropped: list[QueueJob] = dropped or []


class JobPriority(NamedTuple):
    """One pending job's priority in one of its partitions, broken into its weighted factors
    as `sprio` prints them (each already multiplied by its PriorityWeight*): what decides its
    place in the queue, and which factor will move it."""

    job_id: str
    partition: str
    priority: float
    age: float
    fairshare: float
    job_size: float
    partition_factor: float
    qos: float


class PriorityWeights(NamedTuple):
    """What priority/multifactor makes of a job's age (`scontrol show config`): the weight
    of a job that has waited PriorityMaxAge, reached linearly from submission."""

    age: float
    max_age_s: float


@dataclass(frozen=True)
class SlurmReservation:
    """One reservation as `scontrol show res -o` reports it."""

    name: str
    nodes: tuple[str, ...]
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    flags: frozenset[str] = frozenset()
    start_time: str = ""
    end_time: str = ""
    state: str = ""


@dataclass(frozen=True)
class Gang:
    """Nodes that must be launched together, all or none, in one pool.

    A multi-node job's nodes form one gang; single-node requests of one pool that arrive
    within the batching window are coalesced into one batch (`coalesced=True`), where each node
    may succeed on its own.
    """

    pool: str
    nodes: tuple[str, ...]
    job_ids: tuple[int, ...] = ()
    request_ids: tuple[str, ...] = ()
    coalesced: bool = False
    # when Slurm asked for each node (its request's spool time, Unix s), in `nodes`' order
    # (empty: not known): where each launch's time to run begins
    requested_s: tuple[float, ...] = ()

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def min_capacity(self) -> int:
        return 1 if self.coalesced else self.size


@dataclass(frozen=True)
class LaunchedInstance:
    instance_id: str
    instance_type: str
    lifecycle: str
    image_id: str = ""
    private_ip: str = ""
    private_dns: str = ""
    subnet_id: str = ""
    capacity_reservation_id: str = ""  # the ODCR / Capacity Block it runs in, if any


class ReservationPreference(StrEnum):
    """How a pool uses its On-Demand Capacity Reservations (already paid for).

    use_first: a gang that fits WHOLE in the reservations' free capacity launches there; any
    other gang launches on the pool's normal capacity (never half inside, half outside).
    only: a gang that does not fit whole in the reservations is not launched (it requeues).
    none: the reservations are read and shown, never launched into."""

    USE_FIRST = "use_first"
    ONLY = "only"
    NONE = "none"


# an ODCR whose owner may take its instances back (DescribeCapacityReservations: Interruptible)
INTERRUPTIBLE = "interruptible"


@dataclass(frozen=True)
class InstanceShape:
    """What EC2 says an instance type has (DescribeInstanceTypes: VCpuInfo.DefaultVCpus,
    MemoryInfo.SizeInMiB, GpuInfo.Gpus[].Count and Name, NetworkInfo.EfaSupported): what a
    Slurm node line for it must not exceed."""

    instance_type: str
    vcpus: int
    memory_mib: int
    gpus: int
    gpu_name: str = ""
    efa: bool = False

    @property
    def schedulable_memory_mb(self) -> int:
        """RealMemory for the node line: 95 % of EC2's memory, as ParallelCluster's default
        (SlurmQueues/ComputeResources/SchedulableMemory): the kernel keeps part of it, and a
        node reporting less than RealMemory is set INVALID by slurmctld."""
        return self.memory_mib * 95 // 100


@dataclass(frozen=True)
class CapacityReservation:
    """One EC2 capacity reservation as DescribeCapacityReservations reports it. `state`:
    active, expired, cancelled, pending, failed, scheduled, payment-pending, payment-failed,
    assessing, delayed, unsupported (AWS's list); only an active one takes instances."""

    id: str
    instance_type: str
    availability_zone: str
    total: int
    available: int
    state: str
    # default (an ODCR), capacity-block, or INTERRUPTIBLE (an ODCR its owner may reclaim)
    reservation_type: str = "default"
    start: float | None = None  # Unix seconds
    end: float | None = None  # None: open-ended
    # what an instance must match besides its type and AZ to go in (EC2 user guide, "On-Demand
    # Capacity Reservations": instance type, platform, AZ and tenancy)
    platform: str = "Linux/UNIX"
    tenancy: str = "default"

    @property
    def active(self) -> bool:
        return self.state == "active"


class NetworkPlace(NamedTuple):
    """Where an instance, or a capacity reservation's capacity, sits in EC2's network
    (DescribeInstanceTopology, DescribeCapacityReservationTopology): `nodes` its network
    nodes top-down, the last the one it is connected to ("How Amazon EC2 topology works",
    EC2 user guide); `ultraserver` the Capacity Block id EC2 gives UltraServer instances,
    naming their UltraServer domain (empty for any other type)."""

    nodes: tuple[str, ...]
    ultraserver: str = ""


class GangNetwork(StrEnum):
    """What a gang's nodes must share when it goes into reserved capacity (a pool's
    `capacity_reservations.gang_network`, docs/topology.md): `any` (nothing: the first
    type and AZ with room), `leaf` (the network node its instances connect to), `spine`
    (the node above it), `ultraserver` (one UltraServer domain). A gang is never split
    across what it must share; one that fits in no such group launches on the pool's
    normal capacity, in one cluster placement group, or waits (preference `only`)."""

    ANY = "any"
    LEAF = "leaf"
    SPINE = "spine"
    ULTRASERVER = "ultraserver"

    def key(self, place: NetworkPlace | None) -> str | None:
        """The group a reservation (or instance) at `place` is in at this level; None when
        EC2 did not say (a type without topology, not yet propagated)."""
        if self is GangNetwork.ANY:
            return ""
        if place is None:
            return None
        if self is GangNetwork.ULTRASERVER:
            return place.ultraserver or None
        depth = 1 if self is GangNetwork.LEAF else 2
        return place.nodes[-depth] if len(place.nodes) >= depth else None


class FleetError(NamedTuple):
    """One of CreateFleet's `Errors` (CreateFleetError, EC2 API reference): why EC2 could not
    launch on one override, named by its InstanceType and SubnetId as the request sent them
    (its `LaunchTemplateAndOverrides.Overrides`)."""

    code: str
    instance_type: str
    subnet: str


class Offering(NamedTuple):
    """Capacity EC2 gives or refuses as one: an instance type in an Availability Zone, spot
    or on-demand (what the capacity backoff is keyed by, as Karpenter keys its unavailable
    offerings). `zone` is the subnet's id where its AZ could not be read."""

    instance_type: str
    zone: str
    capacity: str  # spot | on-demand

    @property
    def key(self) -> str:
        return f"{self.instance_type}/{self.zone}/{self.capacity}"

    def __str__(self) -> str:
        return f"{self.instance_type} in {self.zone} ({self.capacity})"


@dataclass(frozen=True)
class LaunchResult:
    """What one CreateFleet gave: instances and the capacity errors EC2 reported beside them
    (`error_code`/`error_message` the first; `errors` each one that names its override)."""

    instances: tuple[LaunchedInstance, ...]
    error_code: str = ""
    error_message: str = ""
    fleet_id: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    errors: tuple[FleetError, ...] = ()


@dataclass(frozen=True)
class ScheduledEvent:
    """A change AWS scheduled for an instance: `code` EC2's (DescribeInstanceStatus
    Events[].Code: instance-reboot, system-reboot, system-maintenance, instance-retirement,
    instance-stop) or an AWS Health event type code; `not_before` its earliest start (Unix
    seconds; None: not given)."""

    code: str
    not_before: float | None
    description: str = ""


@dataclass(frozen=True)
class InstanceHealth:
    """One running instance's status checks and scheduled events, as DescribeInstanceStatus
    reports them (status: ok | impaired | insufficient-data | not-applicable | initializing);
    events already completed or canceled are left out."""

    instance_id: str
    system_status: str = "ok"
    instance_status: str = "ok"
    events: tuple[ScheduledEvent, ...] = ()

    @property
    def impaired(self) -> bool:
        return "impaired" in (self.system_status, self.instance_status)
