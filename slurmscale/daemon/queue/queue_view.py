"""What the daemon keeps of Slurm's queue between passes, behind one call: `QueueView.read`
gives a pass's QueueState (the Snapshot the pool-size decision takes, the gangs the hold
planner takes, its ranking of them and the nodes it may take), worked out afresh only for
the records that changed since the last pass. A rebuild is a fresh view's first read
(`QueueView()`: the CLI, `plan --live`, the check mode), so a one-shot command and the daemon
take one path, and each per-record rule (daemon/queue/observe.py) is written once.

Why kept: at 50,000 jobs a pass that works every record out again costs what the queue's
length makes it cost; kept, it costs what changed (issue 44). What a job's view depends on
beyond its record is either part of the key (the config object, the clock's eras),
followed (a throttled array's line is worked out again when its array's running tasks
change), or never remembered (a job slurmscale requeued, a submit time Slurm does not
give). With `SLURMSCALE_CHECK_VIEW=1` every read is compared with a rebuild
(daemon/queue/view_check.py)."""

from __future__ import annotations

import bisect
import itertools
import operator
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, NamedTuple, TypeGuard, TypeVar

from slurmscale import timeframe
from slurmscale.config import Config, Pool
from slurmscale.daemon.queue import observe, view_check
from slurmscale.daemon.queue.knobs import hold_knobs, knobs
from slurmscale.model import QueueJob, QueueRead, SlurmNode
from slurmscale.policy.demand import DemandBook
from slurmscale.policy.model import NodeView, PendingJob, PoolKnobs, PoolMemory, Snapshot
from slurmscale.policy.observe import running_ends, slurm_time
from slurmscale.policy.reservations import (
    GangJob,
    RankedGangs,
    ReservationKnobs,
    TakeOrder,
    earliest_plan,
)
from slurmscale.slurm.kv import starts_over

V = TypeVar("V")
_job_id = operator.attrgetter("job_id")
_arrival, _job_of_arrival = operator.itemgetter(0, 1, 2), operator.itemgetter(3)
Arrival = tuple[float, str, int]  # (submit, pool, nodes)


@dataclass(frozen=True, slots=True)
class QueueState:
    """A pass's reading of the queue and the nodes: what its decisions take."""

    snapshot: Snapshot  # the pool-size decision's input (policy/decide.py)
    gangs: tuple[GangJob, ...]  # the hold planner's, each with its earliest backfill plan
    hold_knobs: ReservationKnobs  # the config's, as the planner takes them
    ranked: RankedGangs  # per pool, the gangs a hold could be for, in priority order
    take_order: TakeOrder  # the nodes a hold may take, made again when the nodes change


class Changes(NamedTuple):
    todo: list[QueueJob]  # the records to work out this pass
    came: list[QueueJob]  # the records new since last pass (new jobs, changed ones)
    went: list[QueueJob]  # the records let go (jobs gone, the old records of changed ones)


class PerJob(Generic[V]):
    """What each job in the queue gave last pass, the record it was made from, and the read
    it is current with. A pass works out afresh only the records that changed: told by the
    read itself (QueueRead: the squeue parse's account of what it parsed and what it no
    longer saw) when the memory is current with the read it is relative to, else found by
    walking the records against the kept ones (the simulated Slurm keeps its records; any
    other list). Then the pass's result, in squeue's order, is looked up job by job without
    a loop of slurmscale's own (`in_order`)."""

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

    def give(self, job_id: str, value: V | None, again: bool = False) -> None:
        """What the job gives now (None: nothing); `again`: it hangs on more than its
        record, so it is worked out again next pass."""
        was = self.made.pop(job_id, None) if value is None else self.made.get(job_id)
        if value is not None:
            self.made[job_id] = value
        if again:
            self.redo.add(job_id)
        else:
            self.redo.discard(job_id)
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
        if self._told_by(jobs):
            changed = jobs.changed
            if jobs.dropped:
                came = set(map(_job_id, changed))
                for j in jobs.dropped:
                    if records.get(j.job_id) is j:
                        let_go.append(records.pop(j.job_id))
                        if j.job_id not in came:
                            self.give(j.job_id, None)
        else:
            changed = list(itertools.compress(jobs, self._not_kept(jobs)))
            for j in changed:
                old = records.pop(j.job_id, None)
                if old is not None:
                    let_go.append(old)
            if len(records) + len(changed) != len(jobs):  # (some kept jobs are gone)
                for job_id in records.keys() - set(map(_job_id, jobs)):
                    let_go.append(records.pop(job_id))
                    self.give(job_id, None)
        self.read = jobs.serial if isinstance(jobs, QueueRead) else None
        todo = {j.job_id: j for j in changed}
        for j in changed:
            records[j.job_id] = j
        redo = self.redo
        if let_go:  # (a job gone; a changed job's the caller settles, as it gives anew)
            redo.difference_update(j.job_id for j in let_go if j.job_id not in records)
        for job_id in (*redo, *also):
            if job_id not in todo and job_id in records:
                todo[job_id] = records[job_id]
        return Changes(list(todo.values()), changed, let_go)

    def changed(self, jobs: list[QueueJob]) -> int:
        """How many of the records are new or changed since those kept: told by the read
        itself where it follows the one kept, else counted in C."""
        if self._told_by(jobs):
            return len(jobs.changed)
        return sum(self._not_kept(jobs))

    def _told_by(self, jobs: list[QueueJob]) -> TypeGuard[QueueRead]:
        """The read says what changed since the one these are current with."""
        return (isinstance(jobs, QueueRead) and self.read is not None
                and jobs.since == self.read)

    def _not_kept(self, jobs: list[QueueJob]) -> Iterator[bool]:
        """Per record, whether it is not the very one kept (in C: every job every pass)."""
        return map(operator.is_not, map(self.records.get, map(_job_id, jobs)), jobs)

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


