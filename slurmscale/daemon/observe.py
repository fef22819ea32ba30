"""Live Slurm state and the config -> the policy's inputs: the Snapshot, the pending gangs, the
pools' knobs and the spot fallback's rules. The edge between the config file and the pure
policy (which knows nothing of the config): built once per pass, here. Pure: the caller reads
Slurm and the clock."""

from __future__ import annotations

import bisect
import itertools
import operator
from collections import Counter
from collections.abc import Callable, Collection
from typing import Generic, NamedTuple, TypeVar, cast

from slurmscale import timeframe
from slurmscale.config import CapacityType, Config, Pool
from slurmscale.daemon import view_check
from slurmscale.daemon.knobs import hold_knobs, knobs
from slurmscale.model import QueueJob, QueueRead, SlurmNode
from slurmscale.policy import observe as reading
from slurmscale.policy.demand import DemandBook
from slurmscale.policy.model import (
    NodeState,
    NodeView,
    PendingJob,
    PoolKnobs,
    PoolMemory,
    Snapshot,
)
from slurmscale.policy.observe import (
    CAPACITY_REASONS,
    down_view,
    running_ends,
    slurm_time,
    state_facts,
)
from slurmscale.policy.reservations import (
    GangJob,
    RankedGangs,
    ReservationKnobs,
    TakeOrder,
    earliest_plan,
)
from slurmscale.slurm.reasons import Why, drained_by_us

V = TypeVar("V")


class Changes(NamedTuple):
    todo: list[QueueJob]  # the records to work out this pass
    came: list[QueueJob]  # the records new since last pass (new jobs, changed ones)
    went: list[QueueJob]  # the records let go (jobs gone, the old records of changed ones)


class PerJob(Generic[V]):
    """One of QueueView's memories: what each job in the queue gave last pass, the record
    it was made from, and the read it is current with. A pass works out afresh only the
    records that changed: told by the read itself (QueueRead: the squeue parse's account of
    what it parsed and what it no longer saw) when the memory is current with the read it is
    relative to, else found by walking the records against the kept ones (the simulated
    Slurm keeps its records; any other list). Then the pass's result, in squeue's order, is
    looked up job by job without a loop of slurmscale's own (`in_order`)."""

    __slots__ = ("records", "made", "read", "redo", "told", "_order")

    def __init__(self, told: Callable[[V | None, V | None], None] | None = None) -> None:
        self.records: dict[str, QueueJob] = {}  # job id -> the record `made` is from
        self.made: dict[str, V] = {}  # job id -> what it gave (absent: nothing)
        self.read: int | None = None  # the QueueRead these are current with
        self.redo: set[str] = set()  # jobs worked out again every pass (see todo)
        self.told = told  # told each change of what a job gives: (was, is)
        # the last `in_order`: the records it was for and its answer (None: something
        # a job gives changed since)
        self._order: tuple[list[QueueJob], tuple[V, ...]] | None = None

    def give(self, job_id: str, value: V | None) -> None:
        """What the job gives now (None: nothing)."""
        was = self.made.pop(job_id, None) if value is None else self.made.get(job_id)
        if value is not None:
            self.made[job_id] = value
        if was is not value:
            self._order = None
            if self.told is not None:
                self.told(was, value)

    def todo(self, jobs: list[QueueJob], also: Collection[str] = ()) -> Changes:
        """What to work out this pass: the records new or changed since last pass, those
        kept in `redo` (what they give depends on more than their record), and those of the
        jobs in `also`; the caller gives what each of them gives now. Forgets what a job gone
        gave (a changed job's stays until the caller gives anew: one change, old to new, for
        `told`); keeps each new record, so what the caller makes is current."""
        records = self.records
        let_go: list[QueueJob] = []
        # (a job whose record changed keeps what it gave until the caller gives what the
        # new one gives: one change, old to new, for `told`; a job gone gives nothing now)
        if (isinstance(jobs, QueueRead) and self.read is not None
                and jobs.since == self.read):
            changed = jobs.changed
            if jobs.dropped:
                came = set(map(_job_id, changed))
                for j in jobs.dropped:
                    if records.get(j[0]) is j:
                        let_go.append(records.pop(j[0]))
                        if j[0] not in came:
                            self.give(j[0], None)
        else:
            # (the records not the very ones kept, picked out in C: every job every pass)
            changed = list(itertools.compress(
                jobs, map(operator.is_not, map(records.get, map(_job_id, jobs)), jobs)))
            for j in changed:
                old = records.pop(j[0], None)
                if old is not None:
                    let_go.append(old)
            if len(records) + len(changed) != len(jobs):  # (some kept jobs are gone)
                for job_id in records.keys() - set(map(_job_id, jobs)):
                    let_go.append(records.pop(job_id))
                    self.give(job_id, None)
        self.read = jobs.serial if isinstance(jobs, QueueRead) else None
        todo = {j[0]: j for j in changed}
        for j in changed:
            records[j[0]] = j
        redo = self.redo
        if let_go:  # (a job gone; a changed job's the caller settles, as it gives anew)
            redo.difference_update(j[0] for j in let_go if j[0] not in records)
        for job_id in (*redo, *also):
            if job_id not in todo and job_id in records:
                todo[job_id] = records[job_id]
        return Changes(list(todo.values()), changed, let_go)

    def in_order(self, jobs: list[QueueJob]) -> tuple[V, ...]:
        """What the jobs gave, in the queue's order (the jobs that gave nothing left out).
        The same tuple again while no job gives anything new and the records are the very
        ones of last time, in the same order (most passes, at rest: compared in C)."""
        last = self._order
        if (last is not None and len(last[0]) == len(jobs)
                and all(map(operator.is_, last[0], jobs))):
            return last[1]
        out = tuple(filter(None, map(self.made.get, map(_job_id, jobs))))
        self._order = (list(jobs), out)
        return out


