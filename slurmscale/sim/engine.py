"""Discrete-event simulation: a simulated Slurm and cloud. slurmscale's own policies run the
daemon's reconcile loop on it (`sim/daemon.py`, through `SimSlurm` and `SimEc2`); the other
policies' plans are carried out as their tools would (`sim/other_policies.py`).

The parts, each an object of its own module, built here on one shared `SimState` (the
settings, the nodes, the agenda, the figures: `state.py`): the simulated Slurm
(`scheduler.py`: its queue, scheduling, backfill and power saving), where its new nodes
launch for the other policies (`paid.py`), what EC2 and the hardware do to running nodes
(`disruptions.py`), and the policy - the daemon's own loop on the simulated adapters
(`daemon.py`) or one of the other policies (`other_policies.py`); here the event loop that
runs them in time order. The settings in `world.py`, the figures in `result.py`.

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
slurmscale's daemon routes launches into it itself, as on EC2: its launch pass puts a gang
into the ODCR when it fits whole, a capacity-block pool's gangs into the open block (its
block pass keeping the pool's closed windows in the simulated Slurm, which starts no job
whose limit reaches one); the engine reads from each node's instance which capacity it runs
in (`_routed`), and from 30 minutes before a block's end the simulated EC2 takes its
instances back. For the other policies the engine's model places the nodes (`paid.py`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from slurmscale.policy.model import Mode
from slurmscale.sim.daemon import RESERVATION_ID, DaemonDriver, block_id
from slurmscale.sim.disruptions import Disruptions
from slurmscale.sim.oracle import offline_up_s
from slurmscale.sim.other_policies import OtherPolicies
from slurmscale.sim.paid import PaidRouting
from slurmscale.sim.policies import SimPolicy
from slurmscale.sim.result import SimResult
from slurmscale.sim.scheduler import SimSlurmctld
from slurmscale.sim.slurm_model import SlurmModel
from slurmscale.sim.state import SimState
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


class Simulation:
    """One run of one policy over a trace: its parts (`st` the shared state, `slurm` the
    simulated Slurm, `disruptions` EC2's and the hardware's, `daemon` slurmscale's daemon or
    `others` another policy) and the event loop over them (submissions, nodes ready, ends,
    Slurm's scheduler and backfill wake-ups, blocks' edges, the policy's tick)."""

    def __init__(self, jobs: list[TraceJob], policy: SimPolicy, cloud: SimCloud,
                 spot: SpotModel | None = None, paid: PaidCapacity | None = None,
                 slurm: SlurmModel | None = None, failures: FailureModel | None = None,
                 progress: Callable[[float], None] | None = None) -> None:
        """`progress`: told the simulated time (s) at each policy tick (a terminal's line)."""
        self.st = st = SimState(policy, cloud, spot, paid, failures)
        self.slurm = SimSlurmctld(st, jobs, slurm or SlurmModel(), PaidRouting(st))
        self.disruptions = Disruptions(st, self.slurm)
        self.progress = progress
        # the policy: the daemon's own loop on the simulated Slurm, or another policy's tool
        self.daemon: DaemonDriver | None = None
        self.others: OtherPolicies | None = None
        if st.daemon_config is not None:
            self.daemon = st.daemon = DaemonDriver(self.slurm, st.daemon_config, st.paid,
                                                   st.cloud.warm)
        else:
            self.others = OtherPolicies(st, self.slurm)
        # a paid capacity's reservation id -> the node's `paid` (the ODCR, a block's index)
        self.paid_source = {RESERVATION_ID: ODCR,
                            **{block_id(i): i for i in range(len(st.paid.blocks))}}

    def _tick(self, now: float) -> None:
        before = self._usable(now)
        self._policy_step(now)
        if before != self._usable(now):
            self.slurm.bf_dirty = True  # the policy changed what Slurm may use

    def _routed(self) -> None:
        """Where the daemon launched the nodes powered up since: a node whose instance went
        into the ODCR or a block runs in paid capacity (on demand, not spot) from its
        launch. A node the daemon has not launched yet is asked again after its next pass;
        one powered down meanwhile (its launch rolled back) is dropped."""
        st = self.st
        if not st.unrouted:
            return
        assert self.daemon is not None
        into = self.daemon.launched_into([n.name for n in st.unrouted])
        left = []
        for n in st.unrouted:
            if n.state == "down":
                continue
            rid = into.get(n.name)
            if rid is None:
                left.append(n)
            elif rid:
                n.paid, n.spot = self.paid_source[rid], False
        st.unrouted = left

    def _warm_booted(self, now: float) -> None:
        """The nodes the daemon started from its warm pool since: booting in the warm
        start's time from their power-up, not a launch's (their READY comes sooner)."""
        st, warm = self.st, self.st.cloud.warm
        if self.daemon is None or warm is None:
            return
        sooner = set()
        for name in self.daemon.warm_booted():
            n = st.by_name.get(name)
            if n is not None and n.state == "booting" and n.on_since + warm.boot_s < n.ready_at:
                n.ready_at = max(now, n.on_since + warm.boot_s)
                st.push(n.ready_at, READY, st.node_index[name])
                st.result.warm_starts += 1
                sooner.add(name)
        if sooner:
            self.slurm.ready_sooner(sooner, now)
            self.slurm.bf_dirty = True

    def _usable(self, now: float) -> tuple[object, ...]:
        """What a policy step can change of the nodes Slurm may use: targets, live nodes,
        a spot outage (the daemon's drains and reservations mark it themselves)."""
        st = self.st
        return (tuple(m.target for m in st.memory.values()), tuple(st.live_count.values()),
                now < st.spot_down_until)

    def _policy_step(self, now: float) -> None:
        st, world = self.st, self.disruptions
        if st.spot is not None:
            world.interruptions(now)
        if st.paid.reclaim_rate > 0:
            world.reclaims(now)
        if st.failures is not None:
            world.fail(now)
        if self.daemon is not None:
            self.daemon.spot_outage(now < st.spot_down_until)
            res = self.daemon.cfg.reservations
            if res.enabled:  # squeue's StartTime, which the hold rule reads
                self.slurm.bf.estimate(now, res.accumulate_after_s)
            self.daemon.step(now)
            self._routed()
            self._warm_booted(now)
            self._limit_use(now)
        else:
            assert self.others is not None
            self.others.step(now)
        live_gpus = sum(n.gpus for n in st.nodes if n.state != "down")
        demand = self.slurm.running_gpus + self.slurm.pending_gpus
        st.result.timeline.append((now, demand, live_gpus))

    def _limit_use(self, now: float) -> None:
        """The hold rule's share of a time limit, as the daemon uses it now for the pool."""
        assert self.daemon is not None
        use = self.daemon.limit_use(self.st.main.name)
        if use is None:
            return
        r = self.st.result
        r.limit_use, r.limit_use_jobs = use.value, use.jobs
        if r.limit_use_learned_s is None and use.source == "learned":
            r.limit_use_learned_s = now

    def run(self) -> SimResult:
        st, slurm = self.st, self.slurm
        for i, j in enumerate(slurm.jobs):
            st.push(j.submit_s, SUBMIT, i)
        for i, b in enumerate(st.paid.blocks):
            st.push(b.start_s, BLOCK, -1 - i)
            st.push(st.paid.taken_back_s(b), BLOCK, i)
        if st.policy.all_up_from_start:
            launch = st.new_launch()
            for n in st.nodes:
                slurm.power.up(n, 0.0, launch=launch)
        st.push(0.0, TICK, -1)
        next_tick: float | None = 0.0  # the periodic pass due (None: none is)
        outstanding = len(slurm.jobs)
        now = 0.0
        agenda = st.agenda
        while agenda:
            now, kind, _, idx = heapq.heappop(agenda)
            if kind == TICK:
                next_tick = None
            if kind not in PERIODIC:
                st.future_events -= 1
                st.last_event_at = now
            if kind == SUBMIT:
                self.submit(idx, now)
            elif kind == ELIGIBLE:
                slurm.bf_dirty = True  # a requeued job may start again
            elif kind == BLOCK:
                if idx >= 0:  # its end (an opening only wakes the scheduler below)
                    outstanding -= self.disruptions.block_end(idx, now)
            elif kind == READY:
                n = st.nodes[idx]
                if n.state == "booting" and n.ready_at == now:
                    n.state = "up"
                    st.touched.add(n.name)
                    if n.jobs == 0:
                        n.idle_since = now
            elif kind == END:
                ran = slurm.end(idx, now)
                if ran is None:
                    continue  # a run cut short by an interruption
                outstanding -= 1
                self._record(slurm.jobs[idx], now, *ran)
            elif kind == SCHED:
                slurm.main_run(now)
            elif kind == BACKFILL:
                slurm.backfill(now)
            else:
                self._tick(now)
                if self.progress is not None:
                    self.progress(now)
                if outstanding and self._ticks_go_on(now):
                    next_tick = now + st.cloud.tick_s
                    st.push(next_tick, TICK, -1)
            if kind in (READY, END, BLOCK):
                slurm.bf_dirty = True
            slurm.after_event(now, kind not in PERIODIC)
            if self.daemon is not None:  # what Slurm's hooks asked of the daemon
                self.daemon.carry_out(now)
                self._routed()
                self._warm_booted(now)
                if next_tick is None and outstanding and self._ticks_go_on(now):
                    # that pass left work for the next (a hold made, its job still to be
                    # pointed at it) after the periodic passes had stopped: they go on,
                    # on their grid
                    next_tick = (now // st.cloud.tick_s + 1) * st.cloud.tick_s
                    st.push(next_tick, TICK, -1)
            slurm.queue_wake_ups(now)
        self._finish(now)
        return st.result

    def submit(self, idx: int, now: float) -> None:
        """Job `idx` enters the queue (sbatch); the other policies' forecast sees it arrive."""
        self.slurm.submit(idx, now)
        if self.others is not None:
            self.others.arrived(now, self.slurm.jobs[idx])

    def _ticks_go_on(self, now: float) -> bool:
        """Is another periodic pass worth making: events are still to come, or a policy
        step may still start a pending job (for at most `give_up_after_s` of quiet)?"""
        st = self.st
        return bool(st.future_events) or (
            self._tick_can_help() and now - st.last_event_at < st.cloud.give_up_after_s)

    def _tick_can_help(self) -> bool:
        """With nothing running, arriving or booting, only a policy step (a governed target
        rising, a hold released for its budget or time) can still start a pending job;
        otherwise the simulation is over."""
        st = self.st
        memory = st.memory if self.daemon is None else self.daemon.store.pool_memory()
        return (self.daemon is not None and self.daemon.holding) or any(
            k.mode is Mode.GOVERNED and k.name in memory and memory[k.name].target < k.max_nodes
            and any(j.nodes <= k.max_nodes for j in self.slurm.pending.values())
            for k in st.pools)

    def _record(self, job: TraceJob, now: float, start: float, waited: float) -> None:
        """A job's run that ended at `now` (started at `start`, after `waited` pending)."""
        r = self.st.result
        g = job.gpus_per_node(self.st.main.gpus_per_node) * job.nodes
        r.busy_gpu_s += g * (now - start)
        if not job.carry_in:
            r.jobs_completed += 1
            r.waits.append(waited)
            if job.nodes >= 2:
                r.gang_waits.append(waited)
                r.gang_starts.append((start, job.job_id))

    def _finish(self, now: float) -> None:
        st, slurm, r = self.st, self.slurm, self.st.result
        r.end_s = now
        r.paid_available_node_s = st.paid.reserved_nodes * now + sum(
            b.nodes * (b.end_s - b.start_s) for b in st.paid.blocks)
        r.jobs = sum(1 for j in slurm.jobs if not j.carry_in)
        for idx, job in slurm.pending.items():  # never (re)started: censored at the end
            if idx in slurm.preempted:
                r.jobs_failed += 1  # preempted and never run to the end
            if not job.carry_in:
                waited = slurm.waited.get(idx, 0.0) + now - slurm.pending_since.get(
                    idx, job.submit_s)
                r.waits.append(waited)
                if job.nodes >= 2:
                    r.gang_waits.append(waited)
        if self.daemon is not None:  # every hold's idle GPU time, as the daemon accounted it
            r.reservation_idle_gpu_s = self.daemon.store.spent_gpu_s()
            r.reservations_created = self.daemon.store.created()
        for n in st.nodes:
            if n.state != "down":
                slurm.power.down(n, now)
        slurm.power.settle(now)
        if self.daemon is not None:
            self.daemon.carry_out(now)
            if st.cloud.warm is not None:  # (the daemon's warm pool: SimEc2's starts, stops)
                r.stopped_node_s = self.daemon.ec2.stopped_node_s()
                r.warm_refused = self.daemon.events["warm_start_refused"]
        r.on_gpu_s = r.node_on_s * st.main.gpus_per_node
        r.gpus_per_node = st.main.gpus_per_node
        if st.policy.offline_cost:
            r.offline_node_s = offline_up_s(st.node_runs, st.cloud.boot_s)


def simulate(jobs: list[TraceJob], policy: SimPolicy, cloud: SimCloud,
             spot: SpotModel | None = None, paid: PaidCapacity | None = None,
             slurm: SlurmModel | None = None, failures: FailureModel | None = None,
             progress: Callable[[float], None] | None = None) -> SimResult:
    return Simulation(jobs, policy, cloud, spot, paid, slurm, failures, progress).run()
