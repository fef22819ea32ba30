"""The simulated slurmctld's job priorities (`scheduler.py`'s SimSlurmctld holds one): each
pending job's multifactor priority (age, job size, fair-share: `slurm_model.py`'s factors),
recalculated every PriorityCalcPeriod as slurmctld does, the value squeue and sprio show,
and the pending jobs in priority order, kept in order as jobs start and enter between
calculations. In the greedy model earlier submits rank higher."""

from __future__ import annotations

import bisect
from typing import Protocol

from slurmscale.sim.slurm_model import FairShare, SlurmModel, factors, size_share
from slurmscale.sim.state import SimState
from slurmscale.sim.trace import TraceJob
from slurmscale.sim.world import Node


class Queue(Protocol):
    """What the priorities read of the simulated slurmctld (scheduler.SimSlurmctld)."""

    st: SimState
    sched: SlurmModel
    greedy: bool
    jobs: list[TraceJob]
    pending: dict[int, TraceJob]
    placed: dict[int, list[tuple[Node, int]]]
    eligible_at: dict[int, float]
    bf_dirty: bool


class SimPriorities:
    def __init__(self, ctld: Queue) -> None:
        self.ctld = ctld
        self.prio: dict[int, float] = {}  # per pending job, recomputed every calc period
        # per pending job: its priority as squeue and sprio show it, kept as it changes (the
        # simulated squeue looks every pending job's up each daemon pass): the Slurm model's
        # multifactor value, never below 1 for a queued job that is not held; in the greedy
        # model earlier submits rank higher
        self.shown: dict[int, int] = {}
        self.factors: dict[int, tuple[float, float, float]] = {}  # age, size, fair-share
        self.fairshare = FairShare(ctld.sched.priority_decay_half_life)
        self.size: dict[int, float] = {}  # a job's size share (its size, the cluster's: fixed)
        self.next_calc = 0.0
        self.order: list[int] | None = None  # pending jobs by priority (None: to sort)

    def by_priority(self, now: float) -> list[int]:
        """Pending jobs, highest priority first (ties: submitted first). Priorities are
        recomputed every PriorityCalcPeriod, as slurmctld does."""
        if now >= self.next_calc:
            self.recalc(now)
        return self.ordered()

    def ordered(self) -> list[int]:
        """Pending jobs by their priorities as last calculated (ties: submitted first);
        sorted again after each calculation, kept in order as jobs start and enter."""
        if self.order is None:
            self.order = sorted(self.ctld.pending, key=self.rank)
        return self.order

    def rank(self, idx: int) -> tuple[float, int]:
        return -self.prio[idx], idx

    def recalc(self, now: float) -> None:
        ctld = self.ctld
        m = ctld.sched
        self.next_calc = now + m.priority_calc_period
        if m.priority_weight_fairshare:
            running: dict[str, float] = {}
            for idx, placed in ctld.placed.items():
                u = ctld.jobs[idx].user
                running[u] = running.get(u, 0.0) + sum(g for _, g in placed)
            self.fairshare.accrue(now, running)
        for idx in ctld.pending:
            self.prioritise(idx, now)
        self.order = None
        ctld.bf_dirty = True  # a new order may let backfill start other jobs

    def prioritise(self, idx: int, now: float) -> None:
        """Pending job `idx`'s priority calculated now, and as squeue shows it (never below
        1 for a queued job that is not held)."""
        self.prio[idx] = p = self.priority(idx, now)
        self.shown[idx] = max(1, int(p))

    def priority(self, idx: int, now: float) -> float:
        """Job `idx`'s priority now (its weighted factors kept for `sprio`)."""
        ctld = self.ctld
        job = ctld.jobs[idx]
        if job.priority is not None:
            self.factors.pop(idx, None)
            return job.priority
        m = ctld.sched
        fs = self.fairshare.factor(job.user) if m.priority_weight_fairshare else 0.0
        size = self.size.get(idx)
        if size is None:
            gpn = ctld.st.main.gpus_per_node
            size = self.size[idx] = size_share(job.nodes, job.gpus_per_node(gpn) * job.nodes,
                                               ctld.st.cluster_nodes, gpn)
        f = self.factors[idx] = factors(m, now - ctld.eligible_at.get(idx, job.submit_s),
                                        size, fs)
        return sum(f)

    def enter(self, idx: int, now: float) -> None:
        """A job enters the queue (submitted or requeued): it gets a priority now, and its
        place in the order."""
        ctld = self.ctld
        if ctld.greedy:
            self.shown[idx] = 10**10 - int(ctld.jobs[idx].submit_s)
            return
        self.fairshare.see(ctld.jobs[idx].user)
        self.prioritise(idx, now)
        if self.order is not None:  # (a new list, as a start makes)
            order = self.order.copy()
            bisect.insort(order, idx, key=self.rank)
            self.order = order

    def leave(self, idx: int) -> None:
        """A job started: out of the queue's priorities and its order."""
        self.prio.pop(idx, None)
        self.shown.pop(idx, None)
        self.factors.pop(idx, None)
        if self.order is not None:  # (a new list: a scheduler run may be walking the old)
            order = self.order.copy()
            order.remove(idx)
            self.order = order
