"""Reservations that accumulate nodes for a large pending gang job: pure decisions.

Where a pool cannot grow (at `max_nodes`, or every other node is taken), small jobs take each
node that frees up and a gang can wait forever. For the highest-priority gang that has waited
`accumulate_after_s`, cannot be given new capacity now, and whose start Slurm's backfill does
not plan or keeps pushing back (`hold_verdict`), slurmscale holds a reservation of
its own (named with its prefix) and adds the pool's idle and powered-down nodes to it, and
busy ones as they drain; once it holds the gang's node count the job is pointed at it and
starts. A hold costs idle GPU time, so
each reservation has a budget in idle GPU-hours and a maximum hold time; it is released at
once when either is spent or its job is cancelled, held, finished or started elsewhere. A job
whose hold ran out is not held for again: the budget is per job, not per attempt.

The daemon and the simulator run this same function.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Literal, NamedTuple

from slurmscale.hostlists import node_order_key
from slurmscale.policy.limit_use import UNLEARNED
from slurmscale.policy.model import NodeState, NodeView, gang_order


@dataclass(frozen=True)
class ReservationKnobs:
    """The planner's settings, and the one copy of their defaults (the config's
    ReservationSettings takes them)."""

    enabled: bool = True
    prefix: str = "slurmscale-gang-"
    min_gang_nodes: int = 2
    accumulate_after_s: float = 600.0
    per_pool: int = 1
    hold_budget_gpu_hours: float = 64.0
    max_hold_s: float = 5400.0
    # the Slurm reservation outlives the hold's maximum by this much, so slurmscale deletes it
    # (it never expires under a job about to start); Slurm's backfill sees its nodes taken
    # until then
    end_margin_s: float = 600.0
    # hold busy nodes for the shortfall too (they drain into it)
    drain_busy: bool = True
    # share of a time limit jobs typically run; "auto": learned per pool (policy/limit_use)
    limit_use: float | Literal["auto"] = "auto"


class GangJob(NamedTuple):
    """A queued job as the reservation planner needs it (pending or running). A NamedTuple:
    one is built per multi-node job every pass (tens of thousands), and a frozen dataclass's
    __init__ costs ~5 us of the pass each."""

    job_id: str
    pool: str
    nodes: int
    gpus_per_node: int
    submit_s: float
    priority: int
    user: str
    account: str = ""
    pending: bool = True
    waiting_for_capacity: bool = True  # pending reason is Resources/Priority-like
    held: bool = False  # JobHeld*, priority 0: nothing will start it
    reservation: str = ""
    # pending: when Slurm's backfill plans to start it (squeue's StartTime; None: no plan),
    # and the earliest plan seen for it since the daemon started (a later one: it slipped)
    expected_start_s: float | None = None
    first_expected_s: float | None = None
    # when its age factor alone ranks it above the jobs that overtook it (policy/standing.py;
    # None: never, or not read: sprio is read only for a gang whose plan slipped)
    age_lift_s: float | None = None


@dataclass(frozen=True)
class Hold:
    """One of slurmscale's reservations and what it has cost so far."""

    name: str
    pool: str
    job_id: str
    user: str
    needed: int
    nodes: tuple[str, ...]
    created_s: float
    spent_gpu_s: float = 0.0
    accounted_s: float = 0.0
    attached: bool = False


class HoldActionKind(StrEnum):
    CREATE = "create"
    EXTEND = "extend"  # the full new node list (Slurm 22.05 refuses Nodes+=)
    ATTACH = "attach"  # scontrol update jobid=... reservation=...
    RELEASE = "release"


@dataclass(frozen=True)
class HoldAction:
    kind: HoldActionKind
    name: str
    pool: str
    job_id: str
    reason: str
    nodes: tuple[str, ...] = ()
    user: str = ""
    account: str = ""
    exhausted: bool = False  # RELEASE for its budget or time: the job is never held for again


@dataclass(frozen=True)
class Skip:
    """A gang that has waited long enough and gets no hold this pass, and why."""

    job_id: str
    pool: str
    reason: str


