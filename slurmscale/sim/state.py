"""The simulation's state: the simulated cluster's nodes, the jobs queued, running and done,
the clocks and counters every part of the simulation reads and changes, and what happens to a
node as it powers up and down (`sim/engine.py` puts the parts together)."""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from dataclasses import replace

from slurmscale.config import Config, GraceSignal, SpotSettings
from slurmscale.daemon.observe import knobs
from slurmscale.policy.model import (
    BufferRule,
    Mode,
    NodeState,
    NodeView,
    PendingJob,
    PoolKnobs,
    PoolMemory,
)
from slurmscale.sim.daemon import MAIN_PREFIX, OD_PREFIX, DaemonDriver, sim_config
from slurmscale.sim.policies import SimPolicy
from slurmscale.sim.result import SimResult
from slurmscale.sim.slurm_model import FairShare, SchedulerKind, SlurmModel
from slurmscale.sim.trace import TraceJob
from slurmscale.sim.world import (
    NOT_RESPONDING,
    PERIODIC,
    READY,
    FailureModel,
    Node,
    PaidCapacity,
    SimCloud,
    SpotModel,
)


class SimState:
    """Built from the trace and the settings; the other parts of the simulation add what they
    do to it (`paid.py`, `scheduler.py`, `disruptions.py`, `other_policies.py`,
    `engine.py`)."""

    def __init__(self, jobs: list[TraceJob], policy: SimPolicy, cloud: SimCloud,
                 spot: SpotModel | None = None, paid: PaidCapacity | None = None,
                 slurm: SlurmModel | None = None, failures: FailureModel | None = None
                 ) -> None:
        self.sched = slurm or SlurmModel()
        self.failures = failures
        self.fail_rng = random.Random(failures.seed if failures else 0)
        self.greedy = self.sched.kind is SchedulerKind.GREEDY
        self.limit = self._limits(jobs)
        # Slurm kills a job at its limit (TIMEOUT): it runs no longer than that
        self.jobs = [replace(j, duration_s=lim) if lim < j.duration_s else j
                     for j, lim in zip(jobs, self.limit, strict=True)]
        self.policy = policy
        self.cloud = cloud
        self.spot = spot
        self.paid = paid or PaidCapacity()
        # slurmscale's daemon routes launches into the ODCR itself; the nodes powered up
        # since, whose instance it has not been asked where it went (`Simulation._routed`)
        self.routes_reserved = (policy.decide is None and paid is not None
                                and self.paid.routed_by_daemon())
        self.unrouted: list[Node] = []
        self._pools(policy, spot, paid is not None)
        self._bookkeeping()

    def _limits(self, jobs: list[TraceJob]) -> list[float]:
        """Each job's time limit as the model gives it (greedy: no limits, the run time
        stands in)."""
        if self.greedy:
            return [j.duration_s for j in jobs]
        return [self.sched.limit(j.duration_s, j.time_limit_s) for j in jobs]

    def _pools(self, policy: SimPolicy, spot: SpotModel | None, paid: bool) -> None:
        """The main pool and, with spot, its on-demand fallback, their nodes, and for
        slurmscale's policies the config the daemon will be given for them."""
        self.main = policy.knobs
        if paid:  # idle paid nodes: kept, as the daemon's knob says
            self.main = replace(self.main, release_paid_idle=False)
        self.pools: list[PoolKnobs] = [self.main]
        self.fallback: PoolKnobs | None = None
        self.nodes = [Node(f"{MAIN_PREFIX}{i + 1}", self.main.gpus_per_node, pool=self.main.name,
                            spot=spot is not None) for i in range(self.main.max_nodes)]
        if spot is not None and spot.on_demand_nodes:
            rule = ((BufferRule(self.main.name, spot.buffer, spot.warm_nodes),)
                    if spot.buffer or spot.warm_nodes else ())
            # The fallback runs in immediate mode: Slurm powers up its nodes per job.
            self.fallback = replace(self.main, name=f"{self.main.name}-od",
                                    max_nodes=spot.on_demand_nodes, min_nodes=0,
                                    mode=Mode.IMMEDIATE, buffer=rule)
            self.pools.append(self.fallback)
            self.nodes += [Node(f"{OD_PREFIX}{i + 1}", self.main.gpus_per_node,
                                pool=self.fallback.name) for i in range(spot.on_demand_nodes)]
        # slurmscale's policies: the daemon's own passes on the simulated Slurm, with the
        # config the daemon would be given (its pools' knobs are the ones simulated)
        self.daemon: DaemonDriver | None = None  # (built by the engine once all is set)
        self.daemon_config: Config | None = None
        if policy.decide is None:
            cfg = sim_config(self.main, policy.holds, self.fallback, SpotSettings(
                on_demand_buffer=spot.buffer, warm_on_demand_nodes=spot.warm_nodes,
                max_preemptions=spot.max_preemptions) if spot and self.fallback else None,
                spot.reclaim_backoff_s if spot else 180.0, self.paid if paid else None,
                GraceSignal(margin_s=spot.grace_margin_s)
                if spot and self.fallback and spot.grace_margin_s is not None else None)
            self.pools = list(knobs(cfg))
            self.main = self.pools[0]
            self.fallback = self.pools[1] if self.fallback is not None else None
            self.daemon_config = cfg

    def _bookkeeping(self) -> None:
        """What the event loop and the parts keep of the nodes, jobs and clocks."""
        jobs, spot = self.jobs, self.spot
        # every job is submitted to both partitions (-p spot,on-demand)
        self.also: tuple[str, ...] = (self.fallback.name,) if self.fallback is not None else ()
        self.nodes_of = {k.name: [n for n in self.nodes if n.pool == k.name] for k in self.pools}
        self.by_name = {n.name: n for n in self.nodes}
        self.touched: set[str] = set()  # nodes changed since the simulated Slurm last read them
        self.live_count = {k.name: 0 for k in self.pools}  # nodes not powered down, per pool
        self.cluster_nodes = len(self.nodes)  # what Slurm's job size factor divides by
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        self.down_views = [NodeView(n.name, n.pool, NodeState.POWERED_DOWN)
                           for n in self.nodes]
        self.pending: dict[int, TraceJob] = {}
        self.pending_views: dict[int, PendingJob] = {}
        self.future_events = 0  # queued events other than the policy tick
        self.last_event_at = 0.0
        self.placed: dict[int, list[tuple[Node, int]]] = {}
        self.start: dict[int, float] = {}
        self.agenda: list[tuple[float, int, int, int]] = []
        self.seq = itertools.count()
        self.memory = {k.name: PoolMemory(k.max_nodes if k.mode is Mode.IMMEDIATE
                                          else k.min_nodes) for k in self.pools}
        self.arrivals: deque[tuple[float, str, int]] = deque()
        self.result = SimResult(self.policy.name)
        self.node_runs: dict[str, list[tuple[float, float]]] = {}  # (the oracle's)
        self.running_gpus = 0
        self.last_launch_batch: float | None = None
        self.launches = 0  # launches so far (Node.launch)
        self.attached: dict[int, str] = {}  # pending job -> the reservation it is pointed at
        self.started_in: dict[str, str] = {}  # job id -> reservation it started in
        # each job's id as Slurm gives it (a number, in submission order: what squeue, sprio
        # and the resume hook's file all say), and back (the trace's ids are its own)
        self.slurm_ids = [str(i + 1) for i in range(len(jobs))]
        self.idx_of = {s: i for i, s in enumerate(self.slurm_ids)}
        # interruptions
        self.rng = random.Random(spot.seed if spot else 0)
        self.reclaim_rng = random.Random(self.paid.seed)
        self.stormed = False
        self.spot_down_until = -math.inf
        self.eligible_at: dict[int, float] = {}  # requeued jobs wait for Slurm's delay
        self.pending_since: dict[int, float] = {}  # requeued jobs: when they went back
        self.waited: dict[int, float] = {}  # time pending so far, over all runs
        self.preempted: dict[int, int] = {}
        self.signalled_at: dict[int, float] = {}  # running jobs Slurm signalled, and when
        self.steered: set[int] = set()  # preempted max_preemptions times: on-demand only
        # Slurm's priorities (slurm model): per pending job, recomputed every calc period
        self.prio: dict[int, float] = {}
        self.factors: dict[int, tuple[float, float, float]] = {}  # age, size, fair-share
        self.fairshare = FairShare(self.sched.priority_decay_half_life)
        self.next_calc = 0.0
        self.order: list[int] | None = None  # pending jobs by priority (None: to sort)
        self.bf_due = False  # a backfill event is queued
        self.main_wanted = False  # a main scheduler run is asked for, not yet queued
        self.sched_due = False  # a main scheduler run is queued (slurmctld's request count)
        self.last_main_run = -math.inf
        self.bf_dirty = True  # something changed since the last backfill cycle
        # backfill's planned start per pending job (squeue's StartTime for a pending job),
        # and what they were planned down to (None: to plan again, something changed)
        self.expected: dict[int, float] = {}
        self.planned_to: int | None = None

    @property
    def bf_dirty(self) -> bool:
        """Something changed that may let backfill start a job (and changes its plans)."""
        return self._bf_dirty

    @bf_dirty.setter
    def bf_dirty(self, value: bool) -> None:
        self._bf_dirty = value
        if value:
            self.planned_to = None

    def _push(self, t: float, kind: int, idx: int) -> None:
        if kind not in PERIODIC:
            self.future_events += 1
        heapq.heappush(self.agenda, (t, kind, next(self.seq), idx))

    def _live(self, pool: str) -> int:
        return self.live_count[pool]

    def new_launch(self) -> int:
        """An id for the nodes about to be powered up together (one launch)."""
        self.launches += 1
        return self.launches

    def _power_up(self, n: Node, now: float, paid: int | None = None, launch: int = 0) -> None:
        n.launch = launch or self.new_launch()
        n.state, n.ready_at, n.free, n.on_since = "booting", now + self.cloud.boot_s, n.gpus, now
        self.touched.add(n.name)
        self.live_count[n.pool] += 1
        n.idle_since = None
        n.paid = paid
        n.spot = self.spot is not None and n.pool == self.main.name and paid is None
        if self.routes_reserved and n.pool == self.main.name:
            self.unrouted.append(n)
        self.result.node_launches += 1
        if self.last_launch_batch != now:
            self.result.scale_up_actions += 1
            self.last_launch_batch = now
        self._push(n.ready_at, READY, self.node_index[n.name])

    def _power_down(self, n: Node, now: float) -> None:
        if n.failed_at is not None:  # the instance goes, and its hardware fault with it
            self._recovered(n, now)
        self.result.node_on_s += now - n.on_since
        if n.spot:
            self.result.spot_node_s += now - n.on_since
        if n.paid is not None:
            self.result.paid_node_s += now - n.on_since
        n.state, n.idle_since, n.jobs, n.free, n.paid = "down", None, 0, 0, None
        self.touched.add(n.name)
        self.live_count[n.pool] -= 1
        if self.daemon is not None:  # Slurm's suspend hook: the daemon terminates it
            self.daemon.suspend([n.name], now)

    def _vacate(self, idx: int, now: float) -> None:
        """A run is over (ended, requeued or killed): its nodes' GPUs are free again, and the
        work it did on paid capacity is counted."""
        start = self.start[idx]
        ran = max(0.0, now - start)
        self.signalled_at.pop(idx, None)  # (a signal is to one run)
        for m, g in self.placed.pop(idx):
            if ran and self.policy.offline_cost:  # the oracle's timeline of each node's runs
                self.node_runs.setdefault(m.name, []).append((start, now))
            m.free += g
            self.touched.add(m.name)
            m.jobs -= 1
            if m.jobs == 0 and m.state == "up":
                m.idle_since = now
            if m.paid is not None:
                self.result.paid_busy_gpu_s += g * ran

    def _recovered(self, n: Node, now: float) -> None:
        """A failed node's fault is over: replaced (powered down) or repaired by an admin."""
        assert n.failed_at is not None
        self.result.capacity_lost_gpu_s += n.gpus * (now - n.failed_at)
        n.failed_at = None
        if n.drain == NOT_RESPONDING:
            n.drain = ""
        if n.state == "up" and n.jobs == 0:
            n.idle_since = now
        self.touched.add(n.name)
        self.bf_dirty = True
