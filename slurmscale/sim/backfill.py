"""The simulated Slurm's backfill scheduler: its cycles (in priority order, start what can
start now without taking resources planned for a job before it; plan each job that cannot at
its earliest start, by the running jobs' time limits, within bf_window) and the start
estimates squeue shows for pending jobs (what the daemon's hold rule reads). Beside the
main scheduler of `scheduler.py`, as slurmctld's backfill plugin is beside its main loop:
it places jobs through the same calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from slurmscale.policy.model import PoolKnobs
from slurmscale.sim.paid import PaidRouting
from slurmscale.sim.slurm_model import NodePlan, SlurmModel, gang_start
from slurmscale.sim.state import SimState
from slurmscale.sim.trace import TraceJob
from slurmscale.sim.world import ODCR, Node


class Slurmctld(Protocol):
    """What the backfill reads and asks of the simulated slurmctld (`scheduler.py`'s
    SimSlurmctld): its queue, its jobs' limits and placements, and its placement calls."""

    st: SimState
    sched: SlurmModel
    routing: PaidRouting
    greedy: bool
    bf_dirty: bool
    windowed: bool  # a node is in a window reservation (Node.windows)
    jobs: list[TraceJob]
    limit: list[float]
    pending: dict[int, TraceJob]
    attached: dict[int, str]
    eligible_at: dict[int, float]
    placed: dict[int, list[tuple[Node, int]]]
    start: dict[int, float]

    def by_priority(self, now: float) -> list[int]: ...

    def ordered(self) -> list[int]: ...

    def pools_of(self, idx: int) -> list[PoolKnobs]: ...

    def pool_room(self, k: PoolKnobs, now: float) -> list[int]: ...

    def spare(self, pool: list[Node], headroom: int, allow: Callable[[Node], bool] | None,
              resv: str | None = None) -> list[Node]: ...

    def try_start(self, idx: int, job: TraceJob, k: PoolKnobs, room: dict[str, list[int]],
                  now: float, allow: Callable[[Node], bool] | None = None) -> bool: ...