class _NodeMade(NamedTuple):
    """A node's record, its view (None: no pool's), and what of the running jobs' ends and
    the paid nodes the view was made with (None: nothing)."""

    record: SlurmNode
    view: NodeView | None
    made_with: tuple[float | None, int | None, bool] | None


class _Arrivals:
    """The arrival log (job id -> submit, pool, nodes): a job that already finished is gone
    from squeue but still counts as an arrival within the reuse forecast's window. Kept in
    time order as jobs come (no sort of the whole log)."""

    def __init__(self) -> None:
        self.by_job: dict[str, Arrival] = {}
        self._by_time: list[tuple[float, str, int, str]] = []  # (submit, pool, nodes, job)
        self._sorted: tuple[Arrival, ...] = ()  # the log's, while unchanged
        self._logged = False  # the log changed since `_sorted` was made

    def log(self, job_id: str, arrival: Arrival) -> None:
        old = self.by_job.get(job_id)
        if old != arrival:
            by_time = self._by_time
            if old is not None:
                del by_time[bisect.bisect_left(by_time, (*old, job_id))]
            bisect.insort(by_time, (*arrival, job_id))
            self.by_job[job_id] = arrival
            self._logged = True

    def since(self, since: float) -> tuple[Arrival, ...]:
        """The arrivals logged at or after `since`, sorted; older ones let go (from the
        front of the time order). Made again only when the log changed."""
        by_time = self._by_time
        cut = bisect.bisect_left(by_time, (since,))
        if cut:
            for job_id in map(_job_of_arrival, by_time[:cut]):
                del self.by_job[job_id]
            del by_time[:cut]
            self._logged = True
        if self._logged:
            self._sorted, self._logged = tuple(map(_arrival, by_time)), False
        return self._sorted


