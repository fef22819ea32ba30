"""The store's records: plain dataclasses, one per table, free of SQLAlchemy.

The passes, the policy's edges, the simulator's `MemoryStore` and the read-only commands
work with these; `tables.py` maps each onto its table (SQLAlchemy's imperative mapping), and
only what opens the SQL store imports it. Keyword-only: a record is always built by field
name. `eq=False`: two records are the same only if they are the same object, as the ORM
keeps them (and they stay hashable). Enums are plain strings (native DB enums cost a
migration per new value)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import NamedTuple, overload


class PreemptionCause(StrEnum):
    """Why a job lost its run (a preemption row's `cause`): what the decisions that count
    preemptions ask, instead of reading it out of the event's name."""

    INTERRUPTED = "interrupted"  # EC2 took (or is about to take) a spot instance back
    RECLAIMED = "reclaimed"  # an interruptible capacity reservation's owner took it back
    VANISHED = "vanished"  # the instance was found gone without any notice
    UNHEALTHY = "unhealthy"  # slurmscale replaced it: unhealthy, or scheduled for retirement
    # its Capacity Block's window closed: requeued at the end of the job's grace (a run
    # requeued at a close without a grace is an event only, block_job_requeued)
    BLOCK_END = "block-end"


# lost runs that are no preemption: not counted toward a job's max_preemptions, nor as
# preemptions in the report (replacements are counted on their own; a block's end is
# planned)
NOT_PREEMPTED = frozenset({PreemptionCause.UNHEALTHY, PreemptionCause.BLOCK_END})


class TimerKind(StrEnum):
    """What a timer times (table `timers`: kind, subject, since, note): every wait a decision
    keeps on the store, so that a standby taking over acts when the leader would have. Each
    is written per subject (`set_timers`, `end_timers`), never a kind replaced whole."""

    LOST_NODE = "lost-node"  # a node Slurm has up with no instance (sweep.py)
    STUCK_NODE = "stuck-node"  # a node powering up with no instance (sweep.py)
    UNHEALTHY = "unhealthy"  # a node unhealthy by Slurm's account, in its grace (health.py)
    REFUSED_EDIT = "refused-edit"  # an edit Slurm refused, not sent again before (edits.py)
    EVACUATING = "evacuating"  # a node whose jobs were requeued, to be powered down
    EVACUATED = "evacuated"  # an instance evacuated and powered down (interruptions.py)
    SCHEDULED = "scheduled-event"  # AWS Health's scheduled change for an instance
    EC2_RETRY = "ec2-retry"  # EC2 not answering: the endpoint's retry delay (retry.py)
    # a Capacity Block whose Expiration Warning closed its window early: since = that close
    # (the warning's message is deleted once read: reserved_capacity.py)
    BLOCK_WARNED = "block-warned"
    # topology.conf written and not yet read by slurmctld: since = the write (topology.py)
    TOPOLOGY_UNREAD = "topology-unread"


@overload
def utc(dt: datetime) -> datetime: ...
@overload
def utc(dt: None) -> None: ...
def utc(dt: datetime | None) -> datetime | None:
    """A stored time as an aware UTC datetime: SQLite returns naive ones; everything stored
    is UTC."""
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


@dataclass(eq=False, kw_only=True)
class RequestRow:
    """One hook call, moved here from the spool. `status`: pending -> done | failed."""

    id: str
    kind: str
    hostlist: str
    nodes: str  # JSON list
    resume_file: str | None = None
    received_at: datetime
    status: str = "pending"
    processed_at: datetime | None = None
    error: str | None = None


@dataclass(eq=False, kw_only=True)
class GangRow:
    """One CreateFleet decision: a job's whole node set, or a coalesced batch of single nodes.
    `status`: launching -> launched | failed."""

    id: str
    pool: str
    nodes: str  # hostlist
    size: int
    job_ids: str = "[]"  # JSON list
    request_ids: str = "[]"  # JSON list
    coalesced: bool = False
    status: str
    client_token: str
    launch_template_version: str
    fleet_id: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    created_at: datetime
    updated_at: datetime


@dataclass(eq=False, kw_only=True)
class InstanceRow:
    """An EC2 instance slurmscale launched. `state`: running -> terminated, or through a
    warm pool (running -> warm -> running ...). [launched_at, terminated_at] is its current
    or last run: a warm (stopped) one's `terminated_at` is its stop; its earlier runs and
    its stops are `InstancePeriodRow`s."""

    instance_id: str
    node: str
    pool: str
    gang_id: str
    instance_type: str
    lifecycle: str
    image_id: str = ""
    launch_template_version: str
    private_ip: str = ""
    # the capacity reservation it runs in ("": none): paid for whether used or not
    capacity_reservation_id: str = ""
    subnet_id: str = ""  # where it launched (its AZ: the capacity backoff's offering)
    state: str
    launched_at: datetime
    terminated_at: datetime | None = None


@dataclass(eq=False, kw_only=True)
class InstancePeriodRow:
    """A stretch of a warm pool instance's life its `InstanceRow` no longer holds: an
    earlier run (`state` running: a launch or start to its stop) or a stop (`state` warm:
    to its next start or its termination; `until` None: stopped now). What `report` counts
    beside the rows: node hours for every run, volume hours for every stop. Written by the
    store as the instance moves (keep_warm, a start, a termination), never by a pass."""

    id: int | None = None
    instance_id: str
    pool: str
    instance_type: str
    lifecycle: str
    state: str
    since: datetime
    until: datetime | None = None

    @staticmethod
    def of(r: InstanceRow, state: str, since: datetime,
           until: datetime | None = None) -> InstancePeriodRow:
        return InstancePeriodRow(instance_id=r.instance_id, pool=r.pool,
                                 instance_type=r.instance_type, lifecycle=r.lifecycle,
                                 state=state, since=since, until=until)


@dataclass(eq=False, kw_only=True)
class LaunchPhasesRow:
    """When each step of one instance's way from Slurm's resume call to its node's first job
    ended (Unix seconds; None: not known yet, or never), for the time-to-run figures
    (`report`, metrics, `status`). From the signals each side gives: the hook's spool time,
    the CreateFleet answer, EC2's LaunchTime, the bootstrap's own tag (node_init.py's
    `slurmscale:boot-times`, by the instance's clock), the pass that first saw slurmd
    registered, and the first job's submit and start (Slurm's)."""

    instance_id: str
    node: str
    pool: str
    job_nodes: int  # nodes of the job it was launched for (1: a single node)
    requested_s: float | None = None  # Slurm ran ResumeProgram (the request's spool time)
    answered_s: float | None = None  # CreateFleet answered: the instance recorded
    ec2_launch_s: float | None = None  # EC2's LaunchTime
    os_s: float | None = None  # the instance's kernel started
    bootstrap_s: float | None = None  # node-init started
    tagged_s: float | None = None  # node-init saw its node tag
    checked_s: float | None = None  # its checks passed (munge key, GPUs, the site's)
    slurmd_s: float | None = None  # slurmd started
    registered_s: float | None = None  # the first pass that saw slurmd registered
    submitted_s: float | None = None  # the node's first job: submitted (sbatch)
    started_s: float | None = None  # ... and RUNNING
    # started from its pool's warm pool (StartInstances on a stopped instance), not launched:
    # `answered_s` is then the starts' end, `ec2_launch_s` the start
    warm: bool = False


@dataclass(eq=False, kw_only=True)
class EventRow:
    """The audit log: every decision and every failure, with its reason."""

    id: int | None = None
    at: datetime
    kind: str
    node: str | None = None
    request_id: str | None = None
    gang_id: str | None = None
    message: str


@dataclass(eq=False, kw_only=True)
class PoolStateRow:
    """The capacity policy's memory of one pool between passes (PoolMemory): its target and
    the clocks behind the sustained-demand and cooldown rules, as Unix seconds."""

    pool: str
    target: int
    above_since: float | None = None
    last_step_at: float | None = None
    updated_at: datetime


@dataclass(eq=False, kw_only=True)
class HoldRow:
    """One of slurmscale's reservations accumulating nodes for a pending gang.
    `state`: active -> releasing (Slurm refused the delete: its job runs in it) -> released.
    Times are Unix seconds, as the policy keeps them."""

    name: str
    pool: str
    job_id: str
    user_name: str
    needed: int
    nodes: str  # JSON list
    created_s: float
    spent_gpu_s: float = 0.0
    accounted_s: float
    attached: bool = False
    state: str
    reason: str = ""
    exhausted: bool = False  # never hold for it again
    released_s: float | None = None


@dataclass(eq=False, kw_only=True)
class PreemptionRow:
    """A job requeued because its node's instance was interrupted (or about to be)."""

    id: int | None = None
    at: datetime
    job_id: str
    node: str
    instance_id: str
    pool: str
    instance_type: str
    lifecycle: str
    # why (a PreemptionCause); `kind` names what it came from: the EC2 event's detail-type,
    # vanished:<state reason>, or unhealthy:<the health verdict's cause>
    cause: str
    kind: str
    notice_time: str = ""


@dataclass(eq=False, kw_only=True)
class GraceRow:
    """A job on a node EC2 is taking back, signalled (the pool's `grace_signal`) and given
    until `requeue_at` to save its work and leave the node; then requeued if still there.
    Kept in the store so a daemon killed during the grace requeues on time after its
    restart, and signals once."""

    id: int | None = None
    job_id: str
    node: str
    instance_id: str
    pool: str
    signal: str
    signalled_at: datetime
    requeue_at: datetime
    state: str  # a GraceState
    cause: str  # the PreemptionCause its requeue would record
    kind: str  # the EC2 event's detail-type
    notice_time: str = ""
    ended_at: datetime | None = None


@dataclass(eq=False, kw_only=True)
class ReplacementRow:
    """A node whose instance slurmscale replaced because it was unhealthy (or about to be
    retired): jobs requeued, instance terminated, node returned. `detected_at`: when first
    seen unhealthy; `at`: when the replacement was carried out. `left`: not replaced but left
    drained for an admin (replaced too often)."""

    id: int | None = None
    at: datetime
    detected_at: datetime
    node: str
    pool: str
    instance_id: str
    instance_type: str
    gpus: int
    cause: str
    detail: str = ""
    jobs_requeued: int = 0
    left: bool = False


@dataclass(eq=False, kw_only=True)
class OfferingRow:
    """Capacity unavailable after an insufficient-capacity error or a spot interruption,
    until `until_s` (Unix seconds); `repeats` errors in a row double the TTL; a launch
    that works resets it. `offering`: the offering's key (`Offering.key`: type/AZ/capacity),
    or "" for the whole pool: out because EC2 named no offering, or because every offering
    of the pool is out (written by the backoff, so what reads a pool's state, `plan --live`
    included, needs no AZ of EC2's)."""

    pool: str
    offering: str = ""
    until_s: float
    repeats: int
    last_code: str
    updated_at: datetime


@dataclass(eq=False, kw_only=True)
class CapacityReservationRow:
    """A pool's capacity reservation or Capacity Block as the daemon last read it from EC2.
    `kind`: default (an ODCR) or capacity-block."""

    id: str
    pool: str
    kind: str
    instance_type: str
    availability_zone: str
    total: int
    available: int
    state: str
    start_at: datetime | None = None
    end_at: datetime | None = None
    read_at: datetime


@dataclass(eq=False, kw_only=True)
class JobRow:
    """A job slurmscale saw start: its queue wait (started - submitted) and, once it is gone
    from the queue, its run (ended). The first start only: requeues are preemption rows."""

    job_id: str
    pool: str
    user_name: str
    num_nodes: int
    gpus_per_node: int
    submitted_at: datetime
    started_at: datetime
    ended_at: datetime | None = None
    time_limit_s: int | None = None  # None: no limit (or recorded before 0011)


class JobRun(NamedTuple):
    """An ended job with a time limit, as `limit_use: auto` learns from it; its id and end
    let a learner keep what it read and take only what ended since."""

    job_id: str
    ended_s: float  # Unix s
    pool: str
    run_s: float
    limit_s: float


@dataclass(eq=False, kw_only=True)
class SampleRow:
    """One pool's capacity and demand at one moment (once a minute)."""

    at: datetime
    pool: str
    nodes_up: int
    nodes_busy: int
    nodes_booting: int
    nodes_held: int
    pending_gpus: int
    pending_gpu_hours: float
    pending_gangs: int
