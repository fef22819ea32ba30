"""The simulated Slurm's scheduling, as `sim/slurm_model.py` parameterises it: placement
(single-node jobs packed by GPUs, best fit; gangs on whole idle nodes, all at once; a job
placed on powered-down nodes powers them up and starts once the last has booted), the main
scheduler (priority order, a partition blocked after its first job that cannot start; or the
older greedy model), multifactor priorities, backfill by time limits and the start estimates
squeue shows; and what slurmctld does when the daemon (through `SimSlurm`) or the other
policies tell it: power nodes down or up, requeue a job, move a job to the on-demand
partition."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from slurmscale.policy.model import Mode, PendingJob, PoolKnobs
from slurmscale.sim.paid import PaidRouting
from slurmscale.sim.slurm_model import NodePlan, factors, gang_start, size_share
from slurmscale.sim.trace import TraceJob
from slurmscale.sim.world import ELIGIBLE, END, ODCR, SCHED, Node


class SlurmScheduler(PaidRouting):
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
        pool = self.nodes_of[k.name]
        live = [n for n in pool if n.state != "down" and n.resv == resv and not n.drain]
        if self.paid.blocks:  # (the scheduler's hot loop: no per-node call without blocks)
            live = [n for n in live if not self._outlasts(n, max(now, n.ready_at), idx)]
        spare = self._spare(pool, headroom, allow, resv)
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

    @staticmethod
    def _spare(pool: list[Node], headroom: int, allow: Callable[[Node], bool] | None,
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
        src = self._paid_source(k, idx, len(new), now) if new else None
        launch = self.new_launch()
        for n in new:
            self._power_up(n, now, src, launch)
        if new and self.daemon is not None:  # Slurm's resume hook for the job's new nodes
            self.daemon.resume([n.name for n in new], int(self.slurm_ids[idx]), k.name, now)
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
        if job.nodes >= 2 and not job.carry_in:  # the launches a gang's nodes came from
            self.result.gang_spread.append(len({n.launch for n in chosen}))
        since = self.pending_since.pop(idx, None)
        if since is not None:  # a requeued job restarting
            self.result.restart_waits.append(start - since)
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
        if k is self.main and now < self.spot_down_until and self.daemon is None:
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
            self._place(idx, self.pending[idx], now, 0, self.main)
        if self.greedy:
            self._schedule_greedy(now)
        else:
            self._schedule_main(now)

    def _pools_of(self, idx: int) -> list[PoolKnobs]:
        """The partitions a job may run in, in Slurm's PriorityTier order."""
        if idx in self.steered:
            return [self.fallback] if self.fallback is not None else []
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
                   now: float, allow: Callable[[Node], bool] | None = None) -> bool:
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
        size = size_share(job.nodes, job.gpus_per_node(self.main.gpus_per_node) * job.nodes,
                          self.cluster_nodes, self.main.gpus_per_node)
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

                def fits(n: Node, g: int = gpus, t: float = lim) -> bool:
                    return busy[n.name].fits_now(g, t)
                if self._try_start(idx, job, k, room, now, fits):
                    for n, g in self.placed[idx]:
                        busy[n.name].add(now, self.start[idx] + lim, g)
                    break
            else:
                self._expect(idx, self._plan_later(idx, job, now, horizon, busy, room, held))

    def _plan_base(self, now: float) -> tuple[dict[str, NodePlan], dict[str, list[Node]]]:
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

    def _earliest(self, idx: int, job: TraceJob, pool: list[Node], gpn: int, now: float,
                  horizon: float, busy: dict[str, NodePlan]
                  ) -> tuple[float, list[Node]] | None:
        """Job `idx`'s earliest start on `pool`'s nodes by the plan, and the nodes."""
        lim = self.limit[idx]
        if job.nodes == 1:  # (the hot loop of a busy queue: kept flat)
            best, at = None, horizon
            for n in pool:
                plan = busy[n.name]
                runs = plan._runs.get(gpn)  # (NodePlan.runs' cache read here: ~20 M a run)
                if runs is None:
                    runs = plan.runs(gpn)
                for lo, hi in runs:
                    if lo >= at:
                        break
                    if hi - lo >= lim:
                        if not (self.paid.blocks and self._outlasts(n, lo, idx)):
                            best, at = n, lo
                        break
                if at <= now:  # no node starts it sooner: the first such node is the one
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

    def _held(self, busy: dict[str, NodePlan]) -> dict[str, list[Node]]:
        """Nodes in a hold, per pool: Slurm's backfill sees them taken until the reservation
        ends (for any job but the hold's own, which is placed on them, not planned). Marked in
        the cycle's plan."""
        out: dict[str, list[Node]] = {}
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
                    held: dict[str, list[Node]]) -> float | None:
        """Plan job `idx` at its earliest start in any of its pools (within the window): the
        nodes it would get are marked busy from then for its time limit. Returns the start
        (None: none within the window)."""
        lim = self.limit[idx]
        best: tuple[float, list[Node], int] | None = None
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
            self.result.scale_down_actions += 1

    def warm_nodes(self, names: list[str], now: float) -> None:
        up = [name for name in names if self.by_name[name].state == "down"]
        launch = self.new_launch()
        for name in up:
            self._power_up(self.by_name[name], now, launch=launch)
        if up and self.daemon is not None:  # Slurm's resume hook, for no job
            self.daemon.resume(up, None, self.by_name[up[0]].pool, now)

    def steer(self, idx: int) -> None:
        """Pending job `idx` may now run on the on-demand fallback only."""
        assert self.fallback is not None
        self.steered.add(idx)
        self.pending_views[idx] = self.pending_views[idx]._replace(pool=self.fallback.name, also=())
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
            return (self.fallback.name,) if self.fallback is not None else ()
        return (self.main.name, *self.also)

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
        job = self.jobs[idx]
        delay = self.spot.requeue_delay_s if self.spot is not None else 120.0
        signalled = self.signalled_at.get(idx)  # (the run's signal ends with it: _vacate)
        self._vacate(idx, now)
        start = self.start.pop(idx)
        g = job.gpus_per_node(self.main.gpus_per_node) * job.nodes
        ran = max(0.0, now - start)
        saved = self._saved(job, signalled, start, ran)
        self.result.busy_gpu_s += g * ran
        self.result.lost_gpu_s += g * (ran - saved)
        self.result.saved_gpu_s += g * saved
        if saved > 0:  # the rerun resumes from the save: only the rest is left to run
            job = self.jobs[idx] = replace(job, duration_s=job.duration_s - saved)
        self.running_gpus -= g
        if start > now:  # allocated but still waiting for its nodes to boot
            self.waited[idx] -= start - now
        self.result.requeues += 1
        if preempted:
            self.preempted[idx] = self.preempted.get(idx, 0) + 1
        pool = self.main.name
        # the daemon's policies: its interruption pass decides (through SimSlurm, after this)
        if (self.daemon is None and self.spot is not None and self.fallback is not None
                and self.preempted.get(idx, 0) >= self.spot.max_preemptions):
            self.steered.add(idx)
            pool = self.fallback.name
        self.pending_since[idx] = now
        self.eligible_at[idx] = now + delay
        self.pending[idx] = job
        self.pending_views[idx] = PendingJob(job.job_id, pool, job.nodes,
                                             job.gpus_per_node(self.main.gpus_per_node),
                                             job.duration_s, job.submit_s,
                                             also=() if idx in self.steered else self.also)
        # greedy: a requeued job keeps its place in submit order
        self.pending = dict(sorted(self.pending.items()))
        self._queue(idx, now)
        self._push(now + delay, ELIGIBLE, idx)