class QueueView:
    """The queue and the nodes as the daemon's passes saw them, kept from one pass to the
    next: what each record gave is given again while Slurm prints the same record (the
    squeue parse hands back the very record for an unchanged line; the simulated Slurm
    keeps its records), and worked out afresh for those that changed. What the decisions
    take from the whole queue is kept up to date the same way, job by job: the pools'
    pending demand summed up (`DemandBook`, policy/demand.py: `decide` reads its tallies
    and does not walk the queue), the gangs a hold could be for ranked per pool
    (`RankedGangs`), each pending gang's earliest backfill plan (a later one has slipped),
    the running jobs' ends, the node views."""

    def __init__(self) -> None:
        self._arrivals = _Arrivals()
        self._plans: dict[str, float] = {}  # pending gang -> its earliest backfill plan
        self._cfg: Config | None = None  # the config the views were made under
        self._eras = 0  # the host clock's steps when they were made
        self._knobs: tuple[PoolKnobs, ...] = ()
        self._hold_knobs = ReservationKnobs()
        self._max_nodes: dict[str, int] = {}
        self._take_order = TakeOrder()
        self._gangs_made: tuple[list[QueueJob], frozenset[str], tuple[GangJob, ...]] | None \
            = None  # the last `gangs`: for these records and `also`
        self._fresh = True  # no read yet: a rebuild (never checked against itself)
        self.forget()

    def forget(self) -> None:
        """Every job's and node's view (not the arrival log): the next pass reads the whole
        queue (after a pass failed part-way, its records kept, what they give not)."""
        self._book = DemandBook(k.name for k in self._knobs)
        self._ranked = RankedGangs(self._hold_knobs, self._max_nodes)
        self._jobs: PerJob[PendingJob] = PerJob(self._book.swap)
        self._gangs: PerJob[GangJob] = PerJob(self._ranked.swap)
        self._gangs_made = None
        # array job -> its tasks running or starting; array job -> its `%N` lines
        self._array_running: Counter[str] = Counter()
        self._throttled: dict[str, dict[str, QueueJob]] = {}
        self._running: dict[str, QueueJob] = {}  # job id -> its record, the running jobs
        self._ends: tuple[dict[str, float], dict[str, int]] = ({}, {})
        self._ends_read: int | None = None  # the QueueRead the ends are current with
        self._nodes: dict[str, _NodeMade] = {}
        self._nodes_under: tuple[object, frozenset[str]] | None = None

    def kept(self) -> frozenset[str]:
        """The jobs whose records or views the view keeps: the last read's, no more (a
        fresh or forgotten view: none)."""
        return frozenset().union(*(m.records.keys() | m.made.keys()
                                   for m in (self._jobs, self._gangs)))

    @property
    def arrivals(self) -> Mapping[str, Arrival]:
        """The arrival log: job id -> (submit, pool, nodes), within the forecast's window."""
        return MappingProxyType(self._arrivals.by_job)

    @property
    def plans(self) -> Mapping[str, float]:
        """Each pending gang's earliest backfill plan seen (a later one: it slipped)."""
        return MappingProxyType(self._plans)

    def read(self, cfg: Config, nodes: list[SlurmNode], jobs: list[QueueJob], now: float,
             memory: Mapping[str, PoolMemory] | None = None,
             requeued: frozenset[str] = frozenset(),
             paid: frozenset[str] = frozenset(),
             also: frozenset[str] = frozenset()) -> QueueState:
        """A pass's QueueState. `jobs`: pending jobs (the demand) plus starting/running ones
        (their submit times feed the reuse forecast; their ends, the node views);
        `requeued`: jobs slurmscale requeued off an interrupted node (while Slurm holds
        them back - BeginTime, or no reason yet - still demand about to need capacity);
        `paid`: nodes whose instance runs in a capacity reservation; `also`: see `gangs`."""
        check, self._fresh = view_check.checking() and not self._fresh, False
        self._valid_for(cfg)
        gangs = self.gangs(cfg, jobs, also)
        views = self._node_views(cfg, nodes, jobs, paid)
        window = max((p.policy.reuse_window_s for p in cfg.pools), default=3600.0)
        self._pending(cfg, jobs, now, window, requeued)
        snap = Snapshot(now=now, pools=self._knobs, nodes=tuple(views),
                        jobs=self._jobs.in_order(jobs), memory=dict(memory or {}),
                        arrivals=self._arrivals.since(now - window),
                        tallies=self._book.tallies(), near=self._book.near())
        state = QueueState(snap, gangs, self._hold_knobs, self._ranked, self._take_order)
        if check:  # (against a rebuild: view_check.py)
            plain = QueueView().read(cfg, nodes, jobs, now, memory, requeued, paid, also)
            view_check.compare(snap, plain.snapshot, gangs, plain.gangs)
        return state

    def gangs(self, cfg: Config, jobs: list[QueueJob], also: frozenset[str] = frozenset()
              ) -> tuple[GangJob, ...]:
        """The jobs the reservation planner considers, each pending one with the earliest
        start backfill planned for it so far: multi-node jobs, and any job in `also` (the
        jobs slurmscale already holds nodes for, whatever their state). `read` gives them
        too; asked first (`plan`'s standings are made from them while the nodes are read),
        the same records give the same gangs without a second look."""
        self._valid_for(cfg)
        made = self._gangs_made
        if made is not None and made[0] is jobs and made[1] == also:
            return made[2]
        self._start_over_if_most_changed(jobs)
        keep, plans = self._gangs, self._plans
        first = not keep.records  # (a fresh view: ranked at once, after)
        if first:
            keep.told = None
        todo, _, went = keep.todo(jobs, also)
        by_partition = observe.gang_pools(cfg)
        pool_of: dict[tuple[str, ...], Pool | None] = {}  # (a queue has few lists)
        for j in todo:
            if j.partitions in pool_of:
                pool = pool_of[j.partitions]
            else:
                pool = pool_of[j.partitions] = next(
                    (by_partition[p] for p in j.partitions if p in by_partition), None)
            if pool is None or (j.num_nodes < 2 and j.job_id not in also):
                keep.give(j.job_id, None)
                continue
            # (a single-node job in `also`: looked at again next pass)
            keep.give(j.job_id, earliest_plan(observe.gang(j, pool), plans),
                      again=j.num_nodes < 2)
        # a gang gone, started or no longer one: its earliest plan forgotten (after a fresh
        # fill, the jobs that left meanwhile are in no list: every plan is looked at)
        for job_id in (list(plans) if first else (*map(_job_id, todo), *map(_job_id, went))):
            now_made = keep.made.get(job_id)
            if (now_made is None or not now_made.pending) and job_id in plans:
                del plans[job_id]
        if first:  # (then kept gang by gang as they change)
            self._ranked = RankedGangs(self._hold_knobs, self._max_nodes, keep.made.values())
            keep.told = self._ranked.swap
        out = keep.in_order(jobs)
        self._gangs_made = (jobs, also, out)
        return out

    def _start_over_if_most_changed(self, jobs: list[QueueJob]) -> None:
        """Forget every job's view when most records changed since the last pass (each
        PriorityCalcPeriod changes every pending job's line; kv.starts_over, the squeue
        parse's memo's rule): what is kept is then worth less than it costs to bring up to
        date job by job - each change taken out of the tallies and the rankings and put
        back - and a fresh view fills them at once."""
        kept = self._jobs
        if kept.records and starts_over(kept.changed(jobs), len(jobs)):
            self.forget()

    def _valid_for(self, cfg: Config) -> None:
        """Forget the views made under another config or before the host's clock stepped
        (Slurm's times read into the daemon's frame differently since). The config itself
        is kept, so that its identity cannot pass to another one."""
        eras = len(timeframe.FRAME.eras)
        if cfg is not self._cfg or eras != self._eras:
            self._cfg, self._eras = cfg, eras
            self._knobs, self._hold_knobs = knobs(cfg), hold_knobs(cfg)
            self._max_nodes = {p.name: p.max_nodes for p in cfg.pools}
            self.forget()

    def _arrays(self, came: list[QueueJob], went: list[QueueJob]) -> list[QueueJob]:
        """After these records came and went, the array tasks running or starting brought
        up to date, by array job; returns the throttled array lines (`%N`) to work out
        again, as what they may start moved with those running (their records unchanged)."""
        running, throttled = self._array_running, self._throttled
        moved: set[str] = set()
        for sign, records in ((-1, went), (1, came)):
            for j in records:
                if not j.array_job:
                    continue
                if j.array_throttle:
                    lines = throttled.setdefault(j.array_job, {})
                    if sign > 0:
                        lines[j.job_id] = j
                    elif lines.get(j.job_id) is j:
                        del lines[j.job_id]
                if j.state != "PENDING":
                    moved.add(j.array_job)
                    running[j.array_job] += sign
                    if not running[j.array_job]:
                        del running[j.array_job]
        return [j for a in moved for j in throttled.get(a, {}).values()]

    def _ends_of(self, jobs: list[QueueJob]) -> tuple[dict[str, float], dict[str, int]]:
        """running_ends, again only when a running job's record changed: the running jobs
        brought up to date from what the read says changed, when it follows the one they
        were taken from (no walk of the queue), else found by walking the queue."""
        if (isinstance(jobs, QueueRead) and jobs.since is not None
                and jobs.since == self._ends_read):
            # (only a running job's NodeList is read)
            came = [j for j in jobs.changed if j.nodelist]
            went = [j for j in jobs.dropped if j.nodelist]
            if came or went:
                by_id = self._running
                for j in went:
                    if by_id.get(j.job_id) is j:
                        del by_id[j.job_id]
                by_id.update((j.job_id, j) for j in came)
                self._ends = running_ends(list(by_id.values()))
            self._ends_read = jobs.serial
            return self._ends
        running = [j for j in jobs if j.nodelist]
        if len(running) != len(self._running) or any(
                a is not b for a, b in zip(running, self._running.values(), strict=True)):
            self._running = {j.job_id: j for j in running}
            self._ends = running_ends(running)
        self._ends_read = jobs.serial if isinstance(jobs, QueueRead) else None
        return self._ends

    def _node_views(self, cfg: Config, nodes: list[SlurmNode], jobs: list[QueueJob],
                    paid: frozenset[str]) -> list[NodeView]:
        """The pools' nodes as the policy sees them: a node whose record is the same as
        last pass's keeps last pass's view while no running job changed and the paid nodes
        are the same, or, when they changed, while what the view took from them is the same
        for that node (a job started or ended elsewhere)."""
        ends = free_at, job_gpus = self._ends_of(jobs)
        under = (ends, paid)
        last, same = self._nodes, self._nodes_under == under
        self._nodes_under = under
        fresh: dict[str, _NodeMade] = {}
        views: list[NodeView] = []
        pool_of_node = cfg.pool_of
        for n in nodes:  # (every node every pass: the kept view first)
            name = n.name
            hit = last.get(name)
            if hit is not None and hit.record is n and (
                    same or hit.made_with is None
                    or hit.made_with == (free_at.get(name), job_gpus.get(name), name in paid)):
                fresh[name] = hit
                if hit.view is not None:
                    views.append(hit.view)
                continue
            pool = pool_of_node(name)
            if pool is None:
                fresh[name] = _NodeMade(n, None, None)
                continue
            with_ = (free_at.get(name), job_gpus.get(name), name in paid)
            v = observe.node_view(n, pool, *with_)
            views.append(v)
            fresh[name] = _NodeMade(n, v, with_)
        self._nodes = fresh
        return views

    def _to_work_out(self, jobs: list[QueueJob], requeued: frozenset[str]
                     ) -> list[QueueJob]:
        """The records whose demand to work out: those whose record changed, or that hang
        on more than it (`redo`, `requeued`, a throttled array whose running tasks moved).
        (A line changed in its priority alone is worked out in full: a shortcut for it
        paid nothing measurable, tests/benchmarks/pass_mix.py.)"""
        kept = self._jobs
        todo, came, went = kept.todo(jobs, requeued)
        again = self._arrays(came, went)
        if again:
            todo = list({j.job_id: j for j in (*todo, *again)}.values())
        return todo

    def _pending(self, cfg: Config, jobs: list[QueueJob], now: float, window: float,
                 requeued: frozenset[str]) -> None:
        """Each changed record's demand and arrival (observe.demand, observe.arrival)."""
        by_partition = {p.partition: p for p in cfg.pools}
        pool_of: dict[tuple[str, ...], observe.PoolOf | None] = {}  # (a queue has few)
        kept, log = self._jobs, self._arrivals.log
        first = not kept.records  # (a fresh view: the book made at once, after)
        if first:
            kept.told = None
        for j in self._to_work_out(jobs, requeued):
            if j.partitions in pool_of:
                pool = pool_of[j.partitions]
            else:
                pool = pool_of[j.partitions] = observe.pool_for(j.partitions, by_partition)
            if pool is None:
                kept.give(j.job_id, None)
                continue
            submitted = slurm_time(j.submit_time)
            submit = submitted or now
            if submit >= now - window:  # (no pool's forecast looks further back)
                log(j.job_id, observe.arrival(j, pool, submit))
            requeued_now = j.job_id in requeued
            # what it gives hangs on more than its record: worked out again next pass
            kept.give(j.job_id, observe.demand(j, pool, submit, requeued_now,
                                               self._array_running[j.array_job]),
                      again=not submitted or requeued_now)
        if first:  # (then kept job by job as they change)
            self._book = DemandBook.of((k.name for k in self._knobs), kept.made.values())
            kept.told = self._book.swap


def build_snapshot(cfg: Config, nodes: list[SlurmNode], jobs: list[QueueJob], now: float,
                   memory: Mapping[str, PoolMemory] | None = None,
                   requeued: frozenset[str] = frozenset(),
                   paid: frozenset[str] = frozenset()) -> Snapshot:
    """The Snapshot of a one-shot reading (the CLI): a fresh view's first read, the
    daemon's path."""
    return QueueView().read(cfg, nodes, jobs, now, memory, requeued, paid).snapshot


def gang_jobs(cfg: Config, jobs: list[QueueJob], also: frozenset[str] = frozenset()
              ) -> tuple[GangJob, ...]:
    """The gangs of a one-shot reading (`QueueView.gangs` of a fresh view)."""
    return QueueView().gangs(cfg, jobs, also)