class SimBackfill:
    """`slurm`'s backfill: `expected` each pending job's planned start (squeue's StartTime),
    `planned_to` how far down the queue they were planned (None: to plan again, something
    changed)."""

    def __init__(self, slurm: Slurmctld) -> None:
        self.slurm = slurm
        self.expected: dict[int, float] = {}
        self.planned_to: int | None = None
        # what could not start now / found no start within the window, per (pool, several
        # nodes?), as (nodes, GPUs a node, time limit), since the plan last changed: a job
        # asking as much or more of the same plan cannot either (a long queue's tail is
        # mostly such jobs; each was a walk of the pool's nodes)
        self._unstartable: dict[tuple[str, bool], list[tuple[int, int, float]]] = {}
        self._unplannable: dict[tuple[str, bool], list[tuple[int, int, float]]] = {}
        # each pool's nodes a job may be planned on, with their plans, while no job started
        # (made once a cycle, not for each job planned: a start changes node states and the
        # room)
        self._candidates: dict[str, list[tuple[Node, NodePlan]]] = {}

    def _plan_changed(self) -> None:
        self._unstartable.clear()
        self._unplannable.clear()

    @staticmethod
    def _known(failed: dict[tuple[str, bool], list[tuple[int, int, float]]],
               key: tuple[str, bool], nodes: int, gpn: int, lim: float) -> bool:
        """Did a job asking no more than this (nodes, GPUs a node, limit) fail, on the
        same plan? (Fitting is monotone in each: more of any fits nowhere less would not.)"""
        for n, g, t in failed.get(key, ()):  # (a loop, not any(): most lists are short)
            if n <= nodes and g <= gpn and t <= lim:
                return True
        return False

    @staticmethod
    def _failed(failed: dict[tuple[str, bool], list[tuple[int, int, float]]],
                key: tuple[str, bool], nodes: int, gpn: int, lim: float) -> None:
        """Remember a failure (one `_known` did not know): those asking as much or more of
        each go (it tells for them), so the list `_known` reads stays short."""
        kept = [(n, g, t) for n, g, t in failed.get(key, ())
                if not (n >= nodes and g >= gpn and t >= lim)]
        kept.append((nodes, gpn, lim))
        failed[key] = kept

    def cycle(self, now: float) -> None:
        """One backfill cycle: in priority order, start what can start now without taking
        resources planned for a job before it; plan each job that cannot at its earliest
        start, by the running jobs' time limits, within bf_window."""
        slurm = self.slurm
        m = slurm.sched
        if not slurm.pending or not slurm.bf_dirty:
            return
        slurm.bf_dirty = False
        room = {k.name: slurm.pool_room(k, now) for k in slurm.st.pools}
        if not any(self._room_left(r) for r in room.values()):
            return  # nothing can start now: a plan would change nothing
        busy, held = self._plan_base(now)
        horizon = now + m.bf_window
        tested = 0
        for idx in list(slurm.by_priority(now)):
            if tested >= m.bf_max_job_test or not any(map(self._room_left, room.values())):
                return
            if idx in slurm.attached or slurm.eligible_at.get(idx, 0.0) > now:
                continue
            tested += 1
            job = slurm.pending[idx]
            lim = slurm.limit[idx]
            for k in slurm.pools_of(idx):
                gpus = job.gpus_per_node(k.gpus_per_node)
                key = (k.name, job.nodes > 1)
                if self._known(self._unstartable, key, job.nodes, gpus, lim):
                    continue

                def fits(n: Node, g: int = gpus, t: float = lim) -> bool:
                    return busy[n.name].fits_now(g, t)
                if slurm.try_start(idx, job, k, room, now, fits):
                    for n, g in slurm.placed[idx]:
                        busy[n.name].add(now, slurm.start[idx] + lim, g)
                    self._plan_changed()
                    self._candidates.clear()
                    break
                self._failed(self._unstartable, key, job.nodes, gpus, lim)
            else:
                self._expect(idx, self._plan_later(idx, job, now, horizon, busy, room, held))

    def _plan_base(self, now: float) -> tuple[dict[str, NodePlan], dict[str, list[Node]]]:
        """A backfill cycle's starting plan: every running job's nodes busy until its time
        limit, held nodes until their reservation ends, nodes in a window reservation for
        its span."""
        slurm = self.slurm
        self._plan_changed()
        self._candidates.clear()
        busy = {n.name: NodePlan(n.gpus, now) for n in slurm.st.nodes}
        for idx, placed in slurm.placed.items():
            end = slurm.start[idx] + slurm.limit[idx]
            for n, g in placed:  # held from now (a booting node's job starts later)
                busy[n.name].add(now, end, g)
        if slurm.windowed:  # a window reservation: its nodes taken for its span
            for n in slurm.st.nodes:
                for start, end in n.windows:
                    if end > now:
                        busy[n.name].add(start, end, n.gpus)
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
        slurm = self.slurm
        m = slurm.sched
        if slurm.greedy:
            return
        # (the last calculated priorities, as backfill's last cycle used: recalculating here
        # would move Slurm's own calculation, so holds on and off would differ by it)
        order = slurm.ordered()
        last = next((p for p, i in enumerate(order) if slurm.jobs[i].nodes > 1
                     and now - slurm.jobs[i].submit_s >= waited_s
                     and i not in slurm.attached), -1)
        if self.planned_to == last:
            return  # nothing changed that would change the plans
        self.planned_to = last
        self.expected = {}
        if last < 0:
            return
        room = {k.name: slurm.pool_room(k, now) for k in slurm.st.pools}
        busy, held = self._plan_base(now)
        horizon = now + m.bf_window
        tested = 0
        for idx in order[:last + 1]:
            if tested >= m.bf_max_job_test:
                return
            if idx in slurm.attached or slurm.eligible_at.get(idx, 0.0) > now:
                continue
            tested += 1
            self._expect(idx, self._plan_later(idx, slurm.pending[idx], now, horizon, busy,
                                               room, held))

    def _earliest(self, idx: int, job: TraceJob, pool: list[tuple[Node, NodePlan]], gpn: int,
                  now: float, horizon: float) -> tuple[float, list[Node]] | None:
        """Job `idx`'s earliest start on `pool`'s nodes (each with its plan), and the nodes."""
        lim, paid, blocks = self.slurm.limit[idx], self.slurm.st.paid, self.slurm.st.engine_blocks
        if job.nodes == 1:  # (the hot loop of a busy queue: kept flat)
            best, at = None, horizon
            for n, plan in pool:
                runs = plan._runs.get(gpn)  # (NodePlan.runs' cache read here: ~20 M a run)
                if runs is None:
                    runs = plan.runs(gpn)
                for lo, hi in runs:
                    if lo >= at:
                        break
                    if hi - lo >= lim:
                        if not (blocks and self.slurm.routing.outlasts(n, lo, lim)):
                            best, at = n, lo
                        break
                if at <= now:  # no node starts it sooner: the first such node is the one
                    break
            return None if best is None else (at, [best])
        windows = [plan.windows(n.gpus, lim, horizon) for n, plan in pool]
        for i, (n, _) in enumerate(pool):  # a block node: only while the job ends first
            if blocks and n.paid is not None and n.paid != ODCR:
                last = paid.close_s(paid.blocks[n.paid]) - lim
                windows[i] = [(lo, min(hi, last)) for lo, hi in windows[i] if lo <= last]
        found = gang_start(windows, job.nodes)
        if found is None:
            return None
        return found[0], [pool[i][0] for i in found[1]]

    def _held(self, busy: dict[str, NodePlan]) -> dict[str, list[Node]]:
        """Nodes in a hold, per pool: Slurm's backfill sees them taken until the reservation
        ends (for any job but the hold's own, which is placed on them, not planned). Marked in
        the cycle's plan."""
        out: dict[str, list[Node]] = {}
        daemon = self.slurm.st.daemon
        if daemon is None or not daemon.holding:
            return out
        for n in self.slurm.st.nodes:
            end = None if n.resv is None else daemon.reservation_end(n.resv)
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
        slurm = self.slurm
        lim = slurm.limit[idx]
        best: tuple[float, list[Node], int] | None = None
        for k in slurm.pools_of(idx):
            gpn = job.gpus_per_node(k.gpus_per_node)
            if job.nodes > k.max_nodes or gpn > k.gpus_per_node:
                continue
            key = (k.name, job.nodes > 1)
            if self._known(self._unplannable, key, job.nodes, gpn, lim):
                continue
            pool = self._candidates.get(k.name)
            if pool is None:
                nodes = slurm.st.nodes_of[k.name]
                chosen = [n for n in nodes if n.state != "down" and n.resv is None]
                chosen += slurm.spare(nodes, room[k.name][0], None)
                chosen += held.get(k.name, [])
                pool = self._candidates[k.name] = [(n, busy[n.name]) for n in chosen]
            found = self._earliest(idx, job, pool, gpn, now, horizon)
            if found is None:
                self._failed(self._unplannable, key, job.nodes, gpn, lim)
            elif best is None or found[0] < best[0]:
                best = (found[0], found[1], gpn)
        if best is None:
            return None
        t, nodes, gpn = best
        for n in nodes:
            busy[n.name].add(t, t + lim, gpn)
        self._plan_changed()
        return t