_job_id = operator.itemgetter(0)
_arrival, _job_of_arrival = operator.itemgetter(0, 1, 2), operator.itemgetter(3)


class QueueView:
    """The queue as the daemon's passes saw it, kept from one pass to the next: what each
    job's record gave the snapshot and the hold planner last pass is given again while Slurm
    prints the same record (the squeue parse hands back the very record for an unchanged
    line; the simulated Slurm keeps its records), and worked out afresh for the jobs that
    changed: the records the squeue parse says changed (QueueRead), or, for a list that
    does not say, those not the very ones of last pass. What the pass's decisions take
    from the whole queue is kept up to date the same way, job by job as they change: the
    pools' pending demand summed up (`book`, policy/demand.py: `decide` reads its tallies
    and no longer walks the queue), the gangs a hold could be for ranked per pool
    (`ranked`: the hold planner takes them from the top), each pending gang's earliest
    backfill plan (`plans`: a later one has slipped). So a pass's cost follows what
    changed, not the queue's length (issue 44; `tests/benchmarks/observe_delta.py`). Also
    the arrival log (job id -> submit, pool, nodes): a job that already finished is gone
    from squeue but still counts as an arrival within the reuse forecast's window.

    What a job's view depends on beyond its record is either part of the key (the config
    object, the clock's eras), followed (a throttled array's line is worked out again when
    its array's running tasks change), or never remembered (a job slurmscale requeued, a
    submit time Slurm does not give)."""

    def __init__(self) -> None:
        self.arrivals: dict[str, tuple[float, str, int]] = {}
        # pending gang -> the earliest start backfill planned for it (a later one: slipped)
        self.plans: dict[str, float] = {}
        # the log in time order, each with its job: (submit, pool, nodes, job id)
        self._by_time: list[tuple[float, str, int, str]] = []
        self._sorted: tuple[tuple[float, str, int], ...] = ()  # the log's, while unchanged
        self._logged = False  # the log changed since `_sorted` was made
        self.book = DemandBook(())  # the pools' pending demand, summed up (made per config)
        self.hold_knobs = ReservationKnobs()  # the config's (made per config, as `knobs`)
        self.max_nodes: dict[str, int] = {}  # each pool's
        self.ranked = RankedGangs(self.hold_knobs, self.max_nodes)  # (made per config)
        self.take_order = TakeOrder()  # the nodes a hold may take, while the nodes stand
        self._jobs: PerJob[PendingJob] = PerJob()  # each pending job's demand
        self._gangs: PerJob[GangJob] = PerJob()  # each gang the hold planner considers
        # array job -> its tasks running or starting (what a `%N` throttle leaves to start)
        self._array_running: Counter[str] = Counter()
        self._throttled: dict[str, dict[str, QueueJob]] = {}  # array job -> its `%N` lines
        self._running: dict[str, QueueJob] = {}  # job id -> its record, the running jobs
        self._ends: tuple[dict[str, float], dict[str, int]] = ({}, {})
        self._ends_read: int | None = None  # the QueueRead the ends are current with
        # node name -> (its record, its view (None: no pool's), what of the ends and paid
        # nodes it was made with), made under these ends/paid
        self._nodes: dict[str, _NodeMade] = {}
        self._nodes_under: tuple[object, frozenset[str]] | None = None
        self._key: tuple[int, int] | None = None
        self.knobs: tuple[PoolKnobs, ...] = ()  # the config's, made once per config

    def forget(self) -> None:
        """Every job's view (not the arrival log): the next pass reads the whole queue."""
        self.book = DemandBook(k.name for k in self.knobs)
        self.ranked = RankedGangs(self.hold_knobs, self.max_nodes)
        self._jobs, self._gangs = PerJob(self.book.swap), PerJob(self.ranked.swap)
        self._array_running, self._throttled = Counter(), {}
        self._running, self._ends, self._ends_read = {}, ({}, {}), None
        self._nodes, self._nodes_under = {}, None

    def arrays(self, came: list[QueueJob], went: list[QueueJob]
               ) -> tuple[Counter[str], list[QueueJob]]:
        """After these records came and went: the array tasks running or starting, by
        array job; and the throttled array lines (`%N`) to work out again, as what they may
        start moved with those running (their own records unchanged)."""
        running, throttled = self._array_running, self._throttled
        moved: set[str] = set()
        for sign, records in ((-1, went), (1, came)):
            for j in records:
                if not j.array_job:
                    continue
                if j.array_throttle:
                    lines = throttled.setdefault(j.array_job, {})
                    if sign > 0:
                        lines[j[0]] = j
                    elif lines.get(j[0]) is j:
                        del lines[j[0]]
                if j.state != "PENDING":
                    moved.add(j.array_job)
                    running[j.array_job] += sign
                    if not running[j.array_job]:
                        del running[j.array_job]
        return running, [j for a in moved for j in throttled.get(a, {}).values()]

    def log(self, job_id: str, arrival: tuple[float, str, int]) -> None:
        """A job's arrival, kept in time order as it comes (no sort of the whole log)."""
        old = self.arrivals.get(job_id)
        if old != arrival:
            by_time = self._by_time
            if old is not None:
                del by_time[bisect.bisect_left(by_time, (*old, job_id))]
            bisect.insort(by_time, (*arrival, job_id))
            self.arrivals[job_id] = arrival
            self._logged = True

    def recent(self, since: float) -> tuple[tuple[float, str, int], ...]:
        """The arrivals logged at or after `since`, sorted; older ones let go (from the
        front of the time order). Made again only when the log changed (at rest, a pass
        asks for the same tuple again)."""
        by_time = self._by_time
        cut = bisect.bisect_left(by_time, (since,))
        if cut:
            for job_id in map(_job_of_arrival, by_time[:cut]):
                del self.arrivals[job_id]
            del by_time[:cut]
            self._logged = True
        if self._logged:
            self._sorted, self._logged = tuple(map(_arrival, by_time)), False
        return self._sorted

    def valid_for(self, cfg: Config) -> None:
        """Forget the views made under another config or before the host's clock stepped
        (Slurm's times read into the daemon's frame differently since)."""
        key = (id(cfg), len(timeframe.FRAME.eras))
        if key != self._key:
            self._key = key
            self.knobs = knobs(cfg)
            self.hold_knobs = hold_knobs(cfg)
            self.max_nodes = {p.name: p.max_nodes for p in cfg.pools}
            self.forget()

    def ends(self, jobs: list[QueueJob]) -> tuple[dict[str, float], dict[str, int]]:
        """running_ends, again only when a running job's record changed: the running jobs
        brought up to date from what the read says changed, when it follows the one they
        were taken from (no walk of the queue), else found by walking the queue."""
        if (isinstance(jobs, QueueRead) and jobs.since is not None
                and jobs.since == self._ends_read):
            # (NodeList: only a running job's is read)
            came, went = [j for j in jobs.changed if j[13]], [j for j in jobs.dropped if j[13]]
            if came or went:
                by_id = self._running
                for j in went:
                    if by_id.get(j[0]) is j:
                        del by_id[j[0]]
                by_id.update((j[0], j) for j in came)
                self._ends = running_ends(list(by_id.values()))
            self._ends_read = jobs.serial
            return self._ends
        running = [j for j in jobs if j[13]]
        if len(running) != len(self._running) or any(
                a is not b for a, b in zip(running, self._running.values(), strict=True)):
            self._running, self._ends = {j[0]: j for j in running}, running_ends(running)
        self._ends_read = jobs.serial if isinstance(jobs, QueueRead) else None
        return self._ends


