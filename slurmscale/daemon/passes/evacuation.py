"""What the interruption pass does about an EC2 event and a node whose jobs lose their run,
decided from what it read, as effects (effects.py) - nothing here calls Slurm, EC2 or the
store. Karpenter's shape: a message becomes one action (`on_event`), executed apart from the
decision; an evacuation becomes the node's drain and, for each job on it, its signal or its
requeue with what follows once taken (`plan`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from slurmscale.audit import Kind
from slurmscale.cloud.eventbridge import Ec2Event, EventKind, aws_time
from slurmscale.config import INTERRUPTION_NOTICE_S, Config
from slurmscale.daemon.executor import edits
from slurmscale.daemon.executor.effects import Chain, Effect, Heard, Record, Say
from slurmscale.daemon.passes.graces import Window, signal
from slurmscale.policy.health import iso
from slurmscale.slurm import reasons
from slurmscale.slurm.reasons import Why
from slurmscale.store.rows import (
    NOT_PREEMPTED,
    GraceRow,
    InstanceRow,
    PreemptionCause,
    PreemptionRow,
)

SPOT_RECLAIM = "Server.SpotInstanceTermination"
GONE_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})

# How long an evacuated node's power-down waits for Slurm to finish completing its requeued
# jobs there: KillWait (30 s by default) and an epilog's time; a node whose slurmd is gone
# never reports, and is powered down regardless after this.
COMPLETING_WAIT_S = 60.0
# The same for an instance already gone (terminated, vanished): its slurmd never reports, so
# the wait only keeps the power-down out of the second the other nodes revoked the job's
# credential in (Slurm's revocation test compares whole seconds)
GONE_WAIT_S = 2.0


@dataclass(frozen=True)
class Lost:
    """Why a node's jobs lose their run, as each lost run is recorded: `cause`, `kind` (what
    it came from: the EC2 event's name, `vanished:<why>`, a replacement's), `notice_time`
    and the node's drain `reason`."""

    cause: PreemptionCause | str
    kind: str
    notice_time: str
    reason: str


@dataclass(frozen=True)
class Evacuate:
    """A message's action: the node is evacuated (`InterruptionPass.evacuate`) for `lost`;
    `deadline`: when EC2 takes the instance back (a grace is possible before it);
    `reclaimed`: spot capacity taken back (its offering backs off); `reservation_changed`:
    an interruptible reservation's free count fell (read it again)."""

    lost: Lost
    wait_s: float = COMPLETING_WAIT_S
    deadline: datetime | None = None
    reclaimed: bool = False
    reservation_changed: bool = False


def on_event(ev: Ec2Event, inst: InstanceRow | None, now: datetime) -> Evacuate | list[Effect]:
    """One EC2 event about one of the cluster's instances (`inst`: its row, None when
    slurmscale did not launch it) -> the evacuation, or the effects that handle it. (The
    Capacity Block events are the reserved capacity's.)"""
    if inst is None:
        return [Say(Kind.EVENT_DROPPED, f"{ev.kind.value} for {ev.instance_id}: not an "
                    "instance slurmscale launched; ignored")]
    if inst.state != "running":
        return [Say(Kind.EVENT_DROPPED, f"{ev.kind.value} for {ev.instance_id} ({inst.node}): "
                    f"already {inst.state}; nothing to do", inst.node)]
    match ev.kind:
        case EventKind.SPOT_WARNING | EventKind.RESERVATION_INTERRUPTION:
            # (an interruptible reservation reclaimed: as a spot interruption, its instances
            # go two minutes on and the jobs requeue; only a spot pool backs off, its normal
            # capacity is what was taken back)
            why, cause = Why.INTERRUPTED, PreemptionCause.INTERRUPTED
            if ev.kind is EventKind.RESERVATION_INTERRUPTION:
                why, cause = Why.RECLAIMED, PreemptionCause.RECLAIMED
            issued = aws_time(ev.time)
            # EC2's notice from the warning's own time, never more from the pass that reads it
            # (a host clock that AWS's answers have not yet measured: timeframe.py)
            deadline = datetime.fromtimestamp(
                min(now.timestamp() if issued is None else issued, now.timestamp())
                + INTERRUPTION_NOTICE_S, UTC)
            reason = reasons.reason(why, f"{ev.time} ({ev.action or 'terminate'})")
            return Evacuate(Lost(cause, ev.kind.value, ev.time, reason), deadline=deadline,
                            reclaimed=True, reservation_changed=(
                                ev.kind is EventKind.RESERVATION_INTERRUPTION))
        case EventKind.REBALANCE:
            reason = reasons.reason(Why.REBALANCE, ev.time)
            return [edits.drain([inst.node], reason, said=(
                Kind.REBALANCE_DRAINED, f"{inst.node} ({inst.instance_id}): {reason}; "
                "running jobs continue, nothing new starts there"))]
        case EventKind.SCHEDULED if ev.scheduled is not None:
            sc = ev.scheduled  # (the health pass drains and replaces)
            return [Heard(inst.instance_id, sc, now.timestamp()),
                    Say(Kind.SCHEDULED_EVENT, f"{inst.node} ({inst.instance_id}): {sc.code} "
                        f"from {iso(sc.not_before)} ({sc.description})", inst.node)]
        case EventKind.STATE_CHANGE if (ev.state or "") in GONE_STATES:
            reason = reasons.reason(Why.GONE, f"{inst.instance_id} {ev.state} at {ev.time}")
            return Evacuate(Lost(PreemptionCause.INTERRUPTED, ev.kind.value, ev.time, reason),
                            wait_s=GONE_WAIT_S)
    return []


