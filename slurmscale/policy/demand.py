"""A pool's pending demand (PoolDemand: jobs, GPU-hours, gangs in priority order, the longest
wait), worked out two ways that give the same value bit for bit:

- `pool_demand`: by walking the pool's pending jobs (a one-shot command, the simulator's
  other policies, any snapshot without tallies);
- `demand_of`: from a PoolTally, the pool's pending jobs summed up by a DemandBook that is
  told each job as it comes and goes. The daemon's queue view keeps the book from pass to
  pass (daemon/queue_view.QueueView), so `decide` no longer walks the whole queue: a pass's
  cost follows what changed (issue 44).

Only jobs that may start now (`actionable`) count. Bit for bit: the GPU-seconds are summed as
integers, which is what the walk's float sum is whenever every time limit is a whole number
of seconds (Slurm's are whole minutes) and the total stays below 2**53; a tally with any other
limit says it is not exact, and `decide` walks that pool's jobs instead."""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

from slurmscale.policy.model import PendingJob, PoolDemand, PoolKnobs, PoolTally, gang_order


class Contribution(NamedTuple):
    """What one actionable pending job adds to its pool's tally: PoolTally's first nine
    fields, worked out by `contribution` alone. The walk sums it (`pending_nodes`), the
    DemandBook adds and takes it away as jobs come and go: each demand rule is written once,
    there."""

    tasks: int
    limited_gpu_s: int
    unlimited_gpus: int
    inexact: int
    multi_nodes: int
    single_gpus: int
    single_nodes: int
    gpus: int
    gang_tasks: int


def is_gang(j: PendingJob) -> bool:
    """A multi-node job: its nodes start together, all at once or none."""
    return j.nodes >= 2


def takes_whole_nodes(j: PendingJob) -> bool:
    """A gang, or a job without GPUs, takes whole nodes; a single-node GPU job's GPUs are
    packed onto nodes with others' (in a pool with GPUs)."""
    return is_gang(j) or not j.gpus_per_node


def contribution(j: PendingJob) -> Contribution:
    """The rules of what a pending job asks for: a line of an array counts its tasks
    (GPU-seconds, GPUs) and takes nodes for the tasks that may start now (`startable`); a
    time limit of whole seconds is summed as an integer (exact), one that is not is
    counted as such (`inexact`), a job without one takes the pool's default."""
    limit = j.time_limit_s or 0.0  # (None and 0: no limit)
    gpus = j.nodes * j.gpus_per_node * j.tasks
    whole = takes_whole_nodes(j)
    starts = j.nodes * j.startable
    exact = bool(limit) and float(limit).is_integer()
    return Contribution(
        j.tasks,
        j.nodes * j.gpus_per_node * int(limit) * j.tasks if exact else 0,
        0 if limit else gpus,
        1 if limit and not exact else 0,
        starts if whole else 0,
        0 if whole else j.gpus_per_node * j.startable,
        0 if whole else starts,
        gpus,
        j.tasks if is_gang(j) else 0)


