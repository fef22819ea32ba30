"""The job's signal before an interruption's requeue (a pool's `grace_signal`,
docs/spot.md): whether a warning leaves time for one, signalling a job and recording its
grace, and what each grace needs at a pass. The interruption pass (interruptions.py) drains,
requeues and powers down; this module says when. Graces are store rows, so a daemon killed
during one finishes it after its restart: it signals no second time and requeues on time.

A grace's times are stored as true times (AWS's clock, timeframe.py) and read back into the
daemon's steady time: a daemon restarted after the host's clock was stepped reads the same
deadline (before: stored in the old process's frame, a -1 h correction made a restarted
daemon requeue an hour late, past EC2's two-minute deadline). And a spot or reclaim warning's
grace never ends more than EC2's notice after the pass that reads it, whatever the clock did.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from enum import Enum

from slurmscale import timeframe
from slurmscale.audit import Event, Kind
from slurmscale.config import INTERRUPTION_NOTICE_S, Config, GraceSignal, SignalTarget
from slurmscale.daemon.executor.effects import Effects, EffectStore, Signal
from slurmscale.lifecycles import GraceState
from slurmscale.policy.health import REPLACED_KIND
from slurmscale.slurm import reasons
from slurmscale.slurm.reasons import Why
from slurmscale.store.rows import GraceRow, InstanceRow, PreemptionCause, utc

log = logging.getLogger(__name__)

# (the pool's signal, when its jobs are requeued if still there)
Window = tuple[GraceSignal, datetime]
# warnings whose deadline is EC2's two-minute notice (a block's or a scheduled event's is later)
NOTICED = frozenset({PreemptionCause.INTERRUPTED.value, PreemptionCause.RECLAIMED.value})


def stored(t: datetime) -> datetime:
    """A steady time as a grace row keeps it: true time."""
    return datetime.fromtimestamp(timeframe.FRAME.to_true(t.timestamp()), t.tzinfo)


def read(t: datetime) -> datetime:
    """A grace row's (true) time as a steady time."""
    u = utc(t)
    return datetime.fromtimestamp(timeframe.FRAME.from_true(u.timestamp()), u.tzinfo)


class GraceStep(Enum):
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
        signal=gs.signal, signalled_at=stored(now), requeue_at=stored(requeue_at),
        state=GraceState.SIGNALLED.value, cause=str(cause), kind=kind,
        notice_time=notice_time), full=gs.target is SignalTarget.FULL, again=again, said=(
            f"job {job} on {inst.node}: SIG{gs.signal} ({gs.target.value}) for {kind} at "
            f"{notice_time}; requeued at {requeue_at:%H:%M:%S}Z "
            f"({(requeue_at - now).total_seconds():.0f}s, EC2's deadline less "
            f"{gs.margin_s:.0f}s) unless it leaves the node first"))


def step(g: GraceRow, on_node: set[str], requeued_since: bool, now: datetime) -> GraceStep:
    """Pure: a grace's next step from what Slurm shows on its node (`on_node`: the jobs
    there) and whether slurmscale requeued the job since its signal (its instance went
    first, or a gang's other node's grace requeued it)."""
    if requeued_since:
        return GraceStep.REQUEUED
    if g.job_id not in on_node:
        return GraceStep.LEFT
    return GraceStep.REQUEUE if now >= g.requeue_at else GraceStep.WAIT


class Graces:
    def __init__(self, cfg: Config, store: EffectStore, effects: Effects,
                 event: Event) -> None:
        """`effects`: the pass's executor (`PassContext.effects`)."""
        self.cfg = cfg
        self.store = store
        self.effects = effects
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

    def open(self, now: datetime | None = None) -> list[GraceRow]:
        """The graces still running, their times as aware UTC in the steady time; given
        `now`, a warning's requeue no later than EC2's notice from it (a deadline read
        across a clock step the daemon could not measure)."""
        rows = self.store.graces()
        latest = None if now is None else now + timedelta(seconds=INTERRUPTION_NOTICE_S)
        for g in rows:
            g.signalled_at, g.requeue_at = read(g.signalled_at), read(g.requeue_at)
            if latest is not None and g.cause in NOTICED and g.requeue_at > latest:
                log.warning("job %s's grace on %s ended %s, later than EC2's notice from now: "
                            "requeued by %s", g.job_id, g.node, g.requeue_at, latest)
                g.requeue_at = latest
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
        """`g` as `open` gave it (steady times): written back in true times."""
        said = g.signalled_at, g.requeue_at
        g.state, g.ended_at = state.value, stored(now)
        g.signalled_at, g.requeue_at = stored(g.signalled_at), stored(g.requeue_at)
        self.store.put_grace(g)
        g.signalled_at, g.requeue_at = said
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