def gang_jobs(cfg: Config, jobs: list[QueueJob], min_nodes: int,
              also: frozenset[str] = frozenset(),
              view: QueueView | None = None) -> tuple[GangJob, ...]:
    """Jobs the reservation planner considers: multi-node jobs, and any job in `also` (the
    jobs slurmscale already holds nodes for, whatever their state). `view`: the daemon's
    queue view (a job whose record is unchanged since last pass is not looked at again)."""
    # a capacity-block pool's gangs wait for its block's window, never for a hold
    by_partition = {p.partition: p for p in cfg.pools
                    if p.capacity_type is not CapacityType.CAPACITY_BLOCK}
    pool_of: dict[tuple[str, ...], Pool | None] = {}  # (a queue has few partition lists)
    out = []
    # (tens of thousands a pass: each GangJob made as the tuple it is, in field order, and
    # a time looked up in slurm_time's memo before calling it)
    make, missing, times = tuple.__new__, reading._MISSING, reading.time_memo()
    keep: PerJob[GangJob] | None = None  # the daemon's pass (its gangs kept pass to pass)
    todo, went = jobs, list[QueueJob]()
    plans: dict[str, float] = {}
    if view is not None and min_nodes == 2:
        view.valid_for(cfg)
        keep, plans = view._gangs, view.plans
        todo, _, went = keep.todo(jobs, also)
    for j in todo:
        if j.num_nodes < min_nodes and j.job_id not in also:
            if keep is not None:
                keep.give(j[0], None)
                keep.redo.discard(j[0])
            continue
        if j.partitions in pool_of:
            pool = pool_of[j.partitions]
        else:
            pool = pool_of[j.partitions] = next(
                (by_partition[p] for p in j.partitions if p in by_partition), None)
        if pool is None:
            if keep is not None:
                keep.give(j[0], None)
                keep.redo.discard(j[0])
            continue
        submit = times.get(j.submit_time, missing)
        if submit is missing:
            submit = slurm_time(j.submit_time)
        expected = None
        if j.expected_start:
            expected = times.get(j.expected_start, missing)
            if expected is missing:
                expected = slurm_time(j.expected_start)
        reason = j.reason
        g = make(GangJob, (
            j.job_id, pool.name, j.num_nodes, j.gpus_per_node or pool.gpus_per_node,
            submit or 0.0, j.priority, j.user, j.account, j.state == "PENDING",
            reason in CAPACITY_REASONS or reason.startswith("ReqNodeNotAvail"),
            reason.startswith("JobHeld") or j.priority == 0, j.reservation, expected,
            None, None))
        if keep is None:
            out.append(g)
        else:
            keep.give(j[0], earliest_plan(g, plans))
            if j.num_nodes < min_nodes:  # (only for `also`: looked at again next pass)
                keep.redo.add(j[0])
    if keep is None:
        return tuple(out)
    # a gang gone, started or no longer one: its earliest plan forgotten
    made = keep.made
    for job_id in (*(j[0] for j in todo), *(j[0] for j in went)):
        now_made = made.get(job_id)
        if (now_made is None or not now_made.pending) and job_id in plans:
            del plans[job_id]
    return keep.in_order(jobs)


