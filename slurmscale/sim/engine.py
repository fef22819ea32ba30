"""Discrete-event simulation: a simulated Slurm and cloud. slurmscale's own policies run the
daemon's capacity passes on it (`sim/daemon.py`, through `SimSlurm`); the other policies'
plans are carried out here (`_apply`).

Simulated Slurm: jobs ordered and started as `sim/slurm_model.py` says (Slurm's main scheduler,
backfill by time limits and multifactor priority; or the older greedy model); single-node jobs
are packed onto nodes by GPUs (best fit); gangs take whole idle nodes, all at once. A job
placed on powered-down nodes powers them up (as Slurm's ResumeProgram does) and starts when the
last of them has booted. Governed and naive pools may only have `target` nodes live.
Simulated cloud: a boot delay, the pool cap, a price per node-hour from the first second of
boot to release.

With a SpotModel the pool is spot capacity backed by an on-demand fallback pool, as slurmscale
deploys it: jobs are submitted to both partitions and run on spot whenever they can (Slurm's
PriorityTier), on demand otherwise. Spot nodes are interrupted at random (a rate per node-hour)
and in a storm (a share of the live spot nodes at once, after which spot launches fail for a
while, as after a real reclaim); after any interruption the pool is in capacity backoff for a
TTL, as the daemon puts it. An interrupted node's jobs are requeued, as slurmscale does on
the warning: eligible again after Slurm's requeue delay, restarted from the beginning, moved to
on-demand only after `max_preemptions`. Seeded: the same run gives the same result.

With PaidCapacity the cloud also has capacity paid whether used or not: an On-Demand Capacity
Reservation of N nodes (paid for the whole run) and Capacity Blocks (paid for their window).
Nodes are launched into it as the daemon routes gangs: the nodes a job powers up go into a
block when all of them fit in its free nodes and the job's time limit ends before the block
does (Slurm checks the limit against the block's closing reservation),
else into the reservation when they all fit there, else onto normal capacity; a job is never
placed on a block node it would outlast, and a block's nodes are powered down at its end.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from slurmscale.config import SpotSettings
from slurmscale.daemon.observe import knobs
from slurmscale.policy.model import (
    ActionKind,
    BufferRule,
    Mode,
    NodeState,
    NodeView,
    PendingJob,
    Plan,
    PoolKnobs,
    PoolMemory,
    Snapshot,
)
from slurmscale.policy.routing import reclaims_exhausted
from slurmscale.sim.daemon import MAIN_PREFIX, OD_PREFIX, DaemonDriver, sim_config
from slurmscale.sim.policies import SimPolicy
from slurmscale.sim.slurm_model import (
    FairShare,
    NodePlan,
    SchedulerKind,
    SlurmModel,
    factors,
    gang_start,
    size_share,
)
from slurmscale.sim.trace import TraceJob

# same-time order: arrivals first, policy last
SUBMIT, ELIGIBLE, READY, END, BLOCK, SCHED, BACKFILL, TICK = 0, 1, 2, 3, 4, 5, 6, 7
PERIODIC = (SCHED, BACKFILL, TICK)  # Slurm's and the daemon's own wake-ups, not the trace's
ODCR = -1  # a node's `paid` when it runs in the On-Demand Capacity Reservation
NOT_RESPONDING = "Not responding"  # what Slurm says of a node whose hardware failed


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
    drain: str = ""  # drained (the reason): Slurm starts nothing on it
    free_at: float = 0.0  # latest end of its running jobs by their time limits
    pool: str = ""
    spot: bool = False
    paid: int | None = None  # ODCR or a block's index: in capacity paid used or not
    failed_at: float | None = None  # its hardware failed then (Slurm: DOWN, not responding)


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
    spot_node_s: float = 0.0
    preemptions: int = 0  # spot nodes interrupted
    reclaims: int = 0  # reserved nodes an interruptible reservation's owner took back
    requeues: int = 0  # jobs requeued because their node was interrupted
    jobs_failed: int = 0  # preempted jobs that never ran to the end
    lost_gpu_s: float = 0.0  # GPU time of runs cut short (redone from the start)
    restart_waits: list[float] = field(default_factory=list)  # requeue -> restart
    end_s: float = 0.0
    timeline: list[tuple[float, int, int]] = field(default_factory=list)  # t, demand, live GPUs
    paid_node_s: float = 0.0  # node time spent in paid capacity (reservation or block)
    paid_busy_gpu_s: float = 0.0  # GPU time of jobs on paid capacity
    gpus_per_node: int = 8
    paid_available_node_s: float = 0.0  # node time paid for (the reservation, the blocks)
    jobs_killed_at_block_end: int = 0
    gang_starts: list[tuple[float, str]] = field(default_factory=list)  # (last) start, job id
    node_failures: int = 0  # nodes whose hardware failed under them
    capacity_lost_gpu_s: float = 0.0  # GPU time of failed nodes until replaced or repaired


@dataclass(frozen=True)
class SimCloud:
    boot_s: float = 300.0
    price_per_node_hour: float = 98.32
    tick_s: float = 60.0
    # With nothing running or arriving, stop when the policy has changed nothing this long.
    give_up_after_s: float = 7 * 86400.0
    spot_price_per_node_hour: float | None = None  # spot nodes (with a SpotModel)


@dataclass(frozen=True)
class SpotModel:
    on_demand_nodes: int  # the fallback pool's max_nodes
    buffer: float = 0.0  # on-demand safety buffer: share of the GPUs in use
    warm_nodes: int = 0
    interruption_rate: float = 0.0  # per spot node-hour
    storm_at_s: float | None = None
    storm_fraction: float = 0.0  # share of the live spot nodes a storm takes
    storm_outage_s: float = 1800.0  # spot launches fail this long after a storm
    # after any interruption slurmscale puts the pool in capacity backoff this long
    # (capacity.unavailable_ttl_s): no spot launches, work goes to on-demand meanwhile
    reclaim_backoff_s: float = 180.0
    requeue_delay_s: float = 120.0  # Slurm: a requeued batch job is eligible again after this
    max_preemptions: int = 2
    seed: int = 0


@dataclass(frozen=True)
class FailureModel:
    """Hardware failing under running nodes: `rate` failures per node-hour up. A failed node
    kills its jobs (Slurm requeues them: node failure) and Slurm has it DOWN, not
    responding. slurmscale's health pass replaces it (powered down, a fresh instance next
    time); the other policies leave it down until an admin returns it after `admin_repair_s`
    (its instance kept meanwhile, as a drained node's is)."""

    rate: float
    admin_repair_s: float = 4 * 3600.0
    seed: int = 0


@dataclass(frozen=True)
class BlockSpec:
    start_s: float
    end_s: float
    nodes: int


@dataclass(frozen=True)
class PaidCapacity:
    """Capacity paid whether used or not, in the pool: `reserved_nodes` of an ODCR (used
    first, or with `use_reserved` False never launched into: preference none) and blocks."""

    reserved_nodes: int = 0
    use_reserved: bool = True
    blocks: tuple[BlockSpec, ...] = ()
    # The daemon's capacity_blocks.end_margin_s: no job may run past a block's end less this.
    block_margin_s: float = 0.0
    # EC2 begins terminating a block's instances this long before its end (AWS: 30 minutes;
    # 0: at its end); a job still on one dies (counted: jobs_killed_at_block_end)
    block_lead_s: float = 0.0
    # The reservation is interruptible: its owner reclaims a reserved node's instance at this
    # rate per reserved node-hour (its jobs requeued, as a spot interruption's)
    reclaim_rate: float = 0.0
    seed: int = 0
    # the daemon's capacity_reservations.max_reclaims: a job whose runs were taken back this
    # often launches on normal capacity, not into the interruptible reservation again
    max_reclaims: int = 2

    def close_s(self, b: BlockSpec) -> float:
        return b.end_s - self.block_margin_s

    def taken_back_s(self, b: BlockSpec) -> float:
        return b.end_s - self.block_lead_s


class Simulation:
    def __init__(self, jobs: list[TraceJob], policy: SimPolicy, cloud: SimCloud,
                 spot: SpotModel | None = None, paid: PaidCapacity | None = None,
                 slurm: SlurmModel | None = None, failures: FailureModel | None = None
                 ) -> None:
        self.sched = slurm or SlurmModel()
        self.failures = failures
        self.fail_rng = random.Random(failures.seed if failures else 0)
        self.greedy = self.sched.kind is SchedulerKind.GREEDY
        if self.greedy:  # the old model: no limits, the run time stands in
            self.limit = [j.duration_s for j in jobs]
        else:
            self.limit = [self.sched.limit(j.duration_s, j.time_limit_s) for j in jobs]
            # Slurm kills a job at its limit (TIMEOUT): it runs no longer than that
            jobs = [replace(j, duration_s=lim) if lim < j.duration_s else j
                    for j, lim in zip(jobs, self.limit, strict=True)]
        self.jobs = jobs
        self.p = policy
        self.k = policy.knobs
        if paid is not None:  # idle paid nodes: kept, as the daemon's knob says
            self.k = replace(self.k, release_paid_idle=False)
        self.cloud = cloud
        self.spot = spot
        self.paid = paid or PaidCapacity()
        self.pools: list[PoolKnobs] = [self.k]
        self.od: PoolKnobs | None = None
        self.nodes = [_Node(f"{MAIN_PREFIX}{i + 1}", self.k.gpus_per_node, pool=self.k.name,
                            spot=spot is not None) for i in range(self.k.max_nodes)]
        if spot is not None and spot.on_demand_nodes:
            rule = ((BufferRule(self.k.name, spot.buffer, spot.warm_nodes),)
                    if spot.buffer or spot.warm_nodes else ())
            # The fallback runs in immediate mode: Slurm powers up its nodes per job.
            self.od = replace(self.k, name=f"{self.k.name}-od", max_nodes=spot.on_demand_nodes,
                              min_nodes=0, mode=Mode.IMMEDIATE, buffer=rule)
            self.pools.append(self.od)
            self.nodes += [_Node(f"{OD_PREFIX}{i + 1}", self.k.gpus_per_node, pool=self.od.name)
                           for i in range(spot.on_demand_nodes)]
        # slurmscale's policies: the daemon's own passes on the simulated Slurm, with the
        # config the daemon would be given (its pools' knobs are the ones simulated)
        self.daemon: DaemonDriver | None = None
        if policy.decide is None:
            cfg = sim_config(self.k, policy.holds, self.od, SpotSettings(
                on_demand_buffer=spot.buffer, warm_on_demand_nodes=spot.warm_nodes,
                max_preemptions=spot.max_preemptions) if spot and self.od else None,
                spot.reclaim_backoff_s if spot else 180.0, paid is not None)
            self.pools = list(knobs(cfg))
            self.k, self.od = self.pools[0], self.pools[1] if self.od is not None else None
            self.daemon = DaemonDriver(self, cfg, self.paid.reserved_nodes)
        # every job is submitted to both partitions (-p spot,on-demand)
        self.also: tuple[str, ...] = (self.od.name,) if self.od is not None else ()
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
        self.placed: dict[int, list[tuple[_Node, int]]] = {}
        self.start: dict[int, float] = {}
        self.ev: list[tuple[float, int, int, int]] = []
        self.seq = itertools.count()
        self.memory = {k.name: PoolMemory(k.max_nodes if k.mode is Mode.IMMEDIATE
                                          else k.min_nodes) for k in self.pools}
        self.arrivals: deque[tuple[float, str, int]] = deque()
        self.r = SimResult(policy.name)
        self.running_gpus = 0
        self.last_launch_batch: float | None = None
        self.attached: dict[int, str] = {}  # pending job -> the reservation it is pointed at
        self.started_in: dict[str, str] = {}  # job id -> reservation it started in
        self.idx_of = {j.job_id: i for i, j in enumerate(jobs)}
        # interruptions
        self.rng = random.Random(spot.seed if spot else 0)
        self.reclaim_rng = random.Random(self.paid.seed)
        self.stormed = False
        self.spot_down_until = -math.inf
        self.eligible_at: dict[int, float] = {}  # requeued jobs wait for Slurm's delay
        self.pending_since: dict[int, float] = {}  # requeued jobs: when they went back
        self.waited: dict[int, float] = {}  # time pending so far, over all runs
        self.preempted: dict[int, int] = {}
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

    # --- bookkeeping ---------------------------------------------------------------------
    def _push(self, t: float, kind: int, idx: int) -> None:
        if kind not in PERIODIC:
            self.future_events += 1
        heapq.heappush(self.ev, (t, kind, next(self.seq), idx))

    def _live(self, pool: str) -> int:
        return self.live_count[pool]

    def _power_up(self, n: _Node, now: float, paid: int | None = None) -> None:
        n.state, n.ready_at, n.free, n.on_since = "booting", now + self.cloud.boot_s, n.gpus, now
        self.touched.add(n.name)
        self.live_count[n.pool] += 1
        n.idle_since = None
        n.paid = paid
        n.spot = self.spot is not None and n.pool == self.k.name and paid is None
        self.r.node_launches += 1
        if self.last_launch_batch != now:
            self.r.scale_up_actions += 1
            self.last_launch_batch = now
        self._push(n.ready_at, READY, self.node_index[n.name])

    def _power_down(self, n: _Node, now: float) -> None:
        if n.failed_at is not None:  # the instance goes, and its hardware fault with it
            self._recovered(n, now)
        self.r.node_on_s += now - n.on_since
        if n.spot:
            self.r.spot_node_s += now - n.on_since
        if n.paid is not None:
            self.r.paid_node_s += now - n.on_since
        n.state, n.idle_since, n.jobs, n.free, n.paid = "down", None, 0, 0, None
        self.touched.add(n.name)
        self.live_count[n.pool] -= 1
        if self.daemon is not None:  # Slurm's suspend hook: the daemon terminates it
            self.daemon.suspend([n.name], now)

    # --- paid capacity -------------------------------------------------------------------
    def _in_paid(self, src: int) -> int:
        return sum(1 for n in self.nodes if n.state != "down" and n.paid == src)

    def _paid_source(self, k: PoolKnobs, idx: int, need: int, now: float) -> int | None:
        """Where `need` new nodes for job `idx` launch: a block they fit whole in (and the
        job's limit ends in), the reservation they fit whole in, or normal capacity (None)."""
        if k is not self.k:
            return None  # paid capacity is the main pool's
        for i, b in enumerate(self.paid.blocks):
            if (b.start_s <= now < self.paid.taken_back_s(b)
                    and now + self.cloud.boot_s + self.limit[idx] <= self.paid.close_s(b)
                    and b.nodes - self._in_paid(i) >= need):
                return i
        if (self.paid.use_reserved and self.paid.reserved_nodes
                and self.paid.reserved_nodes - self._in_paid(ODCR) >= need
                and not (self.paid.reclaim_rate > 0
                         and reclaims_exhausted(self.preempted.get(idx, 0),
                                                self.paid.max_reclaims))):
            return ODCR
        return None

    def _outlasts(self, n: _Node, start: float, idx: int) -> bool:
        """Could job `idx` (by its limit) run past the end of the block node `n` is in?"""
        if n.paid is None or n.paid == ODCR:
            return False
        return start + self.limit[idx] > self.paid.close_s(self.paid.blocks[n.paid])

    def _vacate(self, idx: int, now: float) -> None:
        """A run is over (ended, requeued or killed): its nodes' GPUs are free again, and the
        work it did on paid capacity is counted."""
        ran = max(0.0, now - self.start[idx])
        for m, g in self.placed.pop(idx):
            m.free += g
            self.touched.add(m.name)
            m.jobs -= 1
            if m.jobs == 0 and m.state == "up":
                m.idle_since = now
            if m.paid is not None:
                self.r.paid_busy_gpu_s += g * ran

    def _block_end(self, i: int, now: float) -> int:
        """EC2 takes the block back (from `block_lead_s` before its end): its nodes go. A job
        still on one dies with it (counted; a margin of at least the lead makes this never
        happen, a smaller one shows up here). Returns the jobs killed."""
        killed = 0
        for idx, placed in list(self.placed.items()):
            if not any(m.paid == i for m, _ in placed):
                continue
            job = self.jobs[idx]
            self._vacate(idx, now)
            self.running_gpus -= job.gpus_per_node(self.k.gpus_per_node) * job.nodes
            self.start.pop(idx)
            self.waited.pop(idx, None)
            killed += 1
        self.r.jobs_killed_at_block_end += killed
        for n in self.nodes:
            if n.state != "down" and n.paid == i:
                self._power_down(n, now)
        return killed

    # --- the simulated Slurm ---------------------------------------------------------------
    def _place(self, idx: int, job: TraceJob, now: float, headroom: int,
               k: PoolKnobs, allow: Callable[[_Node], bool] | None = None) -> int:
        """Place one job in pool `k` if it fits; returns the nodes powered up (-1 if not).
        `allow`: backfill's filter, the nodes free of what it planned for other jobs."""
        chosen = self._choose(idx, job, now, headroom, k, allow)
        if chosen is None:
            return -1
        return self._start(idx, job, now, k, *chosen)

    def _choose(self, idx: int, job: TraceJob, now: float, headroom: int, k: PoolKnobs,
                allow: Callable[[_Node], bool] | None = None
                ) -> tuple[list[_Node], list[_Node]] | None:
        """The nodes job `idx` would get in pool `k` now (all it runs on, those powered up
        for it), or None."""
        gpn = job.gpus_per_node(k.gpus_per_node)
        if job.nodes > k.max_nodes or gpn > k.gpus_per_node:
            return None
        resv = self.attached.get(idx)
        if resv is not None:  # pointed at its reservation: runs there, on nothing else
            headroom = 0
        pool = self.nodes_of[k.name]
        live = [n for n in pool if n.state != "down" and n.resv == resv and not n.drain]
        if self.paid.blocks:  # (the scheduler's hot loop: no per-node call without blocks)
            live = [n for n in live if not self._outlasts(n, max(now, n.ready_at), idx)]
        if job.nodes == 1:
            fits_now = [n for n in live if n.free >= gpn and (allow is None or allow(n))]
            if fits_now:
                return [min(fits_now, key=lambda n: (n.free, n.state != "up", n.name))], []
            spare = self._spare(pool, headroom, allow)
            return (spare[:1], spare[:1]) if spare else None
        spare = self._spare(pool, headroom, allow)
        whole = [n for n in live if n.jobs == 0 and n.free == n.gpus
                 and (allow is None or allow(n))]
        whole.sort(key=lambda n: (n.state != "up", n.name))
        need = job.nodes - len(whole)
        if need <= 0:
            return whole[:job.nodes], []
        if need <= len(spare):
            return whole + spare[:need], spare[:need]
        return None

    @staticmethod
    def _spare(pool: list[_Node], headroom: int,
               allow: Callable[[_Node], bool] | None) -> list[_Node]:
        """The powered-down nodes a job may power up: the first `headroom` of the pool (the
        others are held or beyond the cap, so Slurm cannot use them)."""
        if headroom <= 0:
            return []
        down = [n for n in pool if n.state == "down" and not n.drain][:headroom]
        return down if allow is None else [n for n in down if allow(n)]

    def _start(self, idx: int, job: TraceJob, now: float, k: PoolKnobs,
               chosen: list[_Node], new: list[_Node]) -> int:
        gpn = job.gpus_per_node(k.gpus_per_node)
        resv = self.attached.get(idx)
        src = self._paid_source(k, idx, len(new), now) if new else None
        for n in new:
            self._power_up(n, now, src)
        if new and self.daemon is not None:  # Slurm's resume hook for the job's new nodes
            self.daemon.resume([n.name for n in new], idx + 1, k.name, now)
        booting = [n.ready_at for n in chosen if n.state == "booting"]
        start = now if not booting else (max(booting) if self.greedy
                                          else self.sched.configured(max(booting)))
        for n in chosen:
            n.free -= gpn
            self.touched.add(n.name)
            n.jobs += 1
            n.idle_since = None
            n.free_at = max(n.free_at if n.jobs > 1 else 0.0, start + self.limit[idx])
        self.placed[idx] = [(n, gpn) for n in chosen]
        self.start[idx] = start
        since = self.pending_since.pop(idx, None)
        if since is not None:  # a requeued job restarting
            self.r.restart_waits.append(start - since)
        self.waited[idx] = self.waited.get(idx, 0.0) + start - (
            job.submit_s if since is None else since)
        if resv is not None:
            self.started_in[job.job_id] = self.attached.pop(idx)
        self._push(start + job.duration_s, END, idx)
        self.running_gpus += gpn * job.nodes
        del self.pending[idx]
        del self.pending_views[idx]
        self.eligible_at.pop(idx, None)
        self.prio.pop(idx, None)
        self.factors.pop(idx, None)
        self.expected.pop(idx, None)
        self.planned_to = None
        self.order = None
        return len(new)

    def _pool_room(self, k: PoolKnobs, now: float) -> list[int]:
        """[headroom, largest free GPUs on a live node, whole free nodes] outside reservations."""
        # a governed pool's target: the daemon drains the nodes above it (so Slurm cannot
        # power them up); the other policies' targets are applied here
        governed = k.mode is Mode.GOVERNED and self.daemon is None
        target = self.memory[k.name].target if governed else k.max_nodes
        head = max(0, min(target, k.max_nodes) - self._live(k.name))
        if self.daemon is not None and head:  # the drained ones are not Slurm's to power up
            head = sum(1 for n in self.nodes_of[k.name] if n.state == "down" and not n.drain)
        if k is self.k and now < self.spot_down_until and self.daemon is None:
            head = 0  # spot launches fail (a storm; the other policies' reclaim backoff)
        live = [n for n in self.nodes_of[k.name]
                if n.state != "down" and n.resv is None and not n.drain]
        return [head, max((n.free for n in live), default=0),
                sum(1 for n in live if n.jobs == 0)]

    def _queue_main_run(self, now: float) -> None:
        """Queue the main scheduler run something asked for (a Slurm event, or an update the
        daemon made) at slurmctld's background loop's next chance; the run serves every
        request made before it, as slurmctld's request count does."""
        if self.main_wanted and self.pending and not self.sched_due:
            self.sched_due = True
            self._push(self.sched.main_run(now, self.last_main_run), SCHED, -1)
        self.main_wanted = False

    def _schedule(self, now: float) -> None:
        """Slurm's event-triggered scheduling pass: jobs in reservations first (they start on
        their nodes whatever the queue), then the queue as the model says."""
        if not self.pending:
            return
        for idx in [i for i in self.attached if i in self.pending]:
            self._place(idx, self.pending[idx], now, 0, self.k)
        if self.greedy:
            self._schedule_greedy(now)
        else:
            self._schedule_main(now)

    def _pools_of(self, idx: int) -> list[PoolKnobs]:
        """The partitions a job may run in, in Slurm's PriorityTier order."""
        if idx in self.steered:
            return [self.od] if self.od is not None else []
        return self.pools

    def _schedule_greedy(self, now: float) -> None:
        """The greedy model: submit order, and any job that fits starts."""
        room = {k.name: self._pool_room(k, now) for k in self.pools}
        for idx, job in list(self.pending.items()):
            if idx in self.attached or self.eligible_at.get(idx, 0.0) > now:
                continue
            if all(r[0] == 0 and r[1] == 0 for r in room.values()):
                return
            for k in self._pools_of(idx):
                if self._try_start(idx, job, k, room, now):
                    break

    def _try_start(self, idx: int, job: TraceJob, k: PoolKnobs, room: dict[str, list[int]],
                   now: float, allow: Callable[[_Node], bool] | None = None) -> bool:
        """Start job `idx` in pool `k` now if it fits (`allow`: backfill's filter); the pool's
        room is brought up to date when it does."""
        if not self._may_fit(job, k, room[k.name]):
            return False
        if self._place(idx, job, now, room[k.name][0], k, allow) < 0:
            return False
        room[k.name] = self._pool_room(k, now)
        return True

    @staticmethod
    def _may_fit(job: TraceJob, k: PoolKnobs, room: list[int]) -> bool:
        """A cheap bound: False when the job surely cannot start in the pool now."""
        headroom, max_free, whole = room
        if job.nodes == 1:
            return job.gpus_per_node(k.gpus_per_node) <= max_free or headroom >= 1
        return job.nodes <= whole + headroom

    def _schedule_main(self, now: float) -> None:
        """Slurm's main scheduler: priority order; a job that cannot start in a partition
        leaves that partition blocked for every job after it."""
        room = {k.name: self._pool_room(k, now) for k in self.pools}
        blocked: set[str] = set()
        for idx in self._by_priority(now):
            if idx in self.attached or self.eligible_at.get(idx, 0.0) > now:
                continue
            tried = [k for k in self._pools_of(idx) if k.name not in blocked]
            if not tried:
                continue
            job = self.pending[idx]
            for k in tried:
                if self._try_start(idx, job, k, room, now):
                    break
            else:
                blocked.update(k.name for k in tried)
                if len(blocked) == len(self.pools):
                    return

    # --- Slurm's priorities and backfill (the slurm model) ---------------------------------
    def _by_priority(self, now: float) -> list[int]:
        """Pending jobs, highest priority first (ties: submitted first). Priorities are
        recomputed every PriorityCalcPeriod, as slurmctld does."""
        if now >= self.next_calc:
            self._recalc(now)
        return self._ordered()

    def _ordered(self) -> list[int]:
        """Pending jobs by their priorities as last calculated."""
        if self.order is None:
            self.order = sorted(self.pending, key=lambda i: (-self.prio[i], i))
        return self.order

    def _recalc(self, now: float) -> None:
        m = self.sched
        self.next_calc = now + m.priority_calc_period
        if m.priority_weight_fairshare:
            running: dict[str, float] = {}
            for idx, placed in self.placed.items():
                u = self.jobs[idx].user
                running[u] = running.get(u, 0.0) + sum(g for _, g in placed)
            self.fairshare.accrue(now, running)
        for idx in self.pending:
            self.prio[idx] = self._priority(idx, now)
        self.order = None
        self.bf_dirty = True  # a new order may let backfill start other jobs

    def _priority(self, idx: int, now: float) -> float:
        """Job `idx`'s priority now (its weighted factors kept for `sprio`)."""
        job = self.jobs[idx]
        if job.priority is not None:
            self.factors.pop(idx, None)
            return job.priority
        m = self.sched
        fs = self.fairshare.factor(job.user) if m.priority_weight_fairshare else 0.0
        size = size_share(job.nodes, job.gpus_per_node(self.k.gpus_per_node) * job.nodes,
                          self.cluster_nodes, self.k.gpus_per_node)
        f = self.factors[idx] = factors(m, now - self.eligible_at.get(idx, job.submit_s),
                                        size, fs)
        return sum(f)

    def priority_factors(self, idx: int) -> tuple[float, float, float]:
        """Pending job `idx`'s weighted age, job size and fair-share factors as of Slurm's
        last priority calculation (none: a trace-given priority, or the greedy model)."""
        return self.factors.get(idx, (0.0, 0.0, 0.0))

    def _queue(self, idx: int, now: float) -> None:
        """A job enters the queue (submitted or requeued): Slurm gives it a priority now."""
        if not self.greedy:
            self.fairshare.see(self.jobs[idx].user)
            self.prio[idx] = self._priority(idx, now)
            self.order = None
            self.bf_dirty = True

    def _backfill(self, now: float) -> None:
        """One backfill cycle: in priority order, start what can start now without taking
        resources planned for a job before it; plan each job that cannot at its earliest
        start, by the running jobs' time limits, within bf_window."""
        m = self.sched
        if not self.pending or not self.bf_dirty:
            return
        self.bf_dirty = False
        room = {k.name: self._pool_room(k, now) for k in self.pools}
        if not any(self._room_left(r) for r in room.values()):
            return  # nothing can start now: a plan would change nothing
        busy, held = self._plan_base(now)
        horizon = now + m.bf_window
        tested = 0
        for idx in list(self._by_priority(now)):
            if tested >= m.bf_max_job_test or not any(map(self._room_left, room.values())):
                return
            if idx in self.attached or self.eligible_at.get(idx, 0.0) > now:
                continue
            tested += 1
            job = self.pending[idx]
            lim = self.limit[idx]
            for k in self._pools_of(idx):
                gpus = job.gpus_per_node(k.gpus_per_node)

                def fits(n: _Node, g: int = gpus, t: float = lim) -> bool:
                    return busy[n.name].fits_now(g, t)
                if self._try_start(idx, job, k, room, now, fits):
                    for n, g in self.placed[idx]:
                        busy[n.name].add(now, self.start[idx] + lim, g)
                    break
            else:
                self._expect(idx, self._plan_later(idx, job, now, horizon, busy, room, held))

    def _plan_base(self, now: float) -> tuple[dict[str, NodePlan], dict[str, list[_Node]]]:
        """A backfill cycle's starting plan: every running job's nodes busy until its time
        limit, held nodes until their reservation ends."""
        busy = {n.name: NodePlan(n.gpus, now) for n in self.nodes}
        for idx, placed in self.placed.items():
            end = self.start[idx] + self.limit[idx]
            for n, g in placed:  # held from now (a booting node's job starts later)
                busy[n.name].add(now, end, g)
        return busy, self._held(busy)

    def _expect(self, idx: int, start: float | None) -> None:
        """Record backfill's planned start for job `idx` (squeue's StartTime); None: no plan."""
        if start is None:
            self.expected.pop(idx, None)
        else:
            self.expected[idx] = start

    def estimate(self, now: float, waited_s: float) -> None:
        """Backfill's expected starts as squeue shows them when the daemon reads the queue.

        Slurm's backfill plans every job it tests each cycle, whether or not anything can
        start; the cycles above stop planning once nothing can start (a plan would change no
        start), which leaves the estimates stale. This plans, without starting anything, the
        pending jobs in priority order down to the first gang that has waited `waited_s` (the
        one the hold rule decides on: it holds for no gang below it in a pool; a
        lower-priority job changes nothing of its plan), within bf_max_job_test, as a cycle
        now would. Run before a daemon pass that may hold nodes; planned again only when
        something changed (or another gang has waited long enough): the same state gives
        the same plans."""
        m = self.sched
        if self.greedy:
            return
        # (the last calculated priorities, as backfill's last cycle used: recalculating here
        # would move Slurm's own calculation, so holds on and off would differ by it)
        order = self._ordered()
        last = next((p for p, i in enumerate(order) if self.jobs[i].nodes > 1
                     and now - self.jobs[i].submit_s >= waited_s
                     and i not in self.attached), -1)
        if self.planned_to == last:
            return  # nothing changed that would change the plans
        self.planned_to = last
        self.expected = {}
        if last < 0:
            return
        room = {k.name: self._pool_room(k, now) for k in self.pools}
        busy, held = self._plan_base(now)
        horizon = now + m.bf_window
        tested = 0
        for idx in order[:last + 1]:
            if tested >= m.bf_max_job_test:
                return
            if idx in self.attached or self.eligible_at.get(idx, 0.0) > now:
                continue
            tested += 1
            self._expect(idx, self._plan_later(idx, self.pending[idx], now, horizon, busy,
                                               room, held))

    def _earliest(self, idx: int, job: TraceJob, pool: list[_Node], gpn: int, now: float,
                  horizon: float, busy: dict[str, NodePlan]
                  ) -> tuple[float, list[_Node]] | None:
        """Job `idx`'s earliest start on `pool`'s nodes by the plan, and the nodes."""
        lim = self.limit[idx]
        if job.nodes == 1:  # (the hot loop of a busy queue: kept flat)
            best, at = None, horizon
            for n in pool:
                for lo, hi in busy[n.name].runs(gpn):
                    if lo >= at:
                        break
                    if hi - lo >= lim:
                        if not (self.paid.blocks and self._outlasts(n, lo, idx)):
                            best, at = n, lo
                        break
            return None if best is None else (at, [best])
        windows = [busy[n.name].windows(n.gpus, lim, horizon) for n in pool]
        for i, n in enumerate(pool):  # a block node: only while the job ends before it does
            if n.paid is not None and n.paid != ODCR:
                last = self.paid.close_s(self.paid.blocks[n.paid]) - lim
                windows[i] = [(lo, min(hi, last)) for lo, hi in windows[i] if lo <= last]
        found = gang_start(windows, job.nodes)
        if found is None:
            return None
        return found[0], [pool[i] for i in found[1]]

    def _held(self, busy: dict[str, NodePlan]) -> dict[str, list[_Node]]:
        """Nodes in a hold, per pool: Slurm's backfill sees them taken until the reservation
        ends (for any job but the hold's own, which is placed on them, not planned). Marked in
        the cycle's plan."""
        out: dict[str, list[_Node]] = {}
        if self.daemon is None or not self.daemon.holding:
            return out
        for n in self.nodes:
            end = None if n.resv is None else self.daemon.reservation_end(n.resv)
            if end is not None:
                busy[n.name].add(busy[n.name].now, end, n.gpus)
                out.setdefault(n.pool, []).append(n)
        return out

    @staticmethod
    def _room_left(room: list[int]) -> bool:
        return room[0] > 0 or room[1] > 0

    def _plan_later(self, idx: int, job: TraceJob, now: float, horizon: float,
                    busy: dict[str, NodePlan], room: dict[str, list[int]],
                    held: dict[str, list[_Node]]) -> float | None:
        """Plan job `idx` at its earliest start in any of its pools (within the window): the
        nodes it would get are marked busy from then for its time limit. Returns the start
        (None: none within the window)."""
        lim = self.limit[idx]
        best: tuple[float, list[_Node], int] | None = None
        for k in self._pools_of(idx):
            gpn = job.gpus_per_node(k.gpus_per_node)
            if job.nodes > k.max_nodes or gpn > k.gpus_per_node:
                continue
            pool = [n for n in self.nodes_of[k.name] if n.state != "down" and n.resv is None]
            pool += self._spare(self.nodes_of[k.name], room[k.name][0], None)
            pool += held.get(k.name, [])
            found = self._earliest(idx, job, pool, gpn, now, horizon, busy)
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], found[1], gpn)
        if best is None:
            return None
        t, nodes, gpn = best
        for n in nodes:
            busy[n.name].add(t, t + lim, gpn)
        return t

    # --- the policy ----------------------------------------------------------------------
    def _snapshot(self, now: float) -> Snapshot:
        views = []
        for n, down in zip(self.nodes, self.down_views, strict=True):
            if n.state == "down":
                views.append(down)  # most nodes, most of the time: one shared view each
                continue
            if n.resv is not None and not n.jobs:
                st = NodeState.RESERVED
            elif n.jobs:
                st = NodeState.ALLOCATED
            elif n.state == "booting":
                st = NodeState.BOOTING
            else:
                st = NodeState.IDLE
            views.append(NodeView(n.name, n.pool, st, n.idle_since, alloc_gpus=n.gpus - n.free,
                                  free_at=n.free_at if n.jobs else None,
                                  paid=n.paid is not None))
        jobs = tuple(self.pending_views.values())
        while self.arrivals and self.arrivals[0][0] < now - self.k.reuse_window_s:
            self.arrivals.popleft()
        return Snapshot(now, tuple(self.pools), tuple(views), jobs, dict(self.memory),
                        tuple(self.arrivals))

    def _tick(self, now: float) -> None:
        before = self._usable(now)
        self._policy_step(now)
        if before != self._usable(now):
            self.bf_dirty = True  # the policy changed what Slurm may use

    def _usable(self, now: float) -> tuple[object, ...]:
        """What a policy step can change of the nodes Slurm may use: targets, live nodes,
        a spot outage (the daemon's drains and reservations mark it themselves)."""
        return (tuple(m.target for m in self.memory.values()), tuple(self.live_count.values()),
                now < self.spot_down_until)

    def _policy_step(self, now: float) -> None:
        if self.spot is not None:
            self._interruptions(now)
        if self.paid.reclaim_rate > 0:
            self._reclaims(now)
        if self.failures is not None:
            self._fail(now)
        if self.daemon is not None:
            self.daemon.spot_outage(now < self.spot_down_until)
            res = self.daemon.cfg.reservations
            if res.enabled:  # squeue's StartTime, which the hold rule reads
                self.estimate(now, res.accumulate_after_s)
            paid = (frozenset(n.name for n in self.nodes if n.paid is not None)
                    if self.paid.reserved_nodes or self.paid.blocks else frozenset())
            self.daemon.step(now, paid)
        else:
            self._apply(self.p.decide(self._snapshot(now)), now)  # type: ignore[misc]
        live_gpus = sum(n.gpus for n in self.nodes if n.state != "down")
        demand = self.running_gpus + sum(j.gpus for j in self.pending.values())
        self.r.timeline.append((now, demand, live_gpus))

    def _apply(self, plan: Plan, now: float) -> None:
        """The other policies' plans, carried out as the tool each models would."""
        for k in self.pools:
            self.memory[k.name] = plan.memory.get(k.name, self.memory[k.name])
        for a in plan.actions:
            if a.kind is ActionKind.RELEASE:
                self.release_nodes(list(a.nodes), now)
            elif a.kind is ActionKind.WARM:
                self.warm_nodes(list(a.nodes), now)
        if self.p.provision_to_target:
            k = self.k
            for n in self.nodes_of[k.name]:
                if self._live(k.name) >= min(self.memory[k.name].target, k.max_nodes):
                    break
                if n.state == "down":
                    self._power_up(n, now)

    # --- what Slurm does when told (the daemon's updates, through SimSlurm) ---------------
    def release_nodes(self, names: list[str], now: float, force: bool = False) -> None:
        """Power these nodes down (a policy's scale-down: one action). `force`
        (POWER_DOWN_FORCE): booting or busy ones too, what still runs there requeued."""
        released = False
        for name in names:
            n = self.by_name[name]
            if force and n.state != "down":
                for idx in [i for i, placed in self.placed.items()
                            if any(m is n for m, _ in placed)]:
                    self.requeue_job(idx, now)
                self._power_down(n, now)
            elif n.state == "up" and n.jobs == 0:  # a busy node is never taken from its job
                self._power_down(n, now)
                released = True
        if released:
            self.r.scale_down_actions += 1

    def warm_nodes(self, names: list[str], now: float) -> None:
        up = [name for name in names if self.by_name[name].state == "down"]
        for name in up:
            self._power_up(self.by_name[name], now)
        if up and self.daemon is not None:  # Slurm's resume hook, for no job
            self.daemon.resume(up, None, self.by_name[up[0]].pool, now)

    def steer(self, idx: int) -> None:
        """Pending job `idx` may now run on the on-demand fallback only."""
        assert self.od is not None
        self.steered.add(idx)
        self.pending_views[idx] = self.pending_views[idx]._replace(pool=self.od.name, also=())
        self.bf_dirty = True

    def queue_priority(self, idx: int) -> int:
        """Job `idx`'s priority as squeue shows it: the Slurm model's multifactor value; in
        the greedy model earlier submits rank higher. Slurm never shows a queued job that is
        not held a priority below 1."""
        if self.greedy:
            return 10**10 - int(self.jobs[idx].submit_s)
        return max(1, int(self.prio[idx]))

    def partitions(self, idx: int) -> tuple[str, ...]:
        if idx in self.steered:
            return (self.od.name,) if self.od is not None else ()
        return (self.k.name, *self.also)

    # --- spot interruptions ----------------------------------------------------------------
    def _interruptions(self, now: float) -> None:
        assert self.spot is not None
        live = [n for n in self.nodes_of[self.k.name] if n.state != "down" and n.spot]
        hit: list[_Node] = []
        if self.spot.interruption_rate > 0:
            p = 1.0 - math.exp(-self.spot.interruption_rate * self.cloud.tick_s / 3600.0)
            hit = [n for n in live if self.rng.random() < p]
        if (self.spot.storm_at_s is not None and not self.stormed
                and now >= self.spot.storm_at_s):
            self.stormed = True
            rest = [n for n in live if n not in hit]
            take = min(len(rest), round(self.spot.storm_fraction * len(live)))
            hit += self.rng.sample(rest, take)
            self.spot_down_until = now + self.spot.storm_outage_s
        self.r.preemptions += len(hit)
        if self.daemon is not None:
            # AWS's warnings reach the daemon's interruption pass: it puts the pool in
            # backoff, drains each node, requeues its jobs (recording each preemption, moving
            # a job that lost too many runs to on-demand) and powers the node down
            self.daemon.interrupted([n.name for n in hit])
            return
        for n in hit:
            self._interrupt(n, now)

    def _reclaims(self, now: float) -> None:
        """An interruptible reservation's owner takes reserved nodes back (EC2's two-minute
        warning): their jobs requeue, the nodes go; the reservation has them again later."""
        live = [n for n in self.nodes if n.state != "down" and n.paid == ODCR]
        p = 1.0 - math.exp(-self.paid.reclaim_rate * self.cloud.tick_s / 3600.0)
        hit = [n for n in live if self.reclaim_rng.random() < p]
        self.r.reclaims += len(hit)
        if hit and self.daemon is not None:
            self.daemon.interrupted([n.name for n in hit], reclaim=True)
        elif hit:
            self.release_nodes([n.name for n in hit], now, force=True)

    def _interrupt(self, n: _Node, now: float) -> None:
        """The warning, as the other policies' tools act on it: the node's jobs requeued, the
        instance gone, spot launches held back for the reclaim backoff."""
        assert self.spot is not None
        self.spot_down_until = max(self.spot_down_until, now + self.spot.reclaim_backoff_s)
        self.release_nodes([n.name], now, force=True)

    def requeue_job(self, idx: int, now: float, preempted: bool = True) -> None:
        """Slurm requeues a running job (all its nodes): pending again, eligible after the
        requeue delay. `preempted`: spot took its node (counts toward max_preemptions); a
        node failure does not."""
        job = self.jobs[idx]
        delay = self.spot.requeue_delay_s if self.spot is not None else 120.0
        self._vacate(idx, now)
        start = self.start.pop(idx)
        g = job.gpus_per_node(self.k.gpus_per_node) * job.nodes
        ran = max(0.0, now - start)
        self.r.busy_gpu_s += g * ran
        self.r.lost_gpu_s += g * ran
        self.running_gpus -= g
        if start > now:  # allocated but still waiting for its nodes to boot
            self.waited[idx] -= start - now
        self.r.requeues += 1
        if preempted:
            self.preempted[idx] = self.preempted.get(idx, 0) + 1
        pool = self.k.name
        # the daemon's policies: its interruption pass decides (through SimSlurm, after this)
        if (self.daemon is None and self.spot is not None and self.od is not None
                and self.preempted.get(idx, 0) >= self.spot.max_preemptions):
            self.steered.add(idx)
            pool = self.od.name
        self.pending_since[idx] = now
        self.eligible_at[idx] = now + delay
        self.pending[idx] = job
        self.pending_views[idx] = PendingJob(job.job_id, pool, job.nodes,
                                             job.gpus_per_node(self.k.gpus_per_node),
                                             job.duration_s, job.submit_s,
                                             also=() if idx in self.steered else self.also)
        # greedy: a requeued job keeps its place in submit order
        self.pending = dict(sorted(self.pending.items()))
        self._queue(idx, now)
        self._push(now + delay, ELIGIBLE, idx)

    # --- node failures ------------------------------------------------------------------
    def _fail(self, now: float) -> None:
        """Nodes up fail at random (a rate per node-hour): their jobs requeued as Slurm does on
        a node failure, the node DOWN. The other policies' admins return a failed node after
        `admin_repair_s`; slurmscale's health pass replaces it (through SimSlurm)."""
        f = self.failures
        assert f is not None
        if self.daemon is None:
            for n in self.nodes:
                if n.failed_at is not None and now >= n.failed_at + f.admin_repair_s:
                    self._recovered(n, now)
        if f.rate <= 0:
            return
        p = 1.0 - math.exp(-f.rate * self.cloud.tick_s / 3600.0)
        for n in self.nodes:
            if n.state != "up" or n.failed_at is not None or self.fail_rng.random() >= p:
                continue
            # DOWN: nothing starts there, never idle (so never powered down by Slurm)
            n.failed_at, n.drain = now, NOT_RESPONDING
            self.touched.add(n.name)
            self.r.node_failures += 1
            for idx in [i for i, placed in self.placed.items() if any(m is n for m, _ in placed)]:
                self.requeue_job(idx, now, preempted=False)
            n.idle_since = None  # (after the requeues, which mark it idle)
            self.bf_dirty = True

    def _recovered(self, n: _Node, now: float) -> None:
        """A failed node's fault is over: replaced (powered down) or repaired by an admin."""
        assert n.failed_at is not None
        self.r.capacity_lost_gpu_s += n.gpus * (now - n.failed_at)
        n.failed_at = None
        if n.drain == NOT_RESPONDING:
            n.drain = ""
        if n.state == "up" and n.jobs == 0:
            n.idle_since = now
        self.touched.add(n.name)
        self.bf_dirty = True

    # --- the loop ------------------------------------------------------------------------
    def run(self) -> SimResult:
        for i, j in enumerate(self.jobs):
            self._push(j.submit_s, SUBMIT, i)
        for i, b in enumerate(self.paid.blocks):
            self._push(b.start_s, BLOCK, -1 - i)
            self._push(self.paid.taken_back_s(b), BLOCK, i)
        if self.p.all_up_from_start:
            for n in self.nodes:
                self._power_up(n, 0.0)
        self._push(0.0, TICK, -1)
        outstanding = len(self.jobs)
        now = 0.0
        while self.ev:
            now, kind, _, idx = heapq.heappop(self.ev)
            if kind not in PERIODIC:
                self.future_events -= 1
                self.last_event_at = now
            if kind == SUBMIT:
                self.submit(idx, now)
            elif kind == ELIGIBLE:
                self.bf_dirty = True  # a requeued job may start again
            elif kind == BLOCK:
                if idx >= 0:  # its end (an opening only wakes the scheduler below)
                    outstanding -= self._block_end(idx, now)
            elif kind == READY:
                n = self.nodes[idx]
                if n.state == "booting" and n.ready_at == now:
                    n.state = "up"
                    self.touched.add(n.name)
                    if n.jobs == 0:
                        n.idle_since = now
            elif kind == END:
                job = self.jobs[idx]
                if idx not in self.placed or self.start[idx] + job.duration_s != now:
                    continue  # a run cut short by an interruption
                self._vacate(idx, now)
                self.running_gpus -= job.gpus_per_node(self.k.gpus_per_node) * job.nodes
                outstanding -= 1
                self._record(idx, job, now)
            elif kind == SCHED:
                self.sched_due = False
                self.last_main_run = now
                self._schedule(now)
            elif kind == BACKFILL:
                self.bf_due = False
                self._backfill(now)
            else:
                self._tick(now)
                quiet_for = now - self.last_event_at
                if outstanding and (self.future_events or (
                        self._tick_can_help() and quiet_for < self.cloud.give_up_after_s)):
                    self._push(now + self.cloud.tick_s, TICK, -1)
            if kind in (READY, END, BLOCK):
                self.bf_dirty = True
            if self.greedy:  # the greedy model schedules on every event
                self._schedule(now)
            elif kind not in PERIODIC:  # Slurm's own events ask for a main scheduler run
                self.main_wanted = True
            if self.daemon is not None:  # what Slurm's hooks asked of the daemon
                self.daemon.carry_out(now)
            if not self.greedy:
                self._queue_main_run(now)
            if (not self.greedy and self.bf_dirty and self.pending and not self.bf_due
                    and self.sched.bf_interval > 0):
                self.bf_due = True
                self._push(now + self.sched.bf_interval, BACKFILL, -1)
        self._finish(now)
        return self.r

    def submit(self, idx: int, now: float) -> None:
        """Job `idx` enters the queue (sbatch)."""
        job = self.jobs[idx]
        self.pending[idx] = job
        self.pending_views[idx] = PendingJob(
            job.job_id, self.k.name, job.nodes, job.gpus_per_node(self.k.gpus_per_node),
            job.duration_s, job.submit_s, also=self.also)
        if not job.carry_in and self.daemon is None:  # (the daemon keeps its own log)
            self.arrivals.append((now, self.k.name, job.nodes))
        self._queue(idx, now)

    def _tick_can_help(self) -> bool:
        """With nothing running, arriving or booting, only a policy step (a governed target
        rising, a hold released for its budget or time) can still start a pending job;
        otherwise the simulation is over."""
        memory = self.memory if self.daemon is None else self.daemon.store.pool_memory()
        return (self.daemon is not None and self.daemon.holding) or any(
            k.mode is Mode.GOVERNED and k.name in memory and memory[k.name].target < k.max_nodes
            and any(j.nodes <= k.max_nodes for j in self.pending.values()) for k in self.pools)

    def _record(self, idx: int, job: TraceJob, now: float) -> None:
        start = self.start.pop(idx)
        g = job.gpus_per_node(self.k.gpus_per_node) * job.nodes
        self.r.busy_gpu_s += g * (now - start)
        waited = self.waited.pop(idx)
        if not job.carry_in:
            self.r.jobs_completed += 1
            self.r.waits.append(waited)
            if job.nodes >= 2:
                self.r.gang_waits.append(waited)
                self.r.gang_starts.append((start, job.job_id))

    def _finish(self, now: float) -> None:
        self.r.end_s = now
        self.r.paid_available_node_s = self.paid.reserved_nodes * now + sum(
            b.nodes * (b.end_s - b.start_s) for b in self.paid.blocks)
        self.r.jobs = sum(1 for j in self.jobs if not j.carry_in)
        for idx, job in self.pending.items():  # never (re)started: censored at the end
            if idx in self.preempted:
                self.r.jobs_failed += 1  # preempted and never run to the end
            if not job.carry_in:
                waited = self.waited.get(idx, 0.0) + now - self.pending_since.get(
                    idx, job.submit_s)
                self.r.waits.append(waited)
                if job.nodes >= 2:
                    self.r.gang_waits.append(waited)
        if self.daemon is not None:  # every hold's idle GPU time, as the daemon accounted it
            self.r.reservation_idle_gpu_s = self.daemon.store.spent_gpu_s()
            self.r.reservations_created = self.daemon.store.created()
        for n in self.nodes:
            if n.state != "down":
                self._power_down(n, now)
        if self.daemon is not None:
            self.daemon.carry_out(now)
        self.r.on_gpu_s = self.r.node_on_s * self.k.gpus_per_node
        self.r.gpus_per_node = self.k.gpus_per_node


def simulate(jobs: list[TraceJob], policy: SimPolicy, cloud: SimCloud,
             spot: SpotModel | None = None, paid: PaidCapacity | None = None,
             slurm: SlurmModel | None = None, failures: FailureModel | None = None
             ) -> SimResult:
    return Simulation(jobs, policy, cloud, spot, paid, slurm, failures).run()
