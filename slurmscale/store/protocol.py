"""What the capacity and interruption passes (policy, holds, capacity backoff, evacuating an
interrupted node) and the launch path need of a store.

The daemon gives them the SQL store; the simulator gives them `MemoryStore`, so it runs the
daemon's own passes without a database. Both refuse an illegal hold transition."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from slurmscale.audit import Kind
from slurmscale.policy.model import PoolMemory
from slurmscale.spool import SpooledRequest
from slurmscale.store.rows import (
    CapacityReservationRow,
    GangRow,
    GraceRow,
    HoldRow,
    InstancePeriodRow,
    InstanceRow,
    JobRow,
    JobRun,
    LaunchPhasesRow,
    OfferingRow,
    PreemptionRow,
    ReplacementRow,
    RequestRow,
    SampleRow,
    TimerKind,
)


class LeaseLost(RuntimeError):
    """The leader lease went during a pass: nothing more may be done outside, nor written to
    the store, until it is held again (daemon/fence.py; the store's epoch, store/repo.py)."""


class PassStore(Protocol):
    def pool_memory(self) -> dict[str, PoolMemory]: ...

    def save_pool_memory(self, memory: dict[str, PoolMemory], now: datetime) -> None: ...

    def holds(self, states: tuple[str, ...] | None = None) -> list[HoldRow]: ...

    def hold(self, name: str) -> HoldRow | None: ...

    def put_hold(self, row: HoldRow) -> None: ...

    def exhausted_jobs(self) -> frozenset[str]: ...

    def job_runs(self, since: datetime) -> list[JobRun]:
        """The jobs with a time limit that ended at or after `since`."""
        ...

    def offering(self, pool: str, offering: str = "") -> OfferingRow | None:
        """The pool's backoff row for this offering key ("": the whole pool's)."""
        ...

    def offerings(self) -> list[OfferingRow]: ...

    def put_offering(self, row: OfferingRow) -> None: ...

    def capacity_reservations(self) -> list[CapacityReservationRow]: ...

    def reserved_nodes(self) -> frozenset[str]: ...

    def add_preemption(self, row: PreemptionRow) -> None: ...

    def preemptions(self, job_id: str | None = None,
                    since: float | None = None) -> list[PreemptionRow]: ...

    def graces(self, open_only: bool = True) -> list[GraceRow]: ...

    def put_grace(self, row: GraceRow) -> None:
        """Record a grace (`id` None: a new one, its id set) or its next state; refuses an
        edge GRACE_EDGES does not have."""
        ...

    def add_replacement(self, row: ReplacementRow) -> None: ...

    def replacements(self, since: float | None = None) -> list[ReplacementRow]: ...

    def instance(self, instance_id: str) -> InstanceRow | None: ...

    def active_instances(self, nodes: Iterable[str] | None = None) -> list[InstanceRow]: ...


class TimerStore(Protocol):
    """The waits a pass keeps on rows (table `timers`: kind, subject, since, note), so that a
    standby that takes over decides what the leader would have."""

    def timers(self, kind: TimerKind) -> dict[str, float]:
        """subject -> since when (Unix seconds), of the timers of this kind."""
        ...

    def set_timers(self, kind: TimerKind, since: Mapping[str, float],
                   notes: Mapping[str, str] | None = None) -> None:
        """These subjects' timers begin, or move, to these times (`notes`: subject -> the
        pass's own note of that wait; none: no note); the kind's other timers are left as
        they are."""
        ...

    def end_timers(self, kind: TimerKind, subjects: Iterable[str]) -> None:
        """These subjects' timers are over (with their notes); a subject without one is
        no error."""
        ...

    def timer_notes(self, kind: TimerKind) -> dict[str, str]:
        """subject -> note, of the timers of this kind that have one."""
        ...


class PhaseStore(Protocol):
    """Each launch's time to run, step by step (table `launch_phases`)."""

    def put_launch_phases(self, rows: Sequence[LaunchPhasesRow]) -> None:
        """These instances' rows, whole (written over what the store had)."""
        ...

    def launch_phases(self, since_s: float | None = None,
                      open_only: bool = False) -> list[LaunchPhasesRow]:
        """The rows of instances answered from `since_s` on (None: all), by answer time;
        `open_only`: those whose node has not run a job yet."""
        ...

    def set_launch_phases_apart(self, instance_ids: Sequence[str]) -> None:
        """These instances' rows kept as an earlier launch's (their key becomes
        `<instance>@<answer time>`, never followed again), so that the instance's next
        launch - a warm pool's start - gets a row of its own."""
        ...


class LaunchStore(PassStore, TimerStore, PhaseStore, Protocol):
    """What carrying out Slurm's requests needs besides (`daemon/passes/requests.py`, `launch.py`):
    the requests themselves, gangs, and the instances launched and terminated."""

    def add_request(self, req: SpooledRequest) -> bool: ...

    def is_outage(self, error: Exception) -> bool:
        """Is `error` (raised by one of these calls) the store itself failing - unreachable,
        full, locked, or no longer this daemon's to write (`LeaseLost`) - rather than the
        record handed to it?"""
        ...

    def pending_requests(self) -> list[RequestRow]: ...

    def finish_requests(self, ids: Iterable[str], status: str, now: datetime,
                        error: str | None = None) -> None: ...

    def add_gang(self, row: GangRow) -> None: ...

    def get_gang(self, gang_id: str) -> GangRow | None: ...

    def update_gang(self, gang_id: str, **values: object) -> None: ...

    def add_instances(self, rows: Sequence[InstanceRow]) -> None: ...

    def mark_terminated(self, instance_ids: Iterable[str], now: datetime) -> None: ...

    def keep_warm(self, instance_ids: Iterable[str], now: datetime) -> None:
        """These instances stopped into their pool's warm pool (running or warm -> warm):
        a running one's run ends at `now`, its stop begins (`InstancePeriodRow`)."""
        ...

    def warm_instances(self, pool: str | None = None) -> list[InstanceRow]:
        """The warm (stopped) instances, of one pool or all, the oldest start first."""
        ...

    def instance_periods(self, since: datetime, until: datetime) -> list[InstancePeriodRow]:
        """The warm pool instances' earlier runs and stops overlapping [since, until)."""
        ...

    def last_instances(self, nodes: Iterable[str]) -> dict[str, InstanceRow]: ...



class ReconcileStore(LaunchStore, Protocol):
    """Everything one reconcile pass (`daemon/reconcile.py`) needs besides: the audit log,
    EC2's reservations as last read, the gangs whose placement groups are in use (the sweep),
    jobs and capacity samples (the ledger), and the rows the reads had to skip. The daemon's
    SQL store and the simulator's `MemoryStore` both implement it, so the simulator runs the
    daemon's own `Reconciler.tick`."""

    @property
    def quarantined(self) -> dict[tuple[str, str], str]:
        """(table, key) -> why: rows a read skipped because they cannot be decoded."""
        ...

    def add_event(self, kind: Kind, message: str, now: datetime, *, node: str | None = None,
                  request_id: str | None = None, gang_id: str | None = None) -> None: ...

    def save_capacity_reservations(self, rows: Sequence[CapacityReservationRow]) -> None: ...

    def live_gangs(self) -> set[str]: ...

    def add_job_starts(self, rows: Sequence[JobRow]) -> list[JobRow]: ...

    def end_jobs(self, job_ids: Iterable[str], now: datetime) -> None: ...

    def running_job_ids(self) -> set[str]: ...

    def add_samples(self, rows: Sequence[SampleRow]) -> None: ...

    def prune_samples(self, before: datetime) -> None: ...