# a node's record, its view (None: no pool's), and what of the running jobs' ends and the
# paid nodes the view was made with: (latest end, GPUs its jobs use, paid?); None: nothing
_NodeMade = tuple[SlurmNode, NodeView | None, tuple[float | None, int | None, bool] | None]


def _node_views(cfg: Config, nodes: list[SlurmNode], jobs: list[QueueJob],
                paid: frozenset[str], view: QueueView | None) -> list[NodeView]:
    """The pools' nodes as the policy sees them (`paid`: nodes in a capacity reservation).
    With the daemon's `view`: a node whose record is the same as last pass's keeps last
    pass's view while no running job changed and the paid nodes are the same, or, when
    they changed, while what the view took from them is the same for that node (a job
    started or ended elsewhere)."""
    if view is None:
        free_at, job_gpus = running_ends(jobs)
        last: dict[str, _NodeMade] = {}
        same = True
    else:
        ends = free_at, job_gpus = view.ends(jobs)
        under = (ends, paid)
        last, same = view._nodes, view._nodes_under == under
        view._nodes_under = under
    fresh: dict[str, _NodeMade] = {}
    # (the loops here and in build_snapshot run for every node and job every pass: kept flat,
    # enum members and methods looked up once)
    views: list[NodeView] = []
    pool_of_node, idle, allocated, down, held_why = cfg.pool_of, NodeState.IDLE, \
        NodeState.ALLOCATED, NodeState.POWERED_DOWN, Why.HELD
    for n in nodes:
        name = n.name
        hit = last.get(name)
        if hit is not None and hit[0] is n and (
                same or hit[2] is None
                or hit[2] == (free_at.get(name), job_gpus.get(name), name in paid)):
            fresh[name] = hit
            if hit[1] is not None:
                views.append(hit[1])
            continue
        pool = pool_of_node(name)
        if pool is None:
            fresh[name] = (n, None, None)
            continue
        st, drained, unusable = state_facts(n.state)
        # held by slurmscale (governed pools): only these are ever undrained, never an admin's
        held = drained and drained_by_us(n) is held_why
        usable = held or not unusable
        if st is down and not n.alloc_gpus and name not in job_gpus and name not in paid:
            v = down_view(name, pool.name, held, usable)  # most nodes, at rest
        else:
            v = NodeView(
                name, pool.name, st, slurm_time(n.last_busy) if st is idle else None, held,
                usable, n.alloc_gpus or min(job_gpus.get(name, 0), pool.gpus_per_node),
                free_at.get(name) if st is allocated else None, name in paid)
        views.append(v)
        fresh[name] = (n, v, (free_at.get(name), job_gpus.get(name), name in paid))
    if view is not None:
        view._nodes = fresh
    return views


