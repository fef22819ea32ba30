"""EC2 events from the SQS queue, acted on so that no job fails silently.

- Spot interruption warning for one of our instances: the pool goes into capacity backoff (as
  after an insufficient-capacity error: its jobs go to the on-demand fallback and its warm
  buffer meanwhile); drain the node (reason carries the notice time) so nothing new lands
  there, requeue every job on it (`scontrol requeue`: the whole job, every node of a gang;
  restart count +1, never FAILED), record each preemption, then power the node down once
  Slurm has finished completing those jobs there (Slurm runs the suspend hook, the instance is
  terminated; AWS would reclaim it within two minutes anyway).
- Rebalance recommendation: drain only, killing nothing; the node is powered down once idle.
- State change to shutting-down/terminated/stopping/stopped: requeue what still runs there and
  power the node down.
- A message that is malformed, not an EC2 event, or about an instance slurmscale did not
  launch is recorded as an event and deleted: it never stops the loop.
- An instance that vanished with no event at all (EC2 reports it terminated, e.g. with state
  reason Server.SpotInstanceTermination, while the store still has it running) is found by
  `sweep` on the reconcile pass and handled like a state change.
- A job preempted `max_preemptions` times (the pool's spot settings) is moved to the pool's
  on-demand fallback partition, so it stops losing its runs to spot.
- AWS Health's scheduled change for an instance (retirement, maintenance) goes to the health
  pass (`health.py`), which drains the node and replaces it once idle.

A node slurmscale drained for one of these is undrained once it is powered down, so the next
launch can use it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from slurmscale.audit import Kind
from slurmscale.cloud.eventbridge import Ec2Event, EventError, EventKind, parse_events
from slurmscale.cloud.protocol import CloudError, CloudInstance
from slurmscale.config import CapacityType
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.executor import edits
from slurmscale.daemon.executor.edits import EditKind
from slurmscale.daemon.executor.effects import Effect, Forget, Timers, signalled, taken
from slurmscale.daemon.passes.backoff import CapacityBackoff
from slurmscale.daemon.passes.drains import undrain
from slurmscale.daemon.passes.evacuation import (
    COMPLETING_WAIT_S,
    GONE_STATES,
    GONE_WAIT_S,
    SPOT_RECLAIM,
    Evacuate,
    Lost,
    on_event,
    plan,
    requeue,
    steer_for,
)
from slurmscale.daemon.passes.graces import Graces, GraceStep, step
from slurmscale.daemon.passes.reserved_capacity import ReservedCapacity
from slurmscale.lifecycles import GraceState
from slurmscale.model import SlurmNode
from slurmscale.slurm import reasons
from slurmscale.slurm.protocol import SlurmError
from slurmscale.slurm.reasons import Why
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.rows import (
    NOT_PREEMPTED,
    GraceRow,
    InstanceRow,
    PreemptionCause,
    TimerKind,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Evacuating:
    """A node whose jobs were requeued, to be powered down once they are off it. Kept on the
    store (timers of kind EVACUATING, this as the note), so that a standby taking over powers
    it down when the leader would have: in memory alone, a take-over during the wait left
    the node drained, its instance running, with nothing left to finish it."""

    instance_id: str
    reason: str
    jobs: int  # how many were requeued
    since: datetime
    wait_s: float  # the longest the power-down waits for it (COMPLETING_WAIT_S, GONE_WAIT_S)

    def note(self) -> str:
        return json.dumps({"instance_id": self.instance_id, "reason": self.reason,
                           "jobs": self.jobs, "wait_s": self.wait_s})

    @classmethod
    def read(cls, since_s: float, note: str | None) -> Evacuating | None:
        """From the store's timer and note; None: a note slurmscale cannot read (written by
        hand, a broken disk): that evacuation is dropped with a warning naming the node,
        which stays drained for an admin to look at."""
        try:
            d = json.loads(note or "")
            return cls(str(d["instance_id"]), str(d["reason"]), int(d["jobs"]),
                       datetime.fromtimestamp(since_s, UTC), float(d["wait_s"]))
        except (ValueError, TypeError, KeyError):
            return None


EVACUATING = TimerKind.EVACUATING  # evacuated nodes waiting for their power-down
EVACUATED = TimerKind.EVACUATED  # instances evacuated and powered down


class InterruptionPass:
    def __init__(self, ctx: PassContext[LaunchStore], backoff: CapacityBackoff | None = None,
                 reserved: ReservedCapacity | None = None) -> None:
        """`reserved`: the pools' capacity reservations as read from EC2 (a Capacity Block's
        events go there; an interruptible reservation reclaimed has them read again)."""
        cfg, store, slurm, event = ctx.cfg, ctx.store, ctx.slurm, ctx.event
        self.cfg = cfg
        self.backoff = backoff
        self.store = store
        self.slurm = slurm
        self.queue = ctx.queue  # (none configured: None)
        self.event = event
        # (every effect of this pass is applied there, its outcome returned)
        self.effects = ctx.effects
        # jobs signalled before their requeue (a pool's grace_signal)
        self.graces = Graces(cfg, store, ctx.effects, event)
        self.reserved = reserved
        self.queue_error: str | None = None  # the last read's failure (status leads with it)

    def run(self, now: datetime) -> int:
        """Handle what is queued now; returns the number of messages read. SQS delivers at
        least once: a message is deleted only once it was handled or is moot (malformed, not
        ours, nothing left to do). One whose handling failed (Slurm unreachable, say) stays:
        the visibility timeout brings it back and it is handled again (idempotently: an
        evacuated instance is not evacuated twice, a preemption is recorded once), so a
        two-minute warning is never lost to a passing failure."""
        n = self._messages(now)
        self.settle_graces(now)
        self.power_down_evacuated(now)
        return n

    def _messages(self, now: datetime) -> int:
        if self.queue is None:
            return 0
        try:
            messages = self.queue.receive()
        except CloudError as e:
            if self.queue_error is None:  # (once per outage; status shows it every pass)
                log.error("cannot read the interruption queue: %s: spot warnings, block "
                          "events and scheduled changes are not handled until it can be read",
                          e)
            self.queue_error = str(e)
            return 0
        if self.queue_error is not None:
            log.info("the interruption queue can be read again")
        self.queue_error = None
        for m in messages:
            try:
                evs = parse_events(m.body)
            except EventError as e:
                self.event(Kind.EVENT_DROPPED, f"malformed EC2 event message dropped: {e}")
            else:
                # (every one handled, even after one that must come back: each is idempotent)
                left = [ev.instance_id or ev.reservation_id for ev in evs
                        if not self._handle(ev, now)]
                if left:
                    log.warning("EC2 event for %s not handled yet; it comes back after the "
                                "queue's visibility timeout", ", ".join(left))
                    continue
            self.effects.apply([Forget(m.receipt)])
        return len(messages)

    def _handle(self, ev: Ec2Event, now: datetime) -> bool:
        """True once the event was acted on or is moot; False: try again later. Decided
        by `evacuation.on_event`, then applied."""
        if ev.kind in (EventKind.BLOCK_DELIVERED, EventKind.BLOCK_EXPIRING):
            return True if self.reserved is None else self.reserved.block_event(ev, now)
        inst = self.store.instance(ev.instance_id)
        action = on_event(ev, inst, now)
        if not isinstance(action, Evacuate):
            return all(a.taken for a in self.effects.apply(action, now.timestamp()))
        assert inst is not None
        if action.reservation_changed and self.reserved is not None:
            self.reserved.changed()  # (read again: its free count fell)
        if action.reclaimed:
            self._reclaimed(inst, now)
        return self.evacuate(inst, action.lost, now, wait_s=action.wait_s,
                             deadline=action.deadline)

    def sweep(self, seen: list[CloudInstance], now: datetime,
              active: list[InstanceRow]) -> int:
        """Instances the store has running (`active`) that EC2 reports gone, with no event
        having said so (`seen`: this cluster's instances, terminated ones included). Returns
        how many."""
        by_id = {i.instance_id: i for i in seen}
        n = 0
        evacuated = self.evacuated()
        for inst in active:
            found = by_id.get(inst.instance_id)
            if (inst.state != "running" or found is None or found.state not in GONE_STATES
                    or inst.instance_id in evacuated):
                continue
            why = found.state_reason or "no reason given"
            if why == SPOT_RECLAIM:
                self._reclaimed(inst, now)
            reason = reasons.reason(Why.GONE, f"{inst.instance_id} {found.state} without "
                                    f"notice ({why})")
            self.evacuate(inst, Lost(PreemptionCause.VANISHED, f"vanished:{why}",
                                     now.isoformat(timespec="seconds"), reason), now,
                          wait_s=GONE_WAIT_S)
            n += 1
        return n

    def _reclaimed(self, inst: InstanceRow, now: datetime) -> None:
        """Spot capacity taken back: the instance's offering goes into capacity backoff
        (the whole pool where its subnet was not recorded); the pool's work moves to its
        other offerings, or to the on-demand fallback when none is left."""
        try:
            pool = self.cfg.pool(inst.pool)
        except KeyError:
            return
        if self.backoff is not None and pool.capacity_type is CapacityType.SPOT:
            where = self.backoff.offering(pool, inst.instance_type, inst.subnet_id, "spot") \
                if inst.subnet_id and inst.instance_type else None
            self.backoff.reclaimed(pool.name, now, where)

    def evacuate(self, inst: InstanceRow, lost: Lost, now: datetime, steer: bool = True,
                 wait_s: float = COMPLETING_WAIT_S, deadline: datetime | None = None,
                 requeued: int = 0) -> bool:
        """Drain, requeue the node's jobs, power it down once they are off it (now, or on a
        later pass: `power_down_evacuated`). True when done or in hand (now or before);
        False when Slurm did not let it finish: called again, it redoes only what is left.
        Each job's lost run is recorded as `lost` says. `steer`: a job that lost
        `max_preemptions` runs moves to on-demand (spot's doing; not for a node that was
        merely unhealthy). `wait_s`: the longest the power-down waits for Slurm to finish
        completing the jobs there (GONE_WAIT_S: the instance is gone). `deadline`: when EC2
        takes the instance back; where the pool has a `grace_signal`, each job gets the
        signal instead of the requeue, and `settle_graces` requeues it at the deadline less
        the margin if it is still there (`requeued`: how many it did, for the node's event).
        What is done is decided by `evacuation.plan` from what was read, then applied."""
        if inst.instance_id in self.evacuated():
            return True
        node = inst.node
        try:
            jobs = self.slurm.jobs_on_node(node)
        except SlurmError as e:
            self.event(Kind.SLURM_READ_FAILED, f"jobs on {node}: {e}; not powering it down "
                       "until they can be requeued", node=node)
            return False
        todo = plan(inst, jobs, self.graces.open(), self.graces.window(inst.pool, deadline, now),
                    lost, {j: self.store.preemptions(j) for j in jobs},
                    steer_for(self.cfg, inst.pool) if steer else None, now,
                    warned=deadline is not None)
        done = self.effects.apply(todo.effects, now.timestamp())
        if todo.kept or signalled(done):
            return True  # settle_graces powers the node down once its graces are over
        requeued += len(taken(done, EditKind.REQUEUE))
        was = self.evacuating().get(node)
        ev = (Evacuating(inst.instance_id, lost.reason, requeued, now, wait_s)
              if was is None else replace(was, jobs=was.jobs + requeued))
        self.effects.apply([Timers(EVACUATING, {node: ev.since.timestamp()}, {node: ev.note()})])
        return node not in self.power_down_evacuated(now)

    def evacuated(self) -> dict[str, float]:
        """The instances evacuated and powered down (-> when), as on the store: the store
        calls them running until the suspend hook has terminated them, and neither a late
        event nor the sweep may evacuate them twice (a standby that took over included)."""
        return self.store.timers(EVACUATED)

    def _mark_evacuated(self, instance_id: str, now: datetime) -> None:
        """One more instance evacuated; those the store no longer has running (the suspend
        hook terminated them) are over."""
        over = tuple(iid for iid in self.evacuated() if iid != instance_id
                     and ((row := self.store.instance(iid)) is None or row.state != "running"))
        self.effects.apply([Timers(EVACUATED, {instance_id: now.timestamp()}, over=over)])

    def evacuating(self) -> dict[str, Evacuating]:
        """The nodes waiting for their power-down, as on the store (a standby that took over
        finishes them)."""
        notes = self.store.timer_notes(EVACUATING)
        out = {}
        for node, since in self.store.timers(EVACUATING).items():
            ev = Evacuating.read(since, notes.get(node))
            if ev is None:
                log.warning("evacuation of %s on the store unreadable: dropped", node)
                self.effects.apply([Timers(EVACUATING, over=(node,))])
            else:
                out[node] = ev
        return out

    def settle_graces(self, now: datetime) -> None:
        """Each signalled job still in its grace (graces.py): off the node (ended, or
        requeued itself), its grace is over; still there at `requeue_at`, requeued. A node
        whose last grace is over is evacuated (powered down once its jobs are off it; a
        closed Capacity Block's node, by the block pass as at every close). Read from the
        store, so a restarted daemon finishes what the one before it signalled."""
        by_instance: dict[str, list[GraceRow]] = {}
        for g in self.graces.open(now):
            by_instance.setdefault(g.instance_id, []).append(g)
        for iid, gs in by_instance.items():
            node = gs[0].node
            try:
                on_node = set(self.slurm.jobs_on_node(node))
            except SlurmError as e:
                log.warning("cannot read the jobs on %s in their grace: %s", node, e)
                continue
            inst = self.store.instance(iid)
            for g in gs:
                match step(g, on_node, self.graces.requeued_since(g), now):
                    case GraceStep.REQUEUED:
                        self.graces.close(g, GraceState.REQUEUED, now)
                    case GraceStep.LEFT:
                        self.graces.close(g, GraceState.ENDED, now)
                    case GraceStep.REQUEUE if self._requeue_graced(g, inst, now):
                        self.graces.close(g, GraceState.REQUEUED, now)
            if gs[0].cause == PreemptionCause.BLOCK_END:
                continue  # the block pass powers a closed block's nodes down once idle
            if inst is not None and inst.state == "running" and not any(
                    g.state == GraceState.SIGNALLED.value for g in gs):
                self.evacuate(inst, Lost(PreemptionCause(gs[0].cause), gs[0].kind,
                                         gs[0].notice_time, Graces.reason(gs[0])), now,
                              requeued=sum(g.state == GraceState.REQUEUED.value for g in gs))

    def _requeue_graced(self, g: GraceRow, inst: InstanceRow | None, now: datetime) -> bool:
        """A job still on its node at the end of its grace, requeued (its lost run recorded;
        without a record where the instance's row cannot be read). False: Slurm refused."""
        lost = Lost(g.cause, g.kind, g.notice_time, Graces.reason(g))
        todo: Effect = edits.requeue(g.job_id, g.node, said=(
            Kind.JOB_REQUEUED, f"job {g.job_id} on {g.node} requeued: {lost.reason}"))
        if inst is not None:
            todo = requeue(g.job_id, inst, lost, self.store.preemptions(g.job_id),
                           steer_for(self.cfg, inst.pool) if g.cause not in NOT_PREEMPTED
                           else None, now)
        return self.effects.apply([todo], now.timestamp())[0].taken

    def power_down_evacuated(self, now: datetime) -> set[str]:
        """Power down the evacuated nodes once Slurm has finished completing their requeued
        jobs there (the node no longer COMPLETING), or its `wait_s` after the requeue
        (a node whose slurmd is gone never reports). Not at once: when the last node a
        requeued job is completing on is powered down under it, Slurm 22.05 clears the job's
        completion without its requeue delay (no "Requeuing JobId" in slurmctld's log; the
        delay is what lets the nodes' revoked credential for the job expire) and starts it
        again in the same second on nodes that have just revoked it: "Killing non-startable
        batch JobId: Job credential revoked", and the job ends FAILED. Retried each pass
        until Slurm takes the power-down; returns the nodes it refused this time."""
        refused: set[str] = set()
        evacuating = self.evacuating()
        if not evacuating:
            return refused
        try:
            busy = {n.name for n in self.slurm.nodes(list(evacuating))
                    if "COMPLETING" in n.flags}
        except SlurmError as e:
            log.warning("cannot read the evacuated nodes: %s", e)
            busy = set(evacuating)
        for node, ev in evacuating.items():
            waited = (now - ev.since).total_seconds()
            if node in busy and waited < ev.wait_s:
                continue
            said = (Kind.NODE_EVACUATED, f"{node} ({ev.instance_id}): {ev.reason}; {ev.jobs} "
                    "job(s) requeued, node powered down"
                    + (f" ({waited:.0f}s later: its jobs were completing there)"
                       if waited >= 1 else ""))
            if not self.effects.apply([edits.power_down([node], ev.reason, said=said)],
                                      now.timestamp())[0].taken:
                refused.add(node)
                continue
            self.effects.apply([Timers(EVACUATING, over=(node,))])
            self._mark_evacuated(ev.instance_id, now)
        return refused

    def return_powered_down_nodes(self, nodes: list[SlurmNode]) -> None:
        """Undrain nodes slurmscale drained for an interruption once they are powered down
        (their instance is gone): the next launch gets a fresh instance."""
        back = [n.name for n in nodes
                if reasons.drained_by_us(n) in reasons.INSTANCE_LOST
                and "POWERED_DOWN" in n.flags]
        undrain(self.effects.edits, back, Kind.NODES_RETURNED,
                "powered down after an interruption; available again")
