"""The passes' store kept in memory: the simulator's (no database, no I/O).

Records are copied in and out, as the SQL store's are: a pass that edits a record it read, or
one it handed over, changes nothing until it puts it back, and the lifecycle check sees the
stored state."""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from slurmscale.audit import Kind
from slurmscale.lifecycles import (
    GANG_EDGES,
    GRACE_EDGES,
    HOLD_EDGES,
    INSTANCE_EDGES,
    REQUEST_EDGES,
    GangStatus,
    GraceState,
    InstanceState,
    RequestStatus,
    check,
)
from slurmscale.policy.model import PoolMemory
from slurmscale.spool import SpooledRequest
from slurmscale.store.rows import (
    CapacityReservationRow,
    EventRow,
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

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

R = TypeVar("R", bound="DataclassInstance")


def _copy(row: R) -> R:
    """A new record with `row`'s values. A plain record (the simulator's: SQLAlchemy never
    mapped the class) is copied attribute by attribute, which is what the daemon's passes
    cost in a simulated pass; a mapped one through `replace`, whose constructor gives the
    copy its own mapper state."""
    if "_sa_instance_state" in row.__dict__:
        return replace(row)
    new = object.__new__(type(row))
    new.__dict__ = row.__dict__.copy()  # (a third cheaper than updating the new one's)
    return new


KEPT_EVENTS = 1000  # the newest audit events kept (every kind is counted)


class MemoryStore:
    """Implements `ReconcileStore` (and so `LaunchStore` and `PassStore`), held to the SQL
    store's behaviour by `tests/support/store_contract.py`. The audit log keeps the newest
    `KEPT_EVENTS` and counts every kind."""

    def __init__(self) -> None:
        self._memory: dict[str, PoolMemory] = {}
        self._holds: dict[str, HoldRow] = {}
        self._hold_state: dict[str, str] = {}  # name -> state (read without the ORM)
        self._exhausted: set[str] = set()
        self._spent: dict[str, float] = {}
        self._offerings: dict[tuple[str, str], OfferingRow] = {}
        self._preemptions: list[PreemptionRow] = []  # in time order
        self._graces: list[GraceRow] = []  # by id - 1
        self._preempted_at: list[float] = []
        self._replacements: list[ReplacementRow] = []  # in time order
        self._periods: list[InstancePeriodRow] = []  # warm instances' runs and stops
        self._open_stops: dict[str, InstancePeriodRow] = {}  # instance -> its stop now
        self._timers: dict[str, dict[str, float]] = {}  # kind -> subject -> since
        self._phases: dict[str, LaunchPhasesRow] = {}  # instance id -> its launch's phases
        self._phase_order: list[tuple[float, str]] = []  # (answered, instance id), sorted
        self._open_phases: set[str] = set()  # those whose node has run no job yet
        self._notes: dict[str, dict[str, str]] = {}  # kind -> subject -> note
        self._requests: dict[str, RequestRow] = {}
        self._pending: dict[str, RequestRow] = {}  # the pending ones, in arrival order
        self._gangs: dict[str, GangRow] = {}
        self._launching: set[str] = set()  # gangs LAUNCHING (the SQL store's index on status)
        self._instances: dict[str, InstanceRow] = {}
        self._active: dict[str, str] = {}  # node -> its running instance
        self._reservations: dict[str, CapacityReservationRow] = {}
        self._jobs: dict[str, JobRow] = {}
        self._running: set[str] = set()
        self._ended: list[tuple[datetime, JobRun]] = []  # (ended_at, run), as they end
        self._samples: deque[SampleRow] = deque()  # in time order
        self.events: deque[EventRow] = deque(maxlen=KEPT_EVENTS)
        self.event_counts: Counter[str] = Counter()
        self.quarantined: dict[tuple[str, str], str] = {}  # (memory decodes nothing)

    def pool_memory(self) -> dict[str, PoolMemory]:
        return dict(self._memory)

    def save_pool_memory(self, memory: dict[str, PoolMemory], now: datetime) -> None:
        self._memory.update(memory)

    def holds(self, states: tuple[str, ...] | None = None) -> list[HoldRow]:
        names = [n for n, st in self._hold_state.items() if states is None or st in states]
        rows = [_copy(self._holds[n]) for n in names]
        return sorted(rows, key=lambda r: -r.created_s)

    def hold(self, name: str) -> HoldRow | None:
        row = self._holds.get(name)
        return None if row is None else _copy(row)

    def put_hold(self, row: HoldRow) -> None:
        check(HOLD_EDGES, f"hold {row.name}", self._hold_state.get(row.name), row.state)
        self._holds[row.name] = _copy(row)
        self._hold_state[row.name] = row.state
        self._spent[row.name] = row.spent_gpu_s
        if row.exhausted:
            self._exhausted.add(row.job_id)

    def exhausted_jobs(self) -> frozenset[str]:
        return frozenset(self._exhausted)

    def spent_gpu_s(self) -> float:
        """Idle GPU time every hold has spent so far (the simulator's result)."""
        return sum(self._spent.values())

    def created(self) -> int:
        return len(self._holds)

    def offering(self, pool: str, offering: str = "") -> OfferingRow | None:
        row = self._offerings.get((pool, offering))
        return None if row is None else _copy(row)

    def offerings(self) -> list[OfferingRow]:
        return [_copy(r) for r in self._offerings.values()]

    def put_offering(self, row: OfferingRow) -> None:
        self._offerings[(row.pool, row.offering)] = _copy(row)

    def capacity_reservations(self) -> list[CapacityReservationRow]:
        return [_copy(r) for r in self._reservations.values()]

    def save_capacity_reservations(self, rows: Sequence[CapacityReservationRow]) -> None:
        for r in rows:
            self._reservations[r.id] = _copy(r)

    def reserved_nodes(self) -> frozenset[str]:
        return frozenset(node for node, iid in self._active.items()
                         if self._instances[iid].capacity_reservation_id)

    def add_preemption(self, row: PreemptionRow) -> None:
        t = row.at.timestamp()
        i = bisect.bisect_right(self._preempted_at, t)
        self._preempted_at.insert(i, t)
        self._preemptions.insert(i, _copy(row))

    def preemptions(self, job_id: str | None = None,
                    since: float | None = None) -> list[PreemptionRow]:
        first = 0 if since is None else bisect.bisect_left(self._preempted_at, since)
        return [_copy(r) for r in self._preemptions[first:]
                if job_id is None or r.job_id == job_id]

    def graces(self, open_only: bool = True) -> list[GraceRow]:
        return [_copy(r) for r in self._graces
                if not open_only or r.state == GraceState.SIGNALLED.value]

    def put_grace(self, row: GraceRow) -> None:
        old = None if row.id is None else self._graces[row.id - 1].state
        check(GRACE_EDGES, f"grace of job {row.job_id} on {row.node}", old, row.state)
        if row.id is None:
            row.id = len(self._graces) + 1
            self._graces.append(_copy(row))
        else:
            self._graces[row.id - 1] = _copy(row)

    def add_replacement(self, row: ReplacementRow) -> None:
        self._replacements.append(_copy(row))

    def replacements(self, since: float | None = None) -> list[ReplacementRow]:
        return [_copy(r) for r in self._replacements
                if since is None or r.at.timestamp() >= since]

    # --- launch phases -------------------------------------------------------------------
    def put_launch_phases(self, rows: Sequence[LaunchPhasesRow]) -> None:
        for r in rows:
            old = self._phases.get(r.instance_id)
            key = (r.answered_s or 0.0, r.instance_id)
            if old is None or (old.answered_s or 0.0) != key[0]:
                if old is not None:
                    self._phase_order.remove(((old.answered_s or 0.0), r.instance_id))
                bisect.insort(self._phase_order, key)
            self._phases[r.instance_id] = _copy(r)
            if r.started_s is None:
                self._open_phases.add(r.instance_id)
            else:
                self._open_phases.discard(r.instance_id)

    def set_launch_phases_apart(self, instance_ids: Sequence[str]) -> None:
        for iid in instance_ids:
            old = self._phases.pop(iid, None)
            if old is None:
                continue
            self._phase_order.remove(((old.answered_s or 0.0), iid))
            self._open_phases.discard(iid)
            old.instance_id = f"{iid}@{int(old.answered_s or 0)}"
            self.put_launch_phases([old])

    def launch_phases(self, since_s: float | None = None,
                      open_only: bool = False) -> list[LaunchPhasesRow]:
        """(the simulator asks every pass: by answer time from `since_s` with a bisection,
        the open ones from their own set, never a walk of every launch so far)"""
        first = (-math.inf if since_s is None else since_s, "")
        if open_only:
            keys = sorted(k for i in self._open_phases
                          if (k := (self._phases[i].answered_s or 0.0, i)) >= first)
        else:
            keys = self._phase_order[bisect.bisect_left(self._phase_order, first):]
        return [_copy(self._phases[i]) for _, i in keys]

    # --- timers --------------------------------------------------------------------------
    def timers(self, kind: TimerKind) -> dict[str, float]:
        return dict(self._timers.get(kind, {}))

    def set_timers(self, kind: TimerKind, since: Mapping[str, float],
                   notes: Mapping[str, str] | None = None) -> None:
        kept, said = self._timers.setdefault(kind, {}), self._notes.setdefault(kind, {})
        for k, v in since.items():
            kept[k] = v
            note = (notes or {}).get(k)
            if note is None:
                said.pop(k, None)
            else:
                said[k] = note

    def end_timers(self, kind: TimerKind, subjects: Iterable[str]) -> None:
        kept, said = self._timers.get(kind, {}), self._notes.get(kind, {})
        for k in subjects:
            kept.pop(k, None)
            said.pop(k, None)

    def timer_notes(self, kind: TimerKind) -> dict[str, str]:
        return dict(self._notes.get(kind, {}))

    # --- instances (what a launch recorded; the interruption pass looks them up) ----------
    def add_instances(self, rows: Sequence[InstanceRow]) -> None:
        for r in rows:
            old = self._instances.get(r.instance_id)
            check(INSTANCE_EDGES, f"instance {r.instance_id}",
                  None if old is None else old.state, r.state)
            if old is not None and self._active.get(old.node) == r.instance_id:
                del self._active[old.node]  # (a warm instance started for another node)
            if old is not None and old.state == InstanceState.WARM and \
                    r.state == InstanceState.RUNNING:  # its last run kept, its stop ended
                self._periods.append(InstancePeriodRow.of(
                    old, InstanceState.RUNNING.value, old.launched_at, old.terminated_at))
                self._end_stop(r.instance_id, r.launched_at)
            self._instances[r.instance_id] = _copy(r)
            if r.state == InstanceState.RUNNING:
                self._active[r.node] = r.instance_id

    def instance(self, instance_id: str) -> InstanceRow | None:
        row = self._instances.get(instance_id)
        return None if row is None else _copy(row)

    def active_instances(self, nodes: Iterable[str] | None = None) -> list[InstanceRow]:
        names = sorted(self._active) if nodes is None else sorted(set(nodes) & set(self._active))
        return [_copy(self._instances[self._active[n]]) for n in names]

    def last_instances(self, nodes: Iterable[str]) -> dict[str, InstanceRow]:
        """Each node's most recently launched instance, whatever its state."""
        out: dict[str, InstanceRow] = {}
        want = set(nodes)
        for r in self._instances.values():  # (in launch order)
            if r.node in want:
                out[r.node] = _copy(r)
        return out

    def mark_terminated(self, instance_ids: Iterable[str], now: datetime) -> None:
        for iid in instance_ids:
            row = self._instances.get(iid)
            if row is None:
                continue  # not one we recorded (as the SQL store: nothing to mark)
            check(INSTANCE_EDGES, f"instance {iid}", row.state, InstanceState.TERMINATED)
            if row.state == InstanceState.WARM:  # (its terminated_at stays its stop)
                row.state = InstanceState.TERMINATED
                self._end_stop(iid, now)
            elif row.state != InstanceState.TERMINATED:
                row.state, row.terminated_at = InstanceState.TERMINATED, now
                if self._active.get(row.node) == iid:
                    del self._active[row.node]

    def keep_warm(self, instance_ids: Iterable[str], now: datetime) -> None:
        for iid in instance_ids:
            row = self._instances.get(iid)
            if row is None:
                continue
            check(INSTANCE_EDGES, f"instance {iid}", row.state, InstanceState.WARM)
            if row.state == InstanceState.RUNNING:
                row.terminated_at = now
                stop = InstancePeriodRow.of(row, InstanceState.WARM.value, now)
                self._periods.append(stop)
                self._open_stops[iid] = stop
            row.state = InstanceState.WARM
            if self._active.get(row.node) == iid:
                del self._active[row.node]

    def _end_stop(self, instance_id: str, at: datetime) -> None:
        stop = self._open_stops.pop(instance_id, None)
        if stop is not None:
            stop.until = at

    def instance_periods(self, since: datetime, until: datetime) -> list[InstancePeriodRow]:
        return [_copy(p) for p in sorted(self._periods, key=lambda p: p.since)
                if p.since < until and (p.until is None or p.until >= since)]

    def warm_instances(self, pool: str | None = None) -> list[InstanceRow]:
        return [_copy(r) for r in sorted(self._instances.values(),
                                         key=lambda r: (r.launched_at, r.instance_id))
                if r.state == InstanceState.WARM and (pool is None or r.pool == pool)]

    # --- Slurm's requests and the gangs launched for them ------------------------------
    def is_outage(self, error: Exception) -> bool:
        return False  # (memory does not go away)

    def add_request(self, req: SpooledRequest) -> bool:
        if req.id in self._requests:
            return False
        row = RequestRow(id=req.id, kind=req.kind.value, hostlist=req.hostlist,
                         nodes=json.dumps(list(req.nodes)), resume_file=req.resume_file,
                         received_at=datetime.fromtimestamp(req.received_at, UTC),
                         status=RequestStatus.PENDING.value)
        check(REQUEST_EDGES, f"request {req.id}", None, row.status)
        self._requests[req.id] = self._pending[req.id] = row
        return True

    def pending_requests(self) -> list[RequestRow]:
        """As received (the SQL store's order), whatever order they were added in."""
        return [_copy(r) for r in sorted(self._pending.values(),
                                         key=lambda r: (r.received_at, r.id))]

    def finish_requests(self, ids: Iterable[str], status: str, now: datetime,
                        error: str | None = None) -> None:
        for rid in ids:
            row = self._requests.get(rid)
            if row is None:
                continue
            check(REQUEST_EDGES, f"request {rid}", row.status, status)
            row.status, row.processed_at, row.error = status, now, error
            self._pending.pop(rid, None)

    def add_gang(self, row: GangRow) -> None:
        check(GANG_EDGES, f"gang {row.id}", None, row.status)
        self._gangs[row.id] = _copy(row)
        self._note_launching(row)

    def get_gang(self, gang_id: str) -> GangRow | None:
        row = self._gangs.get(gang_id)
        return None if row is None else _copy(row)

    def gangs(self, limit: int = 100) -> list[GangRow]:
        """The newest first, as the SQL store lists them."""
        return [_copy(g) for g in list(self._gangs.values())[::-1][:limit]]

    def update_gang(self, gang_id: str, **values: object) -> None:
        row = self._gangs.get(gang_id)
        if row is None:
            return
        if "status" in values:
            check(GANG_EDGES, f"gang {gang_id}", row.status, str(values["status"]))
        for k, v in values.items():
            setattr(row, k, v)
        self._note_launching(row)

    def _note_launching(self, row: GangRow) -> None:
        if row.status == GangStatus.LAUNCHING:
            self._launching.add(row.id)
        else:
            self._launching.discard(row.id)

    def live_gangs(self) -> set[str]:
        """Gangs with an instance up or a launch in flight (their placement group is in use)."""
        return {self._instances[iid].gang_id for iid in self._active.values()} | self._launching

    # --- the audit log, jobs and samples -----------------------------------------------
    def add_event(self, kind: Kind, message: str, now: datetime, *, node: str | None = None,
                  request_id: str | None = None, gang_id: str | None = None) -> None:
        self.events.append(EventRow(at=now, kind=kind, node=node, request_id=request_id,
                                    gang_id=gang_id, message=message))
        self.event_counts[kind] += 1

    def add_job_starts(self, rows: Sequence[JobRow]) -> list[JobRow]:
        new = [r for r in rows if r.job_id not in self._jobs]
        for r in new:
            self._jobs[r.job_id] = _copy(r)
            if r.ended_at is None:
                self._running.add(r.job_id)
            else:
                self._ran(r)
        return new

    def end_jobs(self, job_ids: Iterable[str], now: datetime) -> None:
        for jid in job_ids:
            if jid in self._running:
                self._running.discard(jid)
                row = self._jobs[jid]
                row.ended_at = now
                self._ran(row)

    def _ran(self, row: JobRow) -> None:
        if row.ended_at is not None and row.time_limit_s:
            self._ended.append((row.ended_at, JobRun(
                row.job_id, row.ended_at.timestamp(), row.pool,
                (row.ended_at - row.started_at).total_seconds(), float(row.time_limit_s))))

    def job_runs(self, since: datetime) -> list[JobRun]:
        # (ended in time order but for the few the ledger found ended with Slurm's own end
        # time, a pass late: the cut is by a minute's slack, then exact)
        i = bisect.bisect_left(self._ended, since - timedelta(minutes=1), key=lambda e: e[0])
        return [run for at, run in self._ended[i:] if at >= since]

    def running_job_ids(self) -> set[str]:
        return set(self._running)

    def add_samples(self, rows: Sequence[SampleRow]) -> None:
        self._samples.extend(_copy(r) for r in rows)

    def prune_samples(self, before: datetime) -> None:
        while self._samples and self._samples[0].at < before:
            self._samples.popleft()