_JOB_PRIORITY = QueueJob._fields.index("priority")
_DEMAND_PRIORITY = PendingJob._fields.index("priority")


def counts(reason: str, requeued: bool, priority: int, startable: int) -> bool:
    """When a pending job's demand counts (PendingJob.actionable): it waits for capacity (a
    capacity reason, or slurmscale requeued it and Slurm holds it back), it is not held
    (priority 0), and a task of it may start now. Written once: the full read and the
    priority-only shortcut below both ask it."""
    return (reason in CAPACITY_REASONS or requeued) and priority > 0 and startable > 0


def _priority_moved(kept: PerJob[PendingJob], todo: list[QueueJob], went: list[QueueJob],
                    requeued: frozenset[str]) -> list[QueueJob]:
    """Of the records to work out, those whose line changed in its priority alone (each
    PriorityCalcPeriod moves every pending job's): what the job gives is what it gave with
    the new priority, while nothing else it hangs on moved (jobs `requeued` now, those
    worked out again every pass - requeued, no submit time: `redo` -, and throttled array
    lines: worked out in full) and its demand does not start or stop counting with the new
    priority (`counts`: a job held at priority 0). Returns the rest, to work out in full."""
    was = {j[0]: j for j in went}
    made, redo, rest = kept.made, kept.redo, []
    p, q = _JOB_PRIORITY, _DEMAND_PRIORITY
    make = tuple.__new__
    for j in todo:
        old = was.get(j[0])
        if (old is None or (demand := made.get(j[0])) is None
                or old[:p] != j[:p] or old[p + 1:] != j[p + 1:]
                or j.array_throttle or j[0] in redo or j[0] in requeued
                or counts(j.reason, False, j.priority, demand.startable)
                is not demand.actionable):
            rest.append(j)
            continue
        kept.give(j[0], make(PendingJob, (*demand[:q], j[p], *demand[q + 1:])))
    return rest