@dataclass(frozen=True)
class HoldPlan:
    actions: tuple[HoldAction, ...]
    holds: tuple[Hold, ...]  # after this plan: accounting updated, released ones dropped
    grabbed: frozenset[str] = field(default_factory=frozenset)  # idle nodes newly reserved
    skipped: tuple[Skip, ...] = ()


# a held node the gang can start on: idle in the reservation, or powered down (Slurm powers
# it up for the job)
READY_IN_HOLD = frozenset({NodeState.RESERVED, NodeState.POWERED_DOWN})


def _clock(t: float, now: float) -> str:
    return f"in {t - now:.0f}s"


def slipped(k: ReservationKnobs, j: GangJob) -> bool:
    """Backfill's plan for `j` is later than the earliest it made by more than a gang is
    left to wait before a hold: jobs keep overtaking it."""
    return (j.expected_start_s is not None and j.first_expected_s is not None
            and j.expected_start_s - j.first_expected_s > k.accumulate_after_s)


def earliest_plan(j: GangJob, seen: dict[str, float]) -> GangJob:
    """Pending gang `j` with the earliest start backfill has planned for it so far (`seen`:
    job id -> that start, updated here; the caller forgets the jobs no longer pending)."""
    if not j.pending:
        return j
    if j.expected_start_s is not None:
        first = seen[j.job_id] = min(seen.get(j.job_id, j.expected_start_s),
                                     j.expected_start_s)
        return j._replace(first_expected_s=first)
    if j.job_id in seen:
        return j._replace(first_expected_s=seen[j.job_id])
    return j


def limit_use_of(k: ReservationKnobs, pool: str, learned: Mapping[str, float]) -> float:
    """The share of their limits `pool`'s jobs run: the config's, or (auto) what was
    learned for the pool (policy/limit_use.py), 1.0 before that."""
    return learned.get(pool, UNLEARNED) if k.limit_use == "auto" else k.limit_use


def hold_verdict(k: ReservationKnobs, j: GangJob, gather_s: float | None,
                 now: float, use: float | None = None) -> tuple[bool, str]:
    """Whether to hold nodes for gang `j` now, and why in words. `gather_s`: when a hold
    taken now would have the gang's nodes, by the running jobs' time limits (None: unknown,
    a job without a limit). A hold that would not gather them within max_hold_s (the
    remaining limits scaled by `use`, the share of them jobs here typically run; None:
    `limit_use_of` with nothing learned) runs out first: its idle cost buys nothing, and the
    gang is never held for again.

    A hold helps only where Slurm would not start the gang as soon by itself. Slurm's
    backfill plans each job it tests at its earliest start by the running jobs' time limits,
    and keeps lower-priority jobs off the nodes it planned: a gang with a stable plan needs
    nothing (a plan later than what a hold could gather means jobs of higher priority come
    first, as they should), and a hold would only idle nodes and push others back. A plan
    that slipped (jobs submitted later keep ranking above it) or no plan at all (beyond
    bf_window or bf_max_job_test, or jobs without limits ahead) is where the gang can wait
    forever. Measured: tests/benchmarks/hold_sweep, docs/policy.md."""
    if use is None:
        use = limit_use_of(k, j.pool, {})
    if gather_s is not None and use * (gather_s - now) > k.max_hold_s:
        return False, (f"a hold could not gather its {j.nodes} nodes within max_hold_s "
                       f"({k.max_hold_s:.0f}s): the soonest-free are free "
                       f"{_clock(gather_s, now)} by their jobs' time limits"
                       + ("" if use == 1 else
                          f", {use * (gather_s - now):.0f}s at limit_use {use:.2g}"))
    t = j.expected_start_s
    if t is None:
        return True, "Slurm's backfill has no plan for it"
    if slipped(k, j):
        slip = f"its planned start slipped by {t - (j.first_expected_s or t):.0f}s"
        if j.age_lift_s is not None and j.age_lift_s - now <= k.accumulate_after_s:
            return False, (f"{slip}, but its age factor ranks it above the jobs that "
                           f"overtook it {_clock(max(now, j.age_lift_s), now)}")
        return True, f"{slip} (now {_clock(t, now)}): jobs keep overtaking it"
    return False, f"Slurm's backfill plans to start it {_clock(t, now)}"