def _gangs(knobs: PoolKnobs, order: Iterable[PendingJob]) -> tuple[tuple[str, int], ...]:
    """A gang line counts as many times as its tasks may start now, no more than the pool
    could hold."""
    out: list[tuple[str, int]] = []
    for j in order:  # (a loop, not a nested generator: a pool's thousands of gangs a pass)
        times = min(j.startable, max(1, knobs.max_nodes // j.nodes))
        if times == 1:
            out.append((j.job_id, j.nodes))
        elif times > 1:
            out += [(j.job_id, j.nodes)] * times
    return tuple(out)


def pool_demand(knobs: PoolKnobs, jobs: list[PendingJob], now: float) -> PoolDemand:
    """A pending array line counts as its tasks (GPU-hours, jobs); its gangs (multi-node
    tasks) as many as may start now, no more than the pool could hold."""
    act = [j for j in jobs if j.actionable]
    gpu_h = sum(j.nodes * j.gpus_per_node * (j.time_limit_s or knobs.default_time_limit_s)
                * j.tasks for j in act) / 3600.0
    # (only the gangs' order is used: the single-node jobs, most of a queue, go unsorted)
    order = sorted((j for j in act if is_gang(j)), key=gang_order)
    oldest = max((now - j.submit_s for j in act), default=0.0)
    return PoolDemand(sum(j.tasks for j in act), round(gpu_h, 6), _gangs(knobs, order),
                      max(0.0, oldest))


def pending_nodes(k: PoolKnobs, jobs: list[PendingJob]) -> int:
    """Nodes the pending jobs would fill if every one that may start now started
    (`contribution`'s nodes, summed; `tally_nodes` packs them)."""
    multi = single_gpus = single_nodes = 0
    for j in jobs:
        if j.actionable:
            c = contribution(j)
            multi += c.multi_nodes
            single_gpus += c.single_gpus
            single_nodes += c.single_nodes
    return _nodes(k, multi, single_gpus, single_nodes)


def _nodes(k: PoolKnobs, multi: int, single_gpus: int, single_nodes: int) -> int:
    """Whole nodes, and single-node jobs' GPUs packed onto nodes where the pool has GPUs
    (in a pool without, each such job takes its nodes whole); never more than the pool
    holds."""
    if not k.gpus_per_node:
        return min(k.max_nodes, multi + single_nodes)
    packed = math.ceil(single_gpus / k.gpus_per_node) if single_gpus else 0
    return min(k.max_nodes, multi + packed)


def gpu_seconds(k: PoolKnobs, t: PoolTally) -> int:
    """The GPU-seconds of a tally exact for `k`: each job's limit, or the pool's default."""
    return t.limited_gpu_s + t.unlimited_gpus * int(k.default_time_limit_s)


def demand_of(k: PoolKnobs, t: PoolTally, now: float) -> PoolDemand:
    """pool_demand's value from a tally that is exact for `k` (PoolTally.exact)."""
    gpu_s = gpu_seconds(k, t)
    oldest = now - t.oldest_submit if t.oldest_submit is not None else 0.0
    return PoolDemand(t.tasks, round(gpu_s / 3600.0, 6), _gangs(k, t.gangs),
                      max(0.0, oldest))


def tally_nodes(k: PoolKnobs, t: PoolTally) -> int:
    """pending_nodes' value from a tally."""
    return _nodes(k, t.multi_nodes, t.single_gpus, t.single_nodes)


class _Sums:
    """One pool's running sums, as jobs are added (sign 1) and taken away (sign -1)."""

    __slots__ = ("sums", "gangs", "submits", "oldest", "made")

    def __init__(self) -> None:
        self.sums = [0] * 9  # PoolTally's first nine fields
        self.gangs: list[tuple[tuple[int, float, str], PendingJob]] = []  # in priority order
        self.submits: Counter[float] = Counter()
        self.oldest: float | None = None  # the earliest submit while known (None: look)
        self.made: PoolTally | None = PoolTally()  # the tally, until the sums change

    def add(self, j: PendingJob, sign: int) -> None:
        s = self.sums
        for i, v in enumerate(contribution(j)):
            if v:
                s[i] += sign * v
        if is_gang(j):
            key = gang_order(j)
            if sign > 0:
                bisect.insort(self.gangs, (key, j))
            else:
                del self.gangs[bisect.bisect_left(self.gangs, (key,))]  # (its own key)
        submits, at = self.submits, j.submit_s
        submits[at] += sign
        if sign > 0:
            if self.oldest is not None and at < self.oldest:
                self.oldest = at
        elif not submits[at]:
            del submits[at]
            if at == self.oldest:
                self.oldest = None
        self.made = None

    def fill(self, jobs: list[PendingJob]) -> None:
        """Start from these jobs at once (a fresh book): what adding them one by one gives,
        in one sum and one sort."""
        self.sums = [sum(col) for col in zip(*map(contribution, jobs), strict=True)] \
            if jobs else [0] * 9
        self.gangs = sorted((gang_order(j), j) for j in jobs if is_gang(j))
        self.submits = Counter(j.submit_s for j in jobs)
        self.oldest, self.made = None, None

    def tally(self) -> PoolTally:
        if self.made is None:
            if self.oldest is None and self.submits:
                self.oldest = min(self.submits)
            n = self.sums
            self.made = PoolTally(n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7], n[8],
                                  tuple(j for _, j in self.gangs),
                                  self.oldest if self.submits else None)
        return self.made


_PRIORITY = PendingJob._fields.index("priority")


class DemandBook:
    """Every pool's tally of its actionable pending jobs, and of the other pools' that may
    also run in it, kept as jobs come and go (`swap`): what a pass asks of it costs what
    changed since the last (a pool's gangs sorted again only when its tally changed)."""

    def __init__(self, pools: Iterable[str]) -> None:
        self.own = {p: _Sums() for p in pools}
        self.also: dict[str, _Sums] = {}

    @classmethod
    def of(cls, pools: Iterable[str], jobs: Iterable[PendingJob]) -> DemandBook:
        """A book that starts from these jobs at once (a fresh queue view's first read): what
        swapping them in one by one gives (the view's check compares the two)."""
        book = cls(pools)
        own: dict[str, list[PendingJob]] = {p: [] for p in book.own}
        also: dict[str, list[PendingJob]] = {}
        for j in jobs:
            if j.actionable:
                own[j.pool].append(j)
                for other in j.also:
                    also.setdefault(other, []).append(j)
        for pool, mine in own.items():
            book.own[pool].fill(mine)
        for pool, theirs in also.items():
            book.also[pool] = _Sums()
            book.also[pool].fill(theirs)
        return book

    def swap(self, old: PendingJob | None, new: PendingJob | None) -> None:
        """A job's demand was `old` and is `new` (None: none). A single-node job whose new
        priority is all that changed changes no sum (only gangs are kept in priority order):
        each PriorityCalcPeriod moves every pending job's priority at once."""
        if (old is not None and new is not None and old.nodes < 2
                and old[:_PRIORITY] == new[:_PRIORITY]
                and old[_PRIORITY + 1:] == new[_PRIORITY + 1:]):
            return
        for j, sign in ((old, -1), (new, 1)):
            if j is None or not j.actionable:
                continue
            self.own[j.pool].add(j, sign)
            for other in j.also:
                self.also.setdefault(other, _Sums()).add(j, sign)

    def tallies(self) -> dict[str, PoolTally]:
        return {p: s.tally() for p, s in self.own.items()}

    def near(self) -> dict[str, PoolTally]:
        """Per pool, the tally of the other pools' jobs that may also run in it (pools
        with none left out)."""
        return {p: s.tally() for p, s in self.also.items() if s.submits}
