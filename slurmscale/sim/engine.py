"""Discrete-event simulation: a simulated Slurm and cloud driven by the real policy code.

Simulated Slurm: jobs in priority order (submit time) with backfill (any later job that fits
starts); single-node jobs are packed onto nodes by GPUs (best fit); gangs take whole idle
nodes, all at once. A job placed on powered-down nodes powers them up (as Slurm's
ResumeProgram does) and starts when the last of them has booted. Governed and naive pools may
only have `target` nodes live. Simulated cloud: a boot delay, the pool cap, a price per
node-hour from the first second of boot to release.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field

from slurmscale.policy.model import (
    ActionKind,
    Mode,
    NodeState,
    NodeView,
    PendingJob,
    PoolMemory,
    Snapshot,
)
from slurmscale.policy.reservations import GangJob, Hold, HoldActionKind, plan_holds
from slurmscale.sim.policies import SimPolicy
from slurmscale.sim.trace import TraceJob

SUBMIT, READY, END, TICK = 0, 1, 2, 3  # same-time order: arrivals first, policy last


@dataclass
class _Node:
    name: str
    gpus: int
    state: str = "down"  # down | booting | up
    ready_at: float = 0.0
    free: int = 0
    jobs: int = 0
    idle_since: float | None = None
    on_since: float = 0.0
    resv: str | None = None  # held in this reservation: only its job may use it
    free_at: float = 0.0  # latest end of its running jobs (the trace's durations stand in
    # for time limits, which the traces do not have)


@dataclass
class SimResult:
    policy: str
    jobs: int = 0
    jobs_completed: int = 0
    waits: list[float] = field(default_factory=list)
    gang_waits: list[float] = field(default_factory=list)
    busy_gpu_s: float = 0.0
    on_gpu_s: float = 0.0
    node_on_s: float = 0.0
    scale_up_actions: int = 0
    scale_down_actions: int = 0
    node_launches: int = 0
    reservations_created: int = 0
    reservation_idle_gpu_s: float = 0.0
    end_s: float = 0.0
    timeline: list[tuple[float, int, int]] = field(default_factory=list)  # t, demand, live GPUs


@dataclass(frozen=True)
class SimCloud:
    boot_s: float = 300.0
    price_per_node_hour: float = 98.32
    tick_s: float = 60.0
    # With nothing running or arriving, stop when the policy has changed nothing this long.
    give_up_after_s: float = 7 * 86400.0


class Simulation:
    def __init__(self, jobs: list[TraceJob], policy: SimPolicy, cloud: SimCloud) -> None:
        self.jobs = jobs
        self.p = policy
        self.k = policy.knobs
        self.cloud = cloud
        self.nodes = [_Node(f"n{i + 1}", self.k.gpus_per_node) for i in range(self.k.max_nodes)]
        self.by_name = {n.name: n for n in self.nodes}
        self.pending: dict[int, TraceJob] = {}
        self.pending_views: dict[int, PendingJob] = {}
        self.future_events = 0  # queued events other than the policy tick
        self.last_event_at = 0.0
        self.placed: dict[int, list[tuple[_Node, int]]] = {}
        self.start: dict[int, float] = {}
        self.ev: list[tuple[float, int, int, int]] = []
        self.seq = itertools.count()
        self.memory = PoolMemory(self.k.max_nodes if self.k.mode is Mode.IMMEDIATE
                                 else self.k.min_nodes)
        self.arrivals: deque[tuple[float, str, int]] = deque()
        self.r = SimResult(policy.name)
        self.running_gpus = 0
        self.last_launch_batch: float | None = None
        self.holds: tuple[Hold, ...] = ()
        self.exhausted: set[str] = set()  # jobs whose hold ran out: never held for again
        self.attached: dict[int, str] = {}  # pending job -> the reservation it is pointed at
        self.started_in: dict[str, str] = {}  # job id -> reservation it started in
        self.idx_of = {j.job_id: i for i, j in enumerate(jobs)}

    # --- bookkeeping ---------------------------------------------------------------------
    def _push(self, t: float, kind: int, idx: int) -> None:
        if kind != TICK:
            self.future_events += 1
        heapq.heappush(self.ev, (t, kind, next(self.seq), idx))

    def _live(self) -> int:
        return sum(1 for n in self.nodes if n.state != "down")

    def _power_up(self, n: _Node, now: float) -> None:
        n.state, n.ready_at, n.free, n.on_since = "booting", now + self.cloud.boot_s, n.gpus, now
        n.idle_since = None
        self.r.node_launches += 1
        if self.last_launch_batch != now:
            self.r.scale_up_actions += 1
            self.last_launch_batch = now
        self._push(n.ready_at, READY, self.nodes.index(n))

    def _power_down(self, n: _Node, now: float) -> None:
        self.r.node_on_s += now - n.on_since
        n.state, n.idle_since, n.jobs, n.free = "down", None, 0, 0

    # --- the simulated Slurm ---------------------------------------------------------------
    def _place(self, idx: int, job: TraceJob, now: float, headroom: int) -> int:
        """Place one job if it fits; returns the nodes powered up (-1 if not placed)."""
        gpn = job.gpus_per_node(self.k.gpus_per_node)
        if job.nodes > self.k.max_nodes or gpn > self.k.gpus_per_node:
            return -1
        resv = self.attached.get(idx)
        if resv is not None:  # pointed at its reservation: runs there, on nothing else
            headroom = 0
        live = [n for n in self.nodes if n.state != "down" and n.resv == resv]
        if job.nodes == 1:
            fits = [n for n in live if n.free >= gpn]
            if fits:
                chosen = [min(fits, key=lambda n: (n.free, n.state != "up", n.name))]
                new: list[_Node] = []
            elif headroom >= 1:
                chosen = new = [next(n for n in self.nodes if n.state == "down")]
            else:
                return -1
        else:
            whole = [n for n in live if n.jobs == 0 and n.free == n.gpus]
            whole.sort(key=lambda n: (n.state != "up", n.name))
            need = job.nodes - len(whole)
            if need <= 0:
                chosen, new = whole[:job.nodes], []
            elif need <= headroom:
                new = [n for n in self.nodes if n.state == "down"][:need]
                chosen = whole + new
            else:
                return -1
        for n in new:
            self._power_up(n, now)
        start = max([now] + [n.ready_at for n in chosen if n.state == "booting"])
        for n in chosen:
            n.free -= gpn
            n.jobs += 1
            n.idle_since = None
            n.free_at = max(n.free_at if n.jobs > 1 else 0.0, start + job.duration_s)
        self.placed[idx] = [(n, gpn) for n in chosen]
        self.start[idx] = start
        if resv is not None:
            self.started_in[job.job_id] = self.attached.pop(idx)
        self._push(start + job.duration_s, END, idx)
        self.running_gpus += gpn * job.nodes
        return len(new)

    def _schedule(self, now: float) -> None:
        if not self.pending:
            return
        target = self.memory.target if self.k.mode is Mode.GOVERNED else self.k.max_nodes
        headroom = max(0, min(target, self.k.max_nodes) - self._live())

        def capacity() -> tuple[int, int]:
            live = [n for n in self.nodes if n.state != "down" and n.resv is None]
            return (max((n.free for n in live), default=0),
                    sum(1 for n in live if n.jobs == 0))

        for idx in [i for i in self.attached if i in self.pending]:
            if self._place(idx, self.pending[idx], now, 0) >= 0:
                del self.pending[idx]
                del self.pending_views[idx]
        max_free, whole = capacity()
        for idx, job in list(self.pending.items()):
            if idx in self.attached:
                continue
            if headroom == 0 and max_free == 0:
                return
            gpn = job.gpus_per_node(self.k.gpus_per_node)
            if job.nodes == 1 and gpn > max_free and headroom < 1:
                continue
            if job.nodes > 1 and job.nodes > whole + headroom:
                continue
            used = self._place(idx, job, now, headroom)
            if used >= 0:
                del self.pending[idx]
                del self.pending_views[idx]
                headroom -= used
                max_free, whole = capacity()

    # --- the policy ----------------------------------------------------------------------
    def _snapshot(self, now: float) -> Snapshot:
        views = []
        for n in self.nodes:
            if n.state == "down":
                st = NodeState.POWERED_DOWN
            elif n.resv is not None and not n.jobs:
                st = NodeState.RESERVED
            elif n.jobs:
                st = NodeState.ALLOCATED
            elif n.state == "booting":
                st = NodeState.BOOTING
            else:
                st = NodeState.IDLE
            views.append(NodeView(n.name, self.k.name, st, n.idle_since,
                                  alloc_gpus=n.gpus - n.free if n.state != "down" else 0,
                                  free_at=n.free_at if n.jobs else None))
        jobs = tuple(self.pending_views.values())
        while self.arrivals and self.arrivals[0][0] < now - self.k.reuse_window_s:
            self.arrivals.popleft()
        return Snapshot(now, (self.k,), tuple(views), jobs, {self.k.name: self.memory},
                        tuple(self.arrivals))

    def _hold_pass(self, now: float, snap: Snapshot) -> bool:
        """The same reservation planner the daemon runs, on the simulated Slurm. True when
        any hold changed."""
        assert self.p.holds is not None
        # priority: earlier submit first, as the simulated Slurm schedules
        jobs = [GangJob(v.job_id, self.k.name, v.nodes, v.gpus_per_node, v.submit_s,
                        -int(v.submit_s), "user", reservation=self.attached.get(i, ""))
                for i, v in self.pending_views.items() if v.nodes >= 2]
        for h in self.holds:
            i = self.idx_of[h.job_id]
            if i in self.start and h.job_id in self.started_in:  # started (still running)
                jobs.append(GangJob(h.job_id, self.k.name, h.needed, 0, 0, 0, "user",
                                    pending=False, reservation=self.started_in[h.job_id]))
        plan = plan_holds(self.p.holds, {self.k.name: self.k.gpus_per_node},
                          {self.k.name: self.k.max_nodes}, snap.nodes, tuple(jobs),
                          self.holds, frozenset(self.exhausted), now,
                          frozenset(n.name for n in self.nodes if n.resv is not None))
        before = {h.name: h for h in self.holds}
        for a in plan.actions:
            if a.kind is HoldActionKind.CREATE:
                self.r.reservations_created += 1
            if a.kind in (HoldActionKind.CREATE, HoldActionKind.EXTEND):
                for name in a.nodes:
                    self.by_name[name].resv = a.name
            elif a.kind is HoldActionKind.ATTACH:
                self.attached[self.idx_of[a.job_id]] = a.name
            elif a.kind is HoldActionKind.RELEASE:
                for n in self.nodes:
                    if n.resv == a.name:
                        n.resv = None
                self.attached.pop(self.idx_of[a.job_id], None)
                self.started_in.pop(a.job_id, None)
                old = before.get(a.name)
                if old is not None:
                    spent = old.spent_gpu_s + (0.0 if old.attached else len(old.nodes)
                                               * self.k.gpus_per_node * (now - old.accounted_s))
                    self.r.reservation_idle_gpu_s += spent
                if "budget" in a.reason or "hold time" in a.reason:
                    self.exhausted.add(a.job_id)
        self.holds = plan.holds
        return bool(plan.actions)

    def _tick(self, now: float) -> None:
        snap = self._snapshot(now)
        if self.p.holds is not None and self._hold_pass(now, snap):
            snap = self._snapshot(now)  # nodes changed hands: the policy must see it
        plan = self.p.decide(snap)
        self.memory = plan.memory.get(self.k.name, self.memory)
        released = [a for a in plan.actions if a.kind is ActionKind.RELEASE]
        for a in released:
            for name in a.nodes:
                n = self.by_name[name]
                if n.state == "up" and n.jobs == 0:  # the policy must never pick a busy node
                    self._power_down(n, now)
        if released:
            self.r.scale_down_actions += 1
        if self.p.provision_to_target:
            for n in self.nodes:
                if self._live() >= min(self.memory.target, self.k.max_nodes):
                    break
                if n.state == "down":
                    self._power_up(n, now)
        live_gpus = sum(n.gpus for n in self.nodes if n.state != "down")
        demand = self.running_gpus + sum(j.gpus for j in self.pending.values())
        self.r.timeline.append((now, demand, live_gpus))

    # --- the loop ------------------------------------------------------------------------
    def run(self) -> SimResult:
        for i, j in enumerate(self.jobs):
            self._push(j.submit_s, SUBMIT, i)
        if self.p.all_up_from_start:
            for n in self.nodes:
                self._power_up(n, 0.0)
        self._push(0.0, TICK, -1)
        outstanding = len(self.jobs)
        now = 0.0
        while self.ev:
            now, kind, _, idx = heapq.heappop(self.ev)
            if kind != TICK:
                self.future_events -= 1
                self.last_event_at = now
            if kind == SUBMIT:
                job = self.jobs[idx]
                self.pending[idx] = job
                self.pending_views[idx] = PendingJob(
                    job.job_id, self.k.name, job.nodes, job.gpus_per_node(self.k.gpus_per_node),
                    job.duration_s, job.submit_s)
                if not job.carry_in:
                    self.arrivals.append((now, self.k.name, job.nodes))
            elif kind == READY:
                n = self.nodes[idx]
                if n.state == "booting" and n.ready_at == now:
                    n.state = "up"
                    if n.jobs == 0:
                        n.idle_since = now
            elif kind == END:
                job = self.jobs[idx]
                for n, g in self.placed.pop(idx):
                    n.free += g
                    n.jobs -= 1
                    if n.jobs == 0:
                        n.idle_since = now
                self.running_gpus -= job.gpus_per_node(self.k.gpus_per_node) * job.nodes
                outstanding -= 1
                self._record(idx, job, now)
            else:
                self._tick(now)
                quiet_for = now - self.last_event_at
                if outstanding and (self.future_events or (
                        self._tick_can_help() and quiet_for < self.cloud.give_up_after_s)):
                    self._push(now + self.cloud.tick_s, TICK, -1)
            self._schedule(now)
        self._finish(now)
        return self.r

    def _tick_can_help(self) -> bool:
        """With nothing running, arriving or booting, only a policy step (a governed target
        rising) can still start a pending job; otherwise the simulation is over."""
        return (self.k.mode is Mode.GOVERNED and self.memory.target < self.k.max_nodes
                and any(j.nodes <= self.k.max_nodes for j in self.pending.values()))

    def _record(self, idx: int, job: TraceJob, now: float) -> None:
        start = self.start.pop(idx)
        g = job.gpus_per_node(self.k.gpus_per_node) * job.nodes
        self.r.busy_gpu_s += g * (now - start)
        if not job.carry_in:
            self.r.jobs_completed += 1
            self.r.waits.append(start - job.submit_s)
            if job.nodes >= 2:
                self.r.gang_waits.append(start - job.submit_s)

    def _finish(self, now: float) -> None:
        self.r.end_s = now
        self.r.jobs = sum(1 for j in self.jobs if not j.carry_in)
        for job in self.pending.values():  # never started: censored at the end
            if not job.carry_in:
                self.r.waits.append(now - job.submit_s)
                if job.nodes >= 2:
                    self.r.gang_waits.append(now - job.submit_s)
        for h in self.holds:  # still holding at the end: count what it spent so far
            self.r.reservation_idle_gpu_s += h.spent_gpu_s
        for n in self.nodes:
            if n.state != "down":
                self._power_down(n, now)
        self.r.on_gpu_s = self.r.node_on_s * self.k.gpus_per_node


def simulate(jobs: list[TraceJob], policy: SimPolicy, cloud: SimCloud) -> SimResult:
    return Simulation(jobs, policy, cloud).run()