def reservation_name(k: ReservationKnobs, job_id: str) -> str:
    return f"{k.prefix}{job_id}"


def _release_reason(k: ReservationKnobs, h: Hold, job: GangJob | None,
                    now: float) -> tuple[str, bool] | None:
    """Why the hold ends now, and whether it spent its budget or time (then the job is never
    held for again), or None to keep it."""
    if job is None:
        return f"job {h.job_id} is no longer queued (finished or cancelled)", False
    if not job.pending:
        if job.reservation == h.name:
            return f"job {h.job_id} started in it", False
        return f"job {h.job_id} started elsewhere", False
    if job.held:
        return f"job {h.job_id} is held", False
    if h.attached:
        return None  # the job is about to start on the held nodes: no budget cut now
    if h.spent_gpu_s / 3600.0 >= k.hold_budget_gpu_hours:
        return (f"hold budget spent: {h.spent_gpu_s / 3600.0:.1f} of "
                f"{k.hold_budget_gpu_hours:g} idle GPU-hours", True)
    if now - h.created_s >= k.max_hold_s:
        return f"maximum hold time {k.max_hold_s:.0f}s reached", True
    return None


def _may_hold(k: ReservationKnobs, max_nodes: Mapping[str, int], j: GangJob) -> bool:
    """What makes gang `j` one a hold could be for, whatever the clock: pending for
    capacity, not held, in no reservation, of a size its pool can hold."""
    return (j.pending and not j.held and j.waiting_for_capacity and not j.reservation
            and k.min_gang_nodes <= j.nodes <= max_nodes.get(j.pool, 0))


class RankedGangs:
    """Per pool, the gangs a hold could be for whatever the clock (`_may_hold`), in
    priority order, kept as gangs come and go (`swap`): the daemon's queue view keeps them
    from pass to pass, so the hold planner takes the highest ones without walking and
    sorting every gang in the queue each pass."""

    def __init__(self, k: ReservationKnobs, max_nodes: Mapping[str, int],
                 jobs: Iterable[GangJob] = ()) -> None:
        """`jobs`: the gangs to start with (ranked at once, not one by one)."""
        self.k, self.max_nodes = k, max_nodes
        # pool -> (rank, nodes, job id) of its gangs, in priority order
        self.by_pool: dict[str, list[tuple[tuple[int, float, str], int, str]]] = {}
        for j in jobs:
            if _may_hold(k, max_nodes, j):
                self.by_pool.setdefault(j.pool, []).append((gang_order(j), j.nodes, j.job_id))
        for ranked in self.by_pool.values():
            ranked.sort()

    def swap(self, old: GangJob | None, new: GangJob | None) -> None:
        """A gang was `old` and is `new` (None: none)."""
        for j, sign in ((old, -1), (new, 1)):
            if j is None or not _may_hold(self.k, self.max_nodes, j):
                continue
            ranked, key = self.by_pool.setdefault(j.pool, []), gang_order(j)
            if sign > 0:
                bisect.insort(ranked, (key, j.nodes, j.job_id))
            else:
                del ranked[bisect.bisect_left(ranked, (key,))]  # (its own rank)