def _pool_for(partitions: tuple[str, ...], by_partition: dict[str, Pool]
              ) -> tuple[str, tuple[str, ...], int, int] | None:
    """A partition list's pool (the first of slurmscale's), the other pools it may also run
    in, that pool's max nodes and GPUs a node; None: no partition of slurmscale's."""
    mine = [by_partition[p] for p in partitions if p in by_partition]
    if not mine:
        return None
    return (mine[0].name, tuple(p.name for p in mine[1:] if p is not mine[0]),
            mine[0].max_nodes, mine[0].gpus_per_node)


def _to_work_out(jobs: list[QueueJob], view: QueueView | None, requeued: frozenset[str]
                 ) -> tuple[list[QueueJob], Counter[str]]:
    """The records a read works out: every one (no view), else those whose record changed
    (or that hang on more than it), a priority-only change given its new priority in
    place (`_priority_moved`); and the running tasks of each array (a throttled array,
    `%N`, starts no more tasks than N less those running)."""
    if view is None:
        running_tasks: Counter[str] = Counter()
        if any(j.array_throttle for j in jobs):
            running_tasks.update(j.array_job for j in jobs
                                 if j.array_job and j.state != "PENDING")
        return jobs, running_tasks
    kept = view._jobs
    todo, came, went = kept.todo(jobs, requeued)
    running_tasks, again = view.arrays(came, went)
    if again:
        todo = list({j[0]: j for j in (*todo, *again)}.values())
    if went:  # (a PriorityCalcPeriod's read: every pending line's priority moved)
        todo = _priority_moved(kept, todo, went, requeued)
    return todo, running_tasks