@dataclass(frozen=True)
class Steer:
    """Where a pool's job goes after `max_preemptions` lost runs (its on-demand fallback)."""

    pool: str
    partition: str
    max_preemptions: int


def steer_for(cfg: Config, pool_name: str) -> Steer | None:
    """None: the pool is unknown now or has no fallback."""
    try:
        pool = cfg.pool(pool_name)
    except KeyError:
        return None
    if pool.fallback_pool is None:
        return None
    return Steer(pool.name, cfg.pool(pool.fallback_pool).partition, pool.spot.max_preemptions)


def requeue(job: str, inst: InstanceRow, lost: Lost, runs: list[PreemptionRow],
            steer: Steer | None, now: datetime) -> Chain:
    """The job requeued off `inst`'s node; once Slurm took it, its lost run recorded and
    said - unless `runs` (the job's recorded lost runs) has this instance's already (an
    earlier, unfinished handling of the event requeued it) - and, at its
    `max_preemptions`-th, the job moved to on-demand (`steer`)."""
    node = inst.node
    if any(r.instance_id == inst.instance_id for r in runs):
        return Chain(edits.requeue(job, node))
    then: list[Effect] = [
        Record(PreemptionRow(at=now, job_id=job, node=node, instance_id=inst.instance_id,
                             pool=inst.pool, instance_type=inst.instance_type,
                             lifecycle=inst.lifecycle, cause=lost.cause, kind=lost.kind,
                             notice_time=lost.notice_time)),
        Say(Kind.JOB_REQUEUED, f"job {job} on {node} requeued: {lost.reason}", node)]
    times = sum(1 for r in runs if r.cause not in NOT_PREEMPTED) + (
        lost.cause not in NOT_PREEMPTED)
    if steer is not None and times >= steer.max_preemptions:
        then.append(edits.move(job, [steer.partition], node, said=(
            Kind.JOB_STEERED, f"job {job} preempted {times} time(s) (max_preemptions "
            f"{steer.max_preemptions} in {steer.pool}): now runs on partition "
            f"{steer.partition} only")))
    return Chain(edits.requeue(job, node), then=tuple(then))


@dataclass(frozen=True)
class Evacuation:
    """A node's evacuation: `effects` in order; `kept`: jobs of this instance still in the
    grace an earlier handling began (the node waits for them, as for a grace begun now)."""

    effects: list[Effect]
    kept: bool


def plan(inst: InstanceRow, jobs: list[str], graces: list[GraceRow], window: Window | None,
         lost: Lost, runs: dict[str, list[PreemptionRow]], steer: Steer | None,
         now: datetime, warned: bool) -> Evacuation:
    """Drain the node, then each job on it (`jobs`, read first: draining a node still
    powering up makes Slurm requeue its configuring job at once, and it would no longer be
    listed there): left alone if already in its grace for this warning (a message delivered
    again), signalled where the pool's `window` leaves time for a grace (requeued at once if
    Slurm refuses the signal), else requeued. `graces`: the open ones; `runs`: each job's
    recorded lost runs; `warned`: a deadline was given (EC2's, a scheduled event's; without
    one - gone, or unhealthy - a grace no longer buys the job time); `steer`: None where a
    job is not moved after its `max_preemptions` (not spot's doing)."""
    in_grace = {g.job_id for g in graces if g.instance_id == inst.instance_id} if warned \
        else set()
    signalled_ = {g.job_id for g in graces}  # (a gang: for another of its nodes' warning)
    out: list[Effect] = [edits.drain([inst.node], lost.reason)]
    for job in jobs:
        if job in in_grace:
            continue  # signalled when this warning first came
        now_requeued = requeue(job, inst, lost, runs.get(job, []), steer, now)
        if window is None:
            out.append(now_requeued)
            continue
        out.append(Chain(signal(job, inst, window, lost.cause, lost.kind, lost.notice_time,
                               now, again=job in signalled_), otherwise=(now_requeued,)))
    return Evacuation(out, kept=bool(in_grace))