def plan_holds(k: ReservationKnobs, gpus_per_node: dict[str, int], max_nodes: dict[str, int],
               nodes: tuple[NodeView, ...], jobs: tuple[GangJob, ...],
               holds: tuple[Hold, ...], exhausted: frozenset[str], now: float,
               reserved: frozenset[str] = frozenset(),
               limit_use: Mapping[str, float] | None = None,
               ranked: RankedGangs | None = None,
               order: TakeOrder | None = None) -> HoldPlan:
    """`exhausted`: jobs whose hold was already released for budget or time; never again.
    `reserved`: nodes in any reservation (an admin's included): never taken. `limit_use`:
    each pool's learned share of its limits a job runs (for `limit_use: auto`). `ranked`:
    `jobs`' gangs a hold could be for, ranked per pool as they came and went (None: ranked
    here); `order`: the nodes a hold may take as last worked out (None: worked out here)."""
    if not holds and not (k.enabled and any(
            j.pending and j.nodes >= k.min_gang_nodes
            and now - j.submit_s >= k.accumulate_after_s for j in jobs)):
        return HoldPlan((), (), frozenset())  # nothing held, no gang has waited long enough
    by_job = {j.job_id: j for j in jobs}
    p = _Planner(k, gpus_per_node, nodes, set(reserved) | {n for h in holds for n in h.nodes},
                 now, limit_use or {}, order)
    for h in sorted(holds, key=lambda h: h.name):
        p.carry_on(h, by_job.get(h.job_id))
    if k.enabled:
        p.new_holds(by_job, ranked or RankedGangs(k, max_nodes, jobs), exhausted)
    return HoldPlan(tuple(p.actions), tuple(p.kept), frozenset(p.grabbed), tuple(p.skipped))


def _drain_order(n: NodeView) -> tuple[float, int]:
    return (n.free_at if n.free_at is not None else math.inf, n.alloc_gpus)


Takeable = tuple[dict[str, list[str]], dict[str, list[NodeView]], dict[str, list[str]]]


def _takeable(nodes: tuple[NodeView, ...], taken: set[str]) -> Takeable:
    """Per pool, in node order, the nodes a hold may take: idle ones, busy ones in the order
    they will drain, powered-down ones (Slurm powers them up for a job that starts in a
    reservation holding them, at no idle cost meanwhile)."""
    free: dict[str, list[str]] = {}
    busy: dict[str, list[NodeView]] = {}
    down: dict[str, list[str]] = {}
    for n in sorted(nodes, key=lambda n: node_order_key(n.name)):
        if n.name in taken:
            continue
        if n.state is NodeState.IDLE and n.usable and not n.held:
            free.setdefault(n.pool, []).append(n.name)
        elif n.state is NodeState.ALLOCATED and n.usable and not n.held:
            busy.setdefault(n.pool, []).append(n)
        elif n.state is NodeState.POWERED_DOWN and n.usable:
            down.setdefault(n.pool, []).append(n.name)
    for pool in busy:  # the soonest free by their jobs' time limits drain first
        # (then the fewest GPUs in use, then node order: the stable sort keeps the order
        # they came in, which is node order)
        busy[pool].sort(key=_drain_order)
    return free, busy, down


class TakeOrder:
    """`_takeable` as last made, made again only when the node views or the nodes already
    taken changed: the daemon's queue view keeps one from pass to pass, and most passes
    plan from the very views of the last (the snapshot keeps a node's view while its record
    and jobs stand). The planner gets its own dicts; it never edits a list in place (it
    takes from one by putting a shorter one in its place)."""

    def __init__(self) -> None:
        self._made: tuple[tuple[NodeView, ...], set[str], Takeable] | None = None

    def of(self, nodes: tuple[NodeView, ...], taken: set[str]) -> Takeable:
        made = self._made
        if made is None or made[0] != nodes or made[1] != taken:
            made = self._made = (nodes, taken, _takeable(nodes, taken))
        free, busy, down = made[2]
        return dict(free), dict(busy), dict(down)