def build_snapshot(cfg: Config, nodes: list[SlurmNode], jobs: list[QueueJob], now: float,
                   memory: dict[str, PoolMemory] | None = None,
                   view: QueueView | None = None,
                   requeued: frozenset[str] = frozenset(),
                   paid: frozenset[str] = frozenset()) -> Snapshot:
    """`jobs`: pending jobs (the demand) plus, optionally, starting/running ones (their submit
    times feed the reuse forecast, as every arrival does in the simulator). `view`, the
    daemon's memory across passes (QueueView): its arrival log is updated here and used for
    the forecast, and a job whose record is unchanged since the last pass is not looked at
    again. `requeued`: jobs slurmscale requeued off an interrupted node; while Slurm holds
    them back (BeginTime, or no reason yet) they are still demand that is about to need
    capacity. `paid`: nodes whose instance runs in a capacity reservation."""
    if view is not None:
        view.valid_for(cfg)
    views = _node_views(cfg, nodes, jobs, paid, view)
    by_partition = {p.partition: p for p in cfg.pools}
    # partition list -> (pool name, its other pools, max nodes, GPUs a node), or None: not
    # slurmscale's (a queue has few partition lists; looked up once each)
    pool_of: dict[tuple[str, ...], tuple[str, tuple[str, ...], int, int] | None] = {}
    pending: list[PendingJob] = []
    arrivals: list[tuple[float, str, int]] = []
    window = max((p.policy.reuse_window_s for p in cfg.pools), default=3600.0)
    todo, running_tasks = _to_work_out(jobs, view, requeued)
    kept = view._jobs if view is not None else None
    times, missing = reading.time_memo(), reading._MISSING  # (looked up before slurm_time)
    for j in todo:
        # (every changed job: each QueueJob unpacked once, not read field by field)
        (job_id, partitions, num_nodes, gpus, limit, submit_time, reason, priority, _user,
         state, _account, _resv, _end, _nodes, _start, _expected, array_job, tasks,
         throttle) = j
        if partitions in pool_of:
            seen = pool_of[partitions]
        else:
            seen = pool_of[partitions] = _pool_for(partitions, by_partition)
        if seen is None:
            if kept is not None:
                kept.give(job_id, None)
                kept.redo.discard(job_id)
            continue
        pool_name, also, max_nodes, pool_gpus = seen
        got = times.get(submit_time, missing)
        submitted = slurm_time(submit_time) if got is missing else cast(float | None, got)
        submit = submitted or now
        # (a pending array line: every task is an arrival; the log keys tasks by line)
        arrival = (submit, pool_name, num_nodes * min(tasks, max_nodes))
        if submit >= now - window:  # (no pool's forecast looks further back)
            if view is None:
                arrivals.append(arrival)
            else:
                view.log(job_id, arrival)
        demand = None
        if state == "PENDING":  # (running or starting: an arrival, not demand)
            startable = tasks
            if throttle:
                startable = max(0, min(tasks, throttle - running_tasks[array_job]))
            demand = PendingJob(
                job_id, pool_name, num_nodes, gpus or pool_gpus, limit, submit, priority,
                counts(reason, job_id in requeued, priority, startable), also, tasks,
                startable)
            if kept is None:
                pending.append(demand)
        if kept is not None:
            kept.give(job_id, demand)
            # what it gives hangs on more than its record: worked out again next pass
            if submitted and job_id not in requeued:
                kept.redo.discard(job_id)
            else:
                kept.redo.add(job_id)
    if view is None:
        return Snapshot(now=now, pools=knobs(cfg), nodes=tuple(views), jobs=tuple(pending),
                        memory=dict(memory or {}), arrivals=tuple(sorted(arrivals)))
    snap = Snapshot(now=now, pools=view.knobs, nodes=tuple(views),
                    jobs=view._jobs.in_order(jobs), memory=dict(memory or {}),
                    arrivals=view.recent(now - window), tallies=view.book.tallies(),
                    near=view.book.near())
    if view_check.checking():  # (the view against a rebuild: daemon/view_check.py)
        view_check.compare(snap, build_snapshot(cfg, nodes, jobs, now, memory, None,
                                                requeued, paid))
    return snap
