"""The job's signal before an interruption's requeue (a pool's `grace_signal`,
docs/spot.md): whether a warning leaves time for one, signalling a job and recording its
grace, and what each grace needs at a pass. The interruption pass (interruptions.py) drains,
requeues and powers down; this module says when. Graces are store rows, so a daemon killed
during one finishes it after its restart: it signals no second time and requeues on time.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from enum import Enum

from slurmscale.audit import Event, Kind
from slurmscale.config import Config, GraceSignal, SignalTarget
from slurmscale.daemon.effects import Effects, EffectStore, Signal
from slurmscale.lifecycles import GraceState
from slurmscale.policy.health import REPLACED_KIND
from slurmscale.slurm import reasons
from slurmscale.slurm.protocol import SlurmClient
from slurmscale.slurm.reasons import Why
from slurmscale.store.rows import GraceRow, InstanceRow, PreemptionCause, utc

log = logging.getLogger(__name__)

# (the pool's signal, when its jobs are requeued if still there)
Window = tuple[GraceSignal, datetime]


class Step(Enum):
    """What one grace needs at a pass."""

    WAIT = "wait"  # still in its grace
    REQUEUED = "requeued"  # requeued off some node since its signal: over
    LEFT = "left"  # off the node on its own (ended, or requeued itself): over
    REQUEUE = "requeue"  # still there at requeue_at: requeue it now


def signal(job: str, inst: InstanceRow, window: Window, cause: PreemptionCause | str,
           kind: str, notice_time: str, now: datetime, again: bool = False) -> Signal:
    """The job's signal for `window` (the pool's signal, its requeue time) and its grace's
    row, as an effect. `again`: the job is in its grace for another node's warning (a
    gang's): recorded for this node too, not signalled."""
    gs, requeue_at = window
    return Signal(GraceRow(
        job_id=job, node=inst.node, instance_id=inst.instance_id, pool=inst.pool,
        signal=gs.signal, signalled_at=now, requeue_at=requeue_at,
        state=GraceState.SIGNALLED.value, cause=str(cause), kind=kind,
        notice_time=notice_time), full=gs.target is SignalTarget.FULL, again=again, said=(
            f"job {job} on {inst.node}: SIG{gs.signal} ({gs.target.value}) for {kind} at "
            f"{notice_time}; requeued at {requeue_at:%H:%M:%S}Z "
            f"({(requeue_at - now).total_seconds():.0f}s, EC2's deadline less "
            f"{gs.margin_s:.0f}s) unless it leaves the node first"))


def step(g: GraceRow, on_node: set[str], requeued_since: bool, now: datetime) -> Step:
    """Pure: a grace's next step from what Slurm shows on its node (`on_node`: the jobs
    there) and whether slurmscale requeued the job since its signal (its instance went
    first, or a gang's other node's grace requeued it)."""
    if requeued_since:
        return Step.REQUEUED
    if g.job_id not in on_node:
        return Step.LEFT
    return Step.REQUEUE if now >= g.requeue_at else Step.WAIT


class Graces:
    def __init__(self, cfg: Config, store: EffectStore, slurm: SlurmClient,
                 event: Event) -> None:
        self.cfg = cfg
        self.store = store
        self.effects = Effects(slurm, store, event)
        self.event = event

    def window(self, pool_name: str, deadline: datetime | None, now: datetime) -> Window | None:
        """The pool's signal and when its jobs are requeued if still there; None when it has
        none or the warning left no time (a late message: requeued at once)."""
        try:
            gs = self.cfg.pool(pool_name).grace_signal
        except KeyError:
            return None
        if gs is None or deadline is None:
            return None
        requeue_at = deadline - timedelta(seconds=gs.margin_s)
        return (gs, requeue_at) if requeue_at > now else None

    def open(self) -> list[GraceRow]:
        """The graces still running, their times as aware UTC."""
        rows = self.store.graces()
        for g in rows:
            g.signalled_at, g.requeue_at = utc(g.signalled_at), utc(g.requeue_at)
        return rows

    def start(self, job: str, inst: InstanceRow, window: Window, cause: PreemptionCause,
              kind: str, notice_time: str, now: datetime, again: bool = False) -> bool:
        """Signal the job and record its grace (`signal`); False when Slurm refused (requeue
        it now)."""
        return self.effects.apply([signal(job, inst, window, cause, kind, notice_time, now,
                                          again)])[0].taken

    def requeued_since(self, g: GraceRow) -> bool:
        """Was the job requeued by slurmscale since its signal (off any node)?"""
        return any(utc(p.at) >= g.signalled_at for p in self.store.preemptions(g.job_id))

    def close(self, g: GraceRow, state: GraceState, now: datetime) -> None:
        g.state, g.ended_at = state.value, now
        self.store.put_grace(g)
        if state is GraceState.ENDED:
            self.event(Kind.JOB_LEFT_IN_GRACE, f"job {g.job_id} left {g.node} "
                       f"{(now - g.signalled_at).total_seconds():.0f}s after its "
                       f"SIG{g.signal}, {max(0.0, (g.requeue_at - now).total_seconds()):.0f}s "
                       "before its requeue", node=g.node)

    @staticmethod
    def reason(g: GraceRow) -> str:
        """The node's drain reason, as the warning's handling set it (a closed block's node
        is not drained: the reason its requeue gives)."""
        if g.cause == PreemptionCause.BLOCK_END:
            return f"{g.pool}'s capacity block window closed at {g.notice_time}"
        if g.cause == PreemptionCause.UNHEALTHY:  # (a scheduled event's: see HealthPass)
            return reasons.reason(Why.UNHEALTHY, f"{g.kind.removeprefix(REPLACED_KIND)} "
                                  f"from {g.notice_time}")
        why = Why.RECLAIMED if g.cause == PreemptionCause.RECLAIMED else Why.INTERRUPTED
        return reasons.reason(why, g.notice_time)