class _Planner:
    """One planning of the holds: the nodes still free to take (idle ones, busy ones in the
    order they will drain), and what has been decided so far."""

    def __init__(self, k: ReservationKnobs, gpus_per_node: dict[str, int],
                 nodes: tuple[NodeView, ...], taken: set[str], now: float,
                 limit_use: Mapping[str, float], order: TakeOrder | None = None) -> None:
        self.k, self.gpus_per_node, self.now = k, gpus_per_node, now
        self.limit_use = limit_use
        self.view = {n.name: n for n in nodes}
        self.free, self.busy, self.down = (_takeable(nodes, taken) if order is None
                                           else order.of(nodes, taken))
        self.grabbed: set[str] = set()
        self.actions: list[HoldAction] = []
        self.kept: list[Hold] = []
        self.skipped: list[Skip] = []

    def gather_at(self, pool: str, count: int) -> float | None:
        """When a hold taken now would hold `count` drained nodes: idle nodes now, busy ones
        as their jobs' time limits end (None: unknown: a job without a time limit, busy
        nodes not drained, or too few nodes to take now)."""
        short = count - len(self.free.get(pool, [])) - len(self.down.get(pool, []))
        if short <= 0:
            return self.now
        if not self.k.drain_busy or len(self.busy.get(pool, [])) < short:
            return None  # idle nodes come by chance, or more may come back: unknown
        return self.busy[pool][short - 1].free_at

    def take(self, pool: str, count: int) -> list[str]:
        """Idle nodes first, then powered-down ones (a gang the pool's idle and
        powered-down nodes could start is left to Slurm, so a hold is short of busy nodes as
        well: without its powered-down share it could never hold the gang's count); the rest
        of the shortfall from busy nodes, which then drain into the reservation (their jobs
        finish, nothing new starts there): with small jobs packed onto every node, waiting
        for whole nodes to fall idle by chance can take forever."""
        free, busy, down = self.free, self.busy, self.down
        got = free.get(pool, [])[:max(0, count)]
        free[pool] = free.get(pool, [])[len(got):]
        off = down.get(pool, [])[:max(0, count - len(got))]
        down[pool] = down.get(pool, [])[len(off):]
        got += off
        if self.k.drain_busy and len(got) < count:
            more = busy.get(pool, [])[:count - len(got)]
            busy[pool] = busy.get(pool, [])[len(more):]
            got += [n.name for n in more]
        self.grabbed.update(got)
        return got

    def swap_draining(self, h: Hold) -> Hold:
        """A full hold whose nodes still drain takes nodes that fell idle outside it instead
        of the ones that will free last (by their time limits): the gang can use an idle
        node now, and the draining one goes back to the jobs it runs."""
        view = self.view
        draining = sorted((view[n] for n in h.nodes
                           if n in view and view[n].state is NodeState.ALLOCATED),
                          key=lambda v: (-(v.free_at if v.free_at is not None else math.inf),
                                         node_order_key(v.name)))
        idle_out = self.free.get(h.pool, [])
        swaps = list(zip(draining, idle_out, strict=False))
        if not swaps:
            return h
        out = {v.name for v, _ in swaps}
        came = [n for _, n in swaps]
        self.free[h.pool] = idle_out[len(swaps):]
        self.grabbed.update(came)
        h = replace(h, nodes=tuple(sorted([n for n in h.nodes if n not in out] + came,
                                          key=node_order_key)))
        self.actions.append(HoldAction(
            HoldActionKind.EXTEND, h.name, h.pool, h.job_id,
            f"{len(came)} node(s) fell idle: held instead of {len(out)} still draining "
            f"({', '.join(sorted(out, key=node_order_key))}) for job {h.job_id}", h.nodes))
        return h

    def idle_gpus(self, h: Hold) -> int:
        """The held GPUs idling now (a powered-down node's cost nothing)."""
        view = self.view
        return sum(max(0, self.gpus_per_node.get(h.pool, 0) - (view[n].alloc_gpus if n in view
                                                               else 0)) for n in h.nodes
                   if n not in view or view[n].state is not NodeState.POWERED_DOWN)

    def carry_on(self, h: Hold, job: GangJob | None) -> None:
        """An existing hold: its idle time accounted, released when its time is up, else
        grown towards its gang's size, its draining nodes swapped for idle ones, attached to
        its job once it holds every node drained."""
        now = self.now
        if not h.attached:
            h = replace(h, spent_gpu_s=h.spent_gpu_s
                        + self.idle_gpus(h) * max(0.0, now - h.accounted_s))
        h = replace(h, accounted_s=now)
        if job is not None and job.nodes != h.needed:  # e.g. a hold adopted after a restart
            h = replace(h, needed=job.nodes)
        ending = _release_reason(self.k, h, job, now)
        if ending is not None:
            why, spent = ending
            self.actions.append(HoldAction(HoldActionKind.RELEASE, h.name, h.pool, h.job_id,
                                           why, h.nodes, exhausted=spent))
            return
        if not h.attached and len(h.nodes) < h.needed:
            more = self.take(h.pool, h.needed - len(h.nodes))
            if more:
                h = replace(h, nodes=tuple(sorted((*h.nodes, *more), key=node_order_key)))
                self.actions.append(HoldAction(
                    HoldActionKind.EXTEND, h.name, h.pool, h.job_id,
                    f"{len(more)} more node(s): holding {len(h.nodes)} of {h.needed} "
                    f"for job {h.job_id}", h.nodes))
        elif not h.attached:
            h = self.swap_draining(h)
        drained = all(self.view[n].state in READY_IN_HOLD for n in h.nodes
                      if n in self.view)
        if not h.attached and len(h.nodes) >= h.needed and drained:
            h = replace(h, attached=True)
            self.actions.append(HoldAction(HoldActionKind.ATTACH, h.name, h.pool, h.job_id,
                                           f"holds all {h.needed} nodes: job {h.job_id} "
                                           "pointed at it", h.nodes))
        self.kept.append(h)

    def new_holds(self, jobs: Mapping[str, GangJob], ranked: RankedGangs,
                  exhausted: frozenset[str]) -> None:
        """Per pool, up to `per_pool` holds for the highest-priority gangs that have waited
        long enough and that the pool cannot start now; the first gang the rule turns down
        stops the pool's list (a hold for a lower one would take what backfill planned for
        it)."""
        k, now, kept = self.k, self.now, self.kept
        held_jobs = {h.job_id for h in kept} | {a.job_id for a in self.actions}
        for pool in sorted(self.gpus_per_node):
            if sum(1 for h in kept if h.pool == pool) >= k.per_pool:
                continue
            # taken from the top of the pool's ranked gangs (`ranked`: kept as they came and
            # went), as far as the rule goes; a gang the pool can start now is passed over
            # first, before it is even looked up (most of them, where nodes are free)
            room = len(self.free.get(pool, [])) + len(self.down.get(pool, []))
            for _, nodes, job_id in ranked.by_pool.get(pool, ()):
                if nodes <= room:
                    continue  # the pool can start it now: Slurm (and the policy) will
                j = jobs[job_id]
                if (now - j.submit_s < k.accumulate_after_s or job_id in held_jobs
                        or job_id in exhausted):
                    continue  # not waited long enough, held already, or its hold spent
                if sum(1 for h in kept if h.pool == pool) >= k.per_pool:
                    break
                hold, why = hold_verdict(k, j, self.gather_at(pool, j.nodes), now,
                                         limit_use_of(k, pool, self.limit_use))
                if not hold:
                    # lower-priority gangs wait too: a hold for one would take the nodes
                    # backfill planned for this one
                    self.skipped.append(Skip(j.job_id, pool, why))
                    break
                if not self._create(j, pool, why):
                    break  # nothing to hold yet: the highest-priority gang waits for it
                room = len(self.free.get(pool, [])) + len(self.down.get(pool, []))

    def _create(self, j: GangJob, pool: str, why: str) -> bool:
        """A hold for gang `j` with what can be taken now (False: nothing to take)."""
        now = self.now
        got = sorted(self.take(pool, j.nodes), key=node_order_key)
        if not got:
            return False
        name = reservation_name(self.k, j.job_id)
        h = Hold(name, pool, j.job_id, j.user, j.nodes, tuple(got), now, 0.0, now)
        self.actions.append(HoldAction(
            HoldActionKind.CREATE, name, pool, j.job_id,
            f"job {j.job_id} ({j.nodes} nodes) has waited {now - j.submit_s:.0f}s and "
            f"the pool cannot grow for it ({why}): holding {len(got)} of {j.nodes} "
            "node(s)",
            h.nodes, j.user, j.account))
        if len(got) >= j.nodes and not any(
                self.view[n].state is NodeState.ALLOCATED for n in got):
            h = replace(h, attached=True)
            self.actions.append(HoldAction(HoldActionKind.ATTACH, name, pool, j.job_id,
                                           f"holds all {j.nodes} nodes: job {j.job_id} "
                                           "pointed at it", h.nodes))
        self.kept.append(h)
        return True
