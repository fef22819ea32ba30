"""Discrete-event simulation: a simulated Slurm and cloud. slurmscale's own policies run the
daemon's reconcile loop on it (`sim/daemon.py`, through `SimSlurm` and `SimEc2`); the other
policies' plans are carried out as their tools would (`sim/other_policies.py`).

The parts, each a module: the state and a node's power cycle (`state.py`), paid capacity's
routing (`paid.py`), Slurm's scheduling (`scheduler.py`), what EC2 and the hardware do to
running nodes (`disruptions.py`), the other policies (`other_policies.py`), and here the
event loop that runs them in time order; the settings in `world.py`, the figures in
`result.py`.

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
from collections.abc import Callable

from slurmscale.policy.model import Mode, PendingJob
from slurmscale.sim.daemon import DaemonDriver
from slurmscale.sim.oracle import offline_up_s
from slurmscale.sim.other_policies import OtherPolicies
from slurmscale.sim.policies import SimPolicy
from slurmscale.sim.result import SimResult
from slurmscale.sim.slurm_model import SlurmModel
from slurmscale.sim.trace import TraceJob
from slurmscale.sim.world import (
    BACKFILL,
    BLOCK,
    ELIGIBLE,
    END,
    ODCR,
    PERIODIC,
    READY,
    SCHED,
    SUBMIT,
    TICK,
    BlockSpec,
    FailureModel,
    PaidCapacity,
    SimCloud,
    SpotModel,
)

__all__ = ["BlockSpec", "FailureModel", "PaidCapacity", "SimCloud", "SimResult", "Simulation",
           "SpotModel", "simulate"]


class Simulation(OtherPolicies):
    """One run of one policy over a trace: the event loop (submissions, nodes ready, ends,
    Slurm's scheduler and backfill wake-ups, blocks' edges, the policy's tick) over the parts
    it inherits."""

    def __init__(self, jobs: list[TraceJob], policy: SimPolicy, cloud: SimCloud,
                 spot: SpotModel | None = None, paid: PaidCapacity | None = None,
                 slurm: SlurmModel | None = None, failures: FailureModel | None = None,
                 progress: Callable[[float], None] | None = None) -> None:
        """`progress`: told the simulated time (s) at each policy tick (a terminal's line)."""
        super().__init__(jobs, policy, cloud, spot, paid, slurm, failures)
        self.progress = progress
        if self.daemon_config is not None:  # slurmscale's policies: the daemon's own loop
            self.daemon = DaemonDriver(self, self.daemon_config, self.paid)

    def _tick(self, now: float) -> None:
        before = self._usable(now)
        self._policy_step(now)
        if before != self._usable(now):
            self.bf_dirty = True  # the policy changed what Slurm may use

    def _routed(self) -> None:
        """Where the daemon launched the nodes powered up since: a node whose instance went
        into the ODCR runs in paid capacity (on demand, not spot) from its launch. A node
        the daemon has not launched yet is asked again after its next pass; one powered
        down meanwhile (its launch rolled back) is dropped."""
        if not self.unrouted:
            return
        assert self.daemon is not None
        into = self.daemon.launched_into([n.name for n in self.unrouted])
        left = []
        for n in self.unrouted:
            if n.state == "down":
                continue
            rid = into.get(n.name)
            if rid is None:
                left.append(n)
            elif rid:
                n.paid, n.spot = ODCR, False
        self.unrouted = left

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
                    if (self.paid.reserved_nodes or self.paid.blocks)
                    and not self.routes_reserved else frozenset())
            self.daemon.step(now, paid)
            self._routed()
            self._limit_use(now)
        else:
            self._apply(self.policy.decide(self._snapshot(now)), now)  # type: ignore[misc]
        live_gpus = sum(n.gpus for n in self.nodes if n.state != "down")
        demand = self.running_gpus + sum(j.gpus for j in self.pending.values())
        self.result.timeline.append((now, demand, live_gpus))

    def _limit_use(self, now: float) -> None:
        """The hold rule's share of a time limit, as the daemon uses it now for the pool."""
        assert self.daemon is not None
        use = self.daemon.limit_use(self.main.name)
        if use is None:
            return
        r = self.result
        r.limit_use, r.limit_use_jobs = use.value, use.jobs
        if r.limit_use_learned_s is None and use.source == "learned":
            r.limit_use_learned_s = now

    def run(self) -> SimResult:
        for i, j in enumerate(self.jobs):
            self._push(j.submit_s, SUBMIT, i)
        for i, b in enumerate(self.paid.blocks):
            self._push(b.start_s, BLOCK, -1 - i)
            self._push(self.paid.taken_back_s(b), BLOCK, i)
        if self.policy.all_up_from_start:
            launch = self.new_launch()
            for n in self.nodes:
                self._power_up(n, 0.0, launch=launch)
        self._push(0.0, TICK, -1)
        next_tick: float | None = 0.0  # the periodic pass due (None: none is)
        outstanding = len(self.jobs)
        now = 0.0
        while self.agenda:
            now, kind, _, idx = heapq.heappop(self.agenda)
            if kind == TICK:
                next_tick = None
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
                self.running_gpus -= job.gpus_per_node(self.main.gpus_per_node) * job.nodes
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
                if self.progress is not None:
                    self.progress(now)
                if outstanding and self._ticks_go_on(now):
                    next_tick = now + self.cloud.tick_s
                    self._push(next_tick, TICK, -1)
            if kind in (READY, END, BLOCK):
                self.bf_dirty = True
            if self.greedy:  # the greedy model schedules on every event
                self._schedule(now)
            elif kind not in PERIODIC:  # Slurm's own events ask for a main scheduler run
                self.main_wanted = True
            if self.daemon is not None:  # what Slurm's hooks asked of the daemon
                self.daemon.carry_out(now)
                self._routed()
                if next_tick is None and outstanding and self._ticks_go_on(now):
                    # that pass left work for the next (a hold made, its job still to be
                    # pointed at it) after the periodic passes had stopped: they go on,
                    # on their grid
                    next_tick = (now // self.cloud.tick_s + 1) * self.cloud.tick_s
                    self._push(next_tick, TICK, -1)
            if not self.greedy:
                self._queue_main_run(now)
            if (not self.greedy and self.bf_dirty and self.pending and not self.bf_due
                    and self.sched.bf_interval > 0):
                self.bf_due = True
                self._push(now + self.sched.bf_interval, BACKFILL, -1)
        self._finish(now)
        return self.result

    def submit(self, idx: int, now: float) -> None:
        """Job `idx` enters the queue (sbatch)."""
        job = self.jobs[idx]
        self.pending[idx] = job
        self.pending_views[idx] = PendingJob(
            job.job_id, self.main.name, job.nodes, job.gpus_per_node(self.main.gpus_per_node),
            job.duration_s, job.submit_s, also=self.also)
        if not job.carry_in and self.daemon is None:  # (the daemon keeps its own log)
            self.arrivals.append((now, self.main.name, job.nodes))
        self._queue(idx, now)

    def _ticks_go_on(self, now: float) -> bool:
        """Is another periodic pass worth making: events are still to come, or a policy
        step may still start a pending job (for at most `give_up_after_s` of quiet)?"""
        return bool(self.future_events) or (
            self._tick_can_help() and now - self.last_event_at < self.cloud.give_up_after_s)

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
        g = job.gpus_per_node(self.main.gpus_per_node) * job.nodes
        self.result.busy_gpu_s += g * (now - start)
        waited = self.waited.pop(idx)
        if not job.carry_in:
            self.result.jobs_completed += 1
            self.result.waits.append(waited)
            if job.nodes >= 2:
                self.result.gang_waits.append(waited)
                self.result.gang_starts.append((start, job.job_id))

    def _finish(self, now: float) -> None:
        self.result.end_s = now
        self.result.paid_available_node_s = self.paid.reserved_nodes * now + sum(
            b.nodes * (b.end_s - b.start_s) for b in self.paid.blocks)
        self.result.jobs = sum(1 for j in self.jobs if not j.carry_in)
        for idx, job in self.pending.items():  # never (re)started: censored at the end
            if idx in self.preempted:
                self.result.jobs_failed += 1  # preempted and never run to the end
            if not job.carry_in:
                waited = self.waited.get(idx, 0.0) + now - self.pending_since.get(
                    idx, job.submit_s)
                self.result.waits.append(waited)
                if job.nodes >= 2:
                    self.result.gang_waits.append(waited)
        if self.daemon is not None:  # every hold's idle GPU time, as the daemon accounted it
            self.result.reservation_idle_gpu_s = self.daemon.store.spent_gpu_s()
            self.result.reservations_created = self.daemon.store.created()
        for n in self.nodes:
            if n.state != "down":
                self._power_down(n, now)
        if self.daemon is not None:
            self.daemon.carry_out(now)
        self.result.on_gpu_s = self.result.node_on_s * self.main.gpus_per_node
        self.result.gpus_per_node = self.main.gpus_per_node
        if self.policy.offline_cost:
            self.result.offline_node_s = offline_up_s(self.node_runs, self.cloud.boot_s)


def simulate(jobs: list[TraceJob], policy: SimPolicy, cloud: SimCloud,
             spot: SpotModel | None = None, paid: PaidCapacity | None = None,
             slurm: SlurmModel | None = None, failures: FailureModel | None = None,
             progress: Callable[[float], None] | None = None) -> SimResult:
    return Simulation(jobs, policy, cloud, spot, paid, slurm, failures, progress).run()
