"""The simulated Slurm: one object beside the simulated cloud, as slurmctld stands beside EC2.

It owns the queue (pending, running, requeued jobs; priorities, fair-share, backfill's plans),
schedules as `sim/slurm_model.py` parameterises it: placement (single-node jobs packed by
GPUs, best fit; gangs on whole idle nodes, all at once; a job placed on powered-down nodes
powers them up and starts once the last has booted), the main scheduler (priority order, a
partition blocked after its first job that cannot start; or the older greedy model),
multifactor priorities (its backfill beside it: `backfill.py`); its power saving
(ResumeProgram and SuspendProgram: a node powered up boots for the cloud's delay; for the
other policies into the capacity `PaidRouting` says); its reservations (a hold's nodes for
its job alone; a window's nodes for no job its limit would carry into it) and partitions
set DOWN; and what slurmctld does when the daemon
(through `SimSlurm`, whose `SimModel` this is) or the other policies tell it: power nodes
down or up, requeue, signal or move a job. The nodes are the shared state's (`state.py`):
Slurm changes their jobs and power, the cloud part their failures and ends."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from slurmscale.policy.model import Mode, PendingJob, PoolKnobs
from slurmscale.sim.backfill import SimBackfill
from slurmscale.sim.paid import PaidRouting
from slurmscale.sim.power import SimPower
from slurmscale.sim.priorities import SimPriorities
from slurmscale.sim.slurm_model import (
    SchedulerKind,
    SlurmModel,
)
from slurmscale.sim.state import SimState
from slurmscale.sim.trace import TraceJob
from slurmscale.sim.world import (
    BACKFILL,
    ELIGIBLE,
    END,
    SCHED,
    Node,
)


class SimSlurmctld:
    """slurmctld over the shared state `st`: `jobs` the trace's (each cut to its time limit,
    as Slurm kills a job at it), `model` its scheduling rules, `routing` where the nodes it
    powers up launch."""

    def __init__(self, st: SimState, jobs: list[TraceJob], model: SlurmModel,
                 routing: PaidRouting) -> None:
        self.st = st
        self.routing = routing
        self.sched = model
        self.greedy = model.kind is SchedulerKind.GREEDY
        self.limit = self._limits(jobs)
        # Slurm kills a job at its limit (TIMEOUT): it runs no longer than that
        self.jobs = [replace(j, duration_s=lim) if lim < j.duration_s else j
                     for j, lim in zip(jobs, self.limit, strict=True)]
        # each job's id as Slurm gives it (a number, in submission order: what squeue, sprio
        # and the resume hook's file all say), and back (the trace's ids are its own)
        self.slurm_ids = [str(i + 1) for i in range(len(jobs))]
        self.idx_of = {s: i for i, s in enumerate(self.slurm_ids)}
        self.pending: dict[int, TraceJob] = {}
        self.pending_views: dict[int, PendingJob] = {}  # (the other policies' snapshot)
        self.placed: dict[int, list[tuple[Node, int]]] = {}
        self.placed_serial = 0  # moved on as a job is placed or its run is over
        self.start: dict[int, float] = {}
        self.running_gpus = 0
        self.pending_gpus = 0  # the pending jobs' GPUs, summed as they enter and start
        self.attached: dict[int, str] = {}  # pending job -> the reservation it is pointed at
        self.started_in: dict[str, str] = {}  # job id -> reservation it started in
        self.eligible_at: dict[int, float] = {}  # requeued jobs wait for Slurm's delay
        self.pending_since: dict[int, float] = {}  # requeued jobs: when they went back
        self.waited: dict[int, float] = {}  # time pending so far, over all runs
        self.preempted: dict[int, int] = {}
        self.signalled_at: dict[int, float] = {}  # running jobs Slurm signalled, and when
        self.steered: set[int] = set()  # preempted max_preemptions times: on-demand only
        self.pri = SimPriorities(self)  # the pending jobs' priorities and their order
        self.bf_due = False  # a backfill event is queued
        self.main_wanted = False  # a main scheduler run is asked for, not yet queued
        self.sched_due = False  # a main scheduler run is queued (slurmctld's request count)
        self.last_main_run = -math.inf
        self.bf = SimBackfill(self)  # backfill's cycles and the start estimates it plans
        self.power = SimPower(st, self._power_changed)  # ResumeProgram and SuspendProgram
        self.bf_dirty = True  # something changed since the last backfill cycle
        self.windowed = False  # a node is in a window reservation (Node.windows)
        # partitions set DOWN (scontrol update State=DOWN); a capacity-block pool's starts
        # DOWN, as slurm-conf renders it, until the daemon's block pass opens it
        self.down: set[str] = {st.block.name} if st.block is not None else set()

    # --- what SimSlurm reads of the world through this one (its `SimModel`) --------------
    @property
    def nodes(self) -> list[Node]:
        return self.st.nodes

    @property
    def by_name(self) -> dict[str, Node]:
        return self.st.by_name

    @property
    def node_index(self) -> dict[str, int]:
        return self.st.node_index

    @property
    def touched(self) -> set[str]:
        return self.st.touched

    @property
    def main(self) -> PoolKnobs:
        return self.st.main

    @property
    def expected(self) -> dict[int, float]:
        """Backfill's planned start per pending job (squeue's StartTime)."""
        return self.bf.expected

    @property
    def bf_dirty(self) -> bool:
        """Something changed that may let backfill start a job (and changes its plans)."""
        return self._bf_dirty

    @bf_dirty.setter
    def bf_dirty(self, value: bool) -> None:
        self._bf_dirty = value
        if value:
            self.bf.planned_to = None

    def _power_changed(self) -> None:
        self.bf_dirty = True

    def _limits(self, jobs: list[TraceJob]) -> list[float]:
        """Each job's time limit as the model gives it (greedy: no limits, the run time
        stands in)."""
        if self.greedy:
            return [j.duration_s for j in jobs]
        return [self.sched.limit(j.duration_s, j.time_limit_s) for j in jobs]

    # --- the events that reach slurmctld (the engine's loop) -----------------------------
    def submit(self, idx: int, now: float) -> None:
        """Job `idx` enters the queue (sbatch), to every partition it may use."""
        st, job = self.st, self.jobs[idx]
        self.pending[idx] = job
        self.pending_gpus += job.gpus
        self.pending_views[idx] = PendingJob(
            job.job_id, st.main.name, job.nodes, job.gpus_per_node(st.main.gpus_per_node),
            job.duration_s, job.submit_s, also=st.also)
        self.enqueue(idx, now)

    def end(self, idx: int, now: float) -> tuple[float, float] | None:
        """Job `idx`'s run reaches its end now, if it is still the run that was due to: its
        nodes freed; returns (its start, its time pending over all runs). None: a run cut
        short since (requeued or killed), whose end this was."""
        job = self.jobs[idx]
        if idx not in self.placed or self.start[idx] + job.duration_s != now:
            return None
        self.vacate(idx, now)
        self.running_gpus -= job.gpus_per_node(self.st.main.gpus_per_node) * job.nodes
        return self.start.pop(idx), self.waited.pop(idx)

    def ready_sooner(self, names: set[str], now: float) -> None:
        """These booting nodes come up sooner than when their jobs were placed (the daemon
        started warm instances for them): each job waiting for them starts when its last
        node is up now, its end moved with it (the old one is no longer its run's)."""
        for idx, placed in self.placed.items():
            chosen = [n for n, _ in placed]
            if self.start.get(idx, now) <= now or not any(n.name in names for n in chosen):
                continue
            booting = [n.ready_at for n in chosen if n.state == "booting"]
            start = now if not booting else (max(booting) if self.greedy
                                              else self.sched.configured(max(booting)))
            if start >= self.start[idx]:
                continue
            self.waited[idx] -= self.start[idx] - start
            self.start[idx] = start
            for n in chosen:
                if n.name in names:  # (a node it was powered up for: its only job)
                    n.free_at = start + self.limit[idx]
            self.st.push(start + self.jobs[idx].duration_s, END, idx)

    def kill(self, idx: int, now: float) -> None:
        """Running job `idx` dies with its nodes (a block taken back under it): gone, not
        requeued."""
        job = self.jobs[idx]
        self.vacate(idx, now)
        self.running_gpus -= job.gpus_per_node(self.st.main.gpus_per_node) * job.nodes
        self.start.pop(idx)
        self.waited.pop(idx, None)

    def after_event(self, now: float, slurms_own: bool) -> None:
        """What an event asks of slurmctld at once: the greedy model schedules on every
        event; the others ask for a main scheduler run (`slurms_own`: an event of Slurm's own
        - a submission, a node ready, a job's end - not a periodic wake-up)."""
        if self.greedy:
            self.schedule(now)
        elif slurms_own:
            self.main_wanted = True

    def queue_wake_ups(self, now: float) -> None:
        """The main scheduler run asked for, and a backfill cycle once something changed,
        queued on the agenda as slurmctld's threads would run them."""
        if self.greedy:
            return
        self.queue_main_run(now)
        if (self.bf_dirty and self.pending and not self.bf_due
                and self.sched.bf_interval > 0):
            self.bf_due = True
            self.st.push(now + self.sched.bf_interval, BACKFILL, -1)

    def main_run(self, now: float) -> None:
        """The main scheduler's queued run."""
        self.sched_due = False
        self.last_main_run = now
        self.schedule(now)

    def backfill(self, now: float) -> None:
        """Backfill's queued cycle."""
        self.bf_due = False
        self.bf.cycle(now)

    def _place(self, idx: int, job: TraceJob, now: float, headroom: int,
               k: PoolKnobs, allow: Callable[[Node], bool] | None = None) -> int:
        """Place one job in pool `k` if it fits; returns the nodes powered up (-1 if not).
        `allow`: backfill's filter, the nodes free of what it planned for other jobs."""
        chosen = self._choose(idx, job, now, headroom, k, allow)
        if chosen is None:
            return -1
        return self._start(idx, job, now, k, *chosen)

    def _choose(self, idx: int, job: TraceJob, now: float, headroom: int, k: PoolKnobs,
                allow: Callable[[Node], bool] | None = None
                ) -> tuple[list[Node], list[Node]] | None:
        """The nodes job `idx` would get in pool `k` now (all it runs on, those powered up
        for it), or None."""
        gpn = job.gpus_per_node(k.gpus_per_node)
        if job.nodes > k.max_nodes or gpn > k.gpus_per_node:
            return None
        resv = self.attached.get(idx)  # pointed at its reservation: runs there, nowhere else
        pool = self.st.nodes_of[k.name]
        live = [n for n in pool if n.state != "down" and n.resv == resv and not n.drain]
        if self.st.engine_blocks:  # (the scheduler's hot loop: no per-node call without)
            outlasts, lim = self.routing.outlasts, self.limit[idx]
            live = [n for n in live if not outlasts(n, max(now, n.ready_at), lim)]
        spare = self.spare(pool, headroom, allow, resv)
        if self.windowed:
            live, spare = self.clear(live, now, idx), self.clear(spare, now, idx)
        if job.nodes == 1:
            fits_now = [n for n in live if n.free >= gpn and (allow is None or allow(n))]
            if fits_now:
                return [min(fits_now, key=lambda n: (n.free, n.state != "up", n.name))], []
            return (spare[:1], spare[:1]) if spare else None
        whole = [n for n in live if n.jobs == 0 and n.free == n.gpus
                 and (allow is None or allow(n))]
        whole.sort(key=lambda n: (n.state != "up", n.name))
        need = job.nodes - len(whole)
        if need <= 0:
            return whole[:job.nodes], []
        if need <= len(spare):
            return whole + spare[:need], spare[:need]
        return None

    def clear(self, nodes: list[Node], now: float, idx: int) -> list[Node]:
        """The nodes job `idx` may be allocated now as far as window reservations go: none
        its time limit, counted from now, would reach (Slurm checks the allocation's end
        against reservations; a powered-up node's boot then delays the job's start, which
        the daemon's block margin covers: `Config.block_end_margin_s`)."""
        end = now + self.limit[idx]
        return [n for n in nodes if not any(s < end and now < e for s, e in n.windows)]

    @staticmethod
    def closed(n: Node, now: float) -> bool:
        """Is node `n` in a window reservation now?"""
        return any(s <= now < e for s, e in n.windows)

    @staticmethod
    def spare(pool: list[Node], headroom: int, allow: Callable[[Node], bool] | None,
               resv: str | None = None) -> list[Node]:
        """The powered-down nodes a job may power up. In its reservation `resv`: that
        reservation's, as Slurm powers up the nodes it allocates a job (ResumeProgram).
        Elsewhere: the first `headroom` of the pool outside reservations (the others are
        held or beyond the cap, so Slurm cannot use them)."""
        if resv is None and headroom <= 0:
            return []
        down = [n for n in pool if n.state == "down" and not n.drain and n.resv == resv]
        if resv is None:
            down = down[:headroom]
        return down if allow is None else [n for n in down if allow(n)]

    def _start(self, idx: int, job: TraceJob, now: float, k: PoolKnobs,
               chosen: list[Node], new: list[Node]) -> int:
        gpn = job.gpus_per_node(k.gpus_per_node)
        resv = self.attached.get(idx)
        st = self.st
        src = (self.routing.source(k, self.limit[idx], self.preempted.get(idx, 0), len(new),
                                   now) if new else None)
        launch = st.new_launch()
        self.power.up_many(new, now, src, launch)
        if new and st.daemon is not None:  # Slurm's resume hook for the job's new nodes
            st.daemon.resume([n.name for n in new], int(self.slurm_ids[idx]), k.name, now)
        booting = [n.ready_at for n in chosen if n.state == "booting"]
        start = now if not booting else (max(booting) if self.greedy
                                          else self.sched.configured(max(booting)))
        for n in chosen:
            n.free -= gpn
            st.touched.add(n.name)
            n.jobs += 1
            n.idle_since = None
            n.free_at = max(n.free_at if n.jobs > 1 else 0.0, start + self.limit[idx])
        self.placed[idx] = [(n, gpn) for n in chosen]
        self.placed_serial += 1
        self.start[idx] = start
        if job.nodes >= 2 and not job.carry_in:  # the launches a gang's nodes came from
            st.result.gang_spread.append(len({n.launch for n in chosen}))
        since = self.pending_since.pop(idx, None)
        if since is not None:  # a requeued job restarting
            st.result.restart_waits.append(start - since)
        self.waited[idx] = self.waited.get(idx, 0.0) + start - (
            job.submit_s if since is None else since)
        if resv is not None:
            self.started_in[job.job_id] = self.attached.pop(idx)
        st.push(start + job.duration_s, END, idx)
        self.running_gpus += gpn * job.nodes
        self.pending_gpus -= self.pending.pop(idx).gpus
        del self.pending_views[idx]
        self.eligible_at.pop(idx, None)
        self.pri.leave(idx)
        self.bf.expected.pop(idx, None)
        self.bf.planned_to = None
        return len(new)

    def pool_room(self, k: PoolKnobs, now: float) -> list[int]:
        """[headroom, largest free GPUs on a live node, whole free nodes] outside reservations."""
        # a governed pool's target: the daemon drains the nodes above it (so Slurm cannot
        # power them up); the other policies' targets are applied here
        st = self.st
        governed = k.mode is Mode.GOVERNED and st.daemon is None
        target = st.memory[k.name].target if governed else k.max_nodes
        head = max(0, min(target, k.max_nodes) - st.live_count[k.name])
        pool = st.nodes_of[k.name]
        if st.daemon is not None and head:  # the drained ones are not Slurm's to power up,
            # nor those in a window reservation now
            head = (sum(1 for n in pool if n.state == "down" and not n.drain)
                    if not self.windowed else
                    sum(1 for n in pool if n.state == "down" and not n.drain
                        and not self.closed(n, now)))
        if k is st.main and now < st.spot_down_until and st.daemon is None:
            head = 0  # spot launches fail (a storm; the other policies' reclaim backoff)
        live = [n for n in pool if n.state != "down" and n.resv is None and not n.drain]
        return [head, max((n.free for n in live), default=0),
                sum(1 for n in live if n.jobs == 0)]

    def queue_main_run(self, now: float) -> None:
        """Queue the main scheduler run something asked for (a Slurm event, or an update the
        daemon made) at slurmctld's background loop's next chance; the run serves every
        request made before it, as slurmctld's request count does."""
        if self.main_wanted and self.pending and not self.sched_due:
            self.sched_due = True
            self.st.push(self.sched.main_run(now, self.last_main_run), SCHED, -1)
        self.main_wanted = False

    def schedule(self, now: float) -> None:
        """Slurm's event-triggered scheduling pass: jobs in reservations first (they start on
        their nodes whatever the queue), then the queue as the model says."""
        if not self.pending:
            return
        for idx in [i for i in self.attached if i in self.pending]:
            self._place(idx, self.pending[idx], now, 0, self.st.main)
        if self.greedy:
            self._schedule_greedy(now)
        else:
            self._schedule_main(now)

    def pools_of(self, idx: int) -> list[PoolKnobs]:
        """The partitions a job may run in, in Slurm's PriorityTier order (a partition set
        DOWN: none starts there)."""
        if idx in self.steered:
            pools = [self.st.fallback] if self.st.fallback is not None else []
        else:
            pools = self.st.pools
        return [k for k in pools if k.name not in self.down] if self.down else pools

    def _schedule_greedy(self, now: float) -> None:
        """The greedy model: submit order, and any job that fits starts."""
        room = {k.name: self.pool_room(k, now) for k in self.st.pools}
        for idx, job in list(self.pending.items()):
            if idx in self.attached or self.eligible_at.get(idx, 0.0) > now:
                continue
            if all(r[0] == 0 and r[1] == 0 for r in room.values()):
                return
            for k in self.pools_of(idx):
                if self.try_start(idx, job, k, room, now):
                    break

    def try_start(self, idx: int, job: TraceJob, k: PoolKnobs, room: dict[str, list[int]],
                   now: float, allow: Callable[[Node], bool] | None = None) -> bool:
        """Start job `idx` in pool `k` now if it fits (`allow`: backfill's filter); the pool's
        room is brought up to date when it does."""
        if not self._may_fit(job, k, room[k.name]):
            return False
        if self._place(idx, job, now, room[k.name][0], k, allow) < 0:
            return False
        room[k.name] = self.pool_room(k, now)
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
        room = {k.name: self.pool_room(k, now) for k in self.st.pools}
        blocked: set[str] = set()
        for idx in self.by_priority(now):
            if idx in self.attached or self.eligible_at.get(idx, 0.0) > now:
                continue
            tried = [k for k in self.pools_of(idx) if k.name not in blocked]
            if not tried:
                continue
            job = self.pending[idx]
            for k in tried:
                if self.try_start(idx, job, k, room, now):
                    break
            else:
                blocked.update(k.name for k in tried)
                if len(blocked) + len(self.down) >= len(self.st.pools):
                    return

    # --- priorities (`priorities.py`), as the backfill and SimSlurm read them -----------
    def by_priority(self, now: float) -> list[int]:
        return self.pri.by_priority(now)

    def ordered(self) -> list[int]:
        return self.pri.ordered()

    @property
    def shown(self) -> dict[int, int]:
        return self.pri.shown

    def priority_factors(self, idx: int) -> tuple[float, float, float]:
        """Pending job `idx`'s weighted age, job size and fair-share factors as of Slurm's
        last priority calculation (none: a trace-given priority, or the greedy model)."""
        return self.pri.factors.get(idx, (0.0, 0.0, 0.0))

    def enqueue(self, idx: int, now: float) -> None:
        """A job enters the queue (submitted or requeued): Slurm gives it a priority now."""
        self.pri.enter(idx, now)
        if not self.greedy:
            self.bf_dirty = True

    def release_nodes(self, names: list[str], now: float, force: bool = False) -> None:
        """Power these nodes down (a policy's scale-down: one action). `force`
        (POWER_DOWN_FORCE): booting or busy ones too, what still runs there requeued."""
        released = False
        by_name = self.st.by_name
        for name in names:
            n = by_name[name]
            if force and n.state != "down":
                for idx in [i for i, placed in self.placed.items()
                            if any(m is n for m, _ in placed)]:
                    self.requeue_job(idx, now)
                self.power.down(n, now)
            elif n.state == "up" and n.jobs == 0:  # a busy node is never taken from its job
                self.power.down(n, now)
                released = True
        if released:
            self.st.result.scale_down_actions += 1

    def warm_nodes(self, names: list[str], now: float) -> None:
        st = self.st
        up = [name for name in names if st.by_name[name].state == "down"]
        self.power.up_many([st.by_name[name] for name in up], now, launch=st.new_launch())
        if up and st.daemon is not None:  # Slurm's resume hook, for no job
            st.daemon.resume(up, None, st.by_name[up[0]].pool, now)

    def steer(self, idx: int) -> None:
        """Pending job `idx` may now run on the on-demand fallback only."""
        fallback = self.st.fallback
        assert fallback is not None
        self.steered.add(idx)
        self.pending_views[idx] = self.pending_views[idx]._replace(pool=fallback.name, also=())
        self.bf_dirty = True

    def partitions(self, idx: int) -> tuple[str, ...]:
        if idx in self.steered:
            return (self.st.fallback.name,) if self.st.fallback is not None else ()
        if self.st.block is not None:  # (-p gpu,gpu-od,gpu-block: its demand is the main's)
            return (self.st.main.name, *self.st.also, self.st.block.name)
        return (self.st.main.name, *self.st.also)

    @staticmethod
    def _saved(job: TraceJob, signalled: float | None, start: float, ran: float) -> float:
        """How much of a run cut short its saves keep: its last periodic checkpoint, or what
        it saved on the signal before the requeue (a job that saves on one)."""
        periodic = (math.floor(ran / job.checkpoint_s) * job.checkpoint_s
                    if job.checkpoint_s else 0.0)
        on_signal = (signalled - start if job.saves_on_signal and signalled is not None
                     and signalled >= start else 0.0)
        return min(ran, max(periodic, on_signal))

    def signal(self, idx: int, now: float) -> None:
        """Slurm signalled the running job (the daemon's grace_signal): it saves now, if it
        is a job that does (its first signal in this run counts)."""
        if idx in self.placed:
            self.signalled_at.setdefault(idx, now)

    def requeue_job(self, idx: int, now: float, preempted: bool = True) -> None:
        """Slurm requeues a running job (all its nodes): pending again, eligible after the
        requeue delay. `preempted`: spot took its node (counts toward max_preemptions); a
        node failure does not."""
        st, job = self.st, self.jobs[idx]
        delay = st.spot.requeue_delay_s if st.spot is not None else 120.0
        signalled = self.signalled_at.get(idx)  # (the run's signal ends with it: vacate)
        self.vacate(idx, now)
        start = self.start.pop(idx)
        g = job.gpus_per_node(st.main.gpus_per_node) * job.nodes
        ran = max(0.0, now - start)
        saved = self._saved(job, signalled, start, ran)
        st.result.busy_gpu_s += g * ran
        st.result.lost_gpu_s += g * (ran - saved)
        st.result.saved_gpu_s += g * saved
        if saved > 0:  # the rerun resumes from the save: only the rest is left to run
            job = self.jobs[idx] = replace(job, duration_s=job.duration_s - saved)
        self.running_gpus -= g
        if start > now:  # allocated but still waiting for its nodes to boot
            self.waited[idx] -= start - now
        st.result.requeues += 1
        if preempted:
            self.preempted[idx] = self.preempted.get(idx, 0) + 1
        pool = st.main.name
        # the daemon's policies: its interruption pass decides (through SimSlurm, after this)
        if (st.daemon is None and st.spot is not None and st.fallback is not None
                and self.preempted.get(idx, 0) >= st.spot.max_preemptions):
            self.steered.add(idx)
            pool = st.fallback.name
        self.pending_since[idx] = now
        self.eligible_at[idx] = now + delay
        self.pending[idx] = job
        self.pending_gpus += job.gpus
        self.pending_views[idx] = PendingJob(job.job_id, pool, job.nodes,
                                             job.gpus_per_node(st.main.gpus_per_node),
                                             job.duration_s, job.submit_s,
                                             also=() if idx in self.steered else st.also)
        # greedy: a requeued job keeps its place in submit order
        self.pending = dict(sorted(self.pending.items()))
        self.enqueue(idx, now)
        st.push(now + delay, ELIGIBLE, idx)

    def vacate(self, idx: int, now: float) -> None:
        """A run is over (ended, requeued or killed): its nodes' GPUs are free again, and the
        work it did on paid capacity is counted."""
        st = self.st
        start = self.start[idx]
        ran = max(0.0, now - start)
        self.signalled_at.pop(idx, None)  # (a signal is to one run)
        self.placed_serial += 1
        for m, g in self.placed.pop(idx):
            if ran and st.policy.offline_cost:  # the oracle's timeline of each node's runs
                st.node_runs.setdefault(m.name, []).append((start, now))
            m.free += g
            st.touched.add(m.name)
            m.jobs -= 1
            if m.jobs == 0 and m.state == "up":
                m.idle_since = now
            if m.paid is not None:
                st.result.paid_busy_gpu_s += g * ran
