"""The health pass: unhealthy nodes replaced, not retried into (`policy/health.py` decides).

What it does with a verdict:
- replace: the node's jobs are requeued (the whole job, every node of a gang; never FAILED)
  and the node drained and powered down with slurmscale's reason, through the interruption
  pass's evacuation; Slurm runs the suspend hook, the instance is terminated, and the node,
  once powered down, is returned (`InterruptionPass.return_powered_down_nodes`): the next
  resume gets a fresh instance. One replacement row is recorded (the replace-loop guard,
  `report`, metrics).
- drain (a scheduled event): nothing new starts there; replaced once idle, or before the
  event's start at the latest.
- leave: replaced `max_replacements` times within `window_s`: drained with a reason saying so
  and left for an admin (its instance kept, to look at); an event names the pool losing nodes.

EC2's status checks and scheduled events are read with one paginated DescribeInstanceStatus
at most every `health.status_interval_s`; AWS Health's scheduled changes arrive on the
interruption queue and reach `scheduled`."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import UTC, datetime

from slurmscale.audit import Kind
from slurmscale.cloud.protocol import CloudError
from slurmscale.config import HealthSettings
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.executor import edits
from slurmscale.daemon.executor.effects import Chain, Record, Say, Timers
from slurmscale.daemon.metrics import Metrics
from slurmscale.daemon.passes import scheduled
from slurmscale.daemon.passes.evacuation import COMPLETING_WAIT_S, GONE_WAIT_S, Lost
from slurmscale.daemon.passes.interruptions import InterruptionPass
from slurmscale.model import InstanceHealth, SlurmNode
from slurmscale.policy.health import (
    REPLACED_KIND,
    Cause,
    HealthKnobs,
    HealthStep,
    HealthWatch,
    Verdict,
    iso,
)
from slurmscale.slurm import reasons
from slurmscale.slurm.reasons import Why
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.rows import InstanceRow, PreemptionCause, ReplacementRow, TimerKind

log = logging.getLogger(__name__)

# the store's timers of nodes unhealthy by Slurm's account (not responding, health check),
# each replaced once its grace is over
UNHEALTHY = TimerKind.UNHEALTHY


class HealthPass:
    def __init__(self, ctx: PassContext[LaunchStore], interruptions: InterruptionPass,
                 metrics: Metrics | None = None) -> None:
        self.ctx = ctx
        self.cfg = ctx.cfg.health
        self.interruptions = interruptions
        self.metrics = metrics
        self.watch = HealthWatch(health_knobs(self.cfg))
        self.statuses: dict[str, InstanceHealth] = {}
        self.read_at: float | None = None
        self.verdicts: list[Verdict] = []  # the last pass's, for `status`
        # node -> (detected, pool) of replacements in flight: the time to a fresh node
        self.replacing: dict[str, tuple[float, str]] = {}

    def run(self, nodes: list[SlurmNode], active: list[InstanceRow] | None) -> None:
        """`active`: the store's running instances (read this pass); None: not readable."""
        c = self.ctx
        now = c.clock()
        t = now.timestamp()
        rows = c.store.active_instances() if active is None else active
        self._heard(rows)  # (AWS Health's first: a status read after it may say more)
        self._read_statuses(t)
        running = {i.node: i for i in rows if i.state == "running"}
        recent = Counter(r.node for r in c.store.replacements(since=t - self.cfg.window_s))
        self._fresh(nodes, t)
        # the grace timers are the store's: a standby that took over waits no longer
        was = c.store.timers(UNHEALTHY)
        self.watch.since = dict(was)
        self.verdicts = self.watch.verdicts(nodes, running, self.statuses, recent, t)
        now_since = self.watch.since
        c.effects.apply([Timers(UNHEALTHY, {n: s for n, s in now_since.items()
                                            if was.get(n) != s},
                                over=tuple(sorted(was.keys() - now_since.keys())))])
        by_id = {i.instance_id: i for i in rows}
        for v in self.verdicts:
            inst = by_id.get(v.instance_id)
            if inst is None:
                continue
            # (Slurm's refusals are outcomes, said where they are applied: one node's
            # trouble never stops the others)
            match v.step:
                case HealthStep.DRAIN:
                    self._drain(v)
                case HealthStep.REPLACE:
                    self._replace(v, inst, now)
                case HealthStep.LEAVE:
                    self._leave(v, inst, recent.get(v.node, 0), now)

    def _heard(self, rows: list[InstanceRow]) -> None:
        """AWS Health's scheduled changes the interruption pass heard on the queue (this
        leader, or the one before: they are on the store), their nodes drained on this pass
        (not at the next status read); those of instances gone are forgotten."""
        running = {i.instance_id for i in rows if i.state == "running"}
        heard, over = scheduled.known(self.ctx.store, running)
        self.ctx.effects.apply([Timers(scheduled.SCHEDULED, over=tuple(over))])
        for iid, ev in heard.items():
            if iid not in self.watch.announced:  # (once: as it came)
                self.watch.heard(iid, ev)

    def _read_statuses(self, t: float) -> None:
        every = self.cfg.status_interval_s
        if every <= 0 or (self.read_at is not None and t - self.read_at < every):
            return
        self.read_at = t
        try:
            found = self.ctx.cloud.instance_health()
        except CloudError as e:
            log.warning("cannot read EC2 instance status: %s", e)
            return
        self.statuses = self.watch.statuses_read(found)

    def _drain(self, v: Verdict) -> None:
        self.ctx.edits.apply(edits.drain([v.node], reasons.reason(Why.SCHEDULED, v.detail), said=(
            Kind.NODE_DRAINED_SCHEDULED, f"{v.node} ({v.instance_id}): {v.detail}; running "
            "jobs continue, nothing new starts there; replaced once idle or "
            f"{self.cfg.event_lead_s:g}s before the event")))

    def _replace(self, v: Verdict, inst: InstanceRow, now: datetime) -> None:
        """Requeue the node's jobs and power it down. Before a scheduled event, with the
        pool's `grace_signal`, its jobs are signalled instead and the interruption pass
        requeues them at the event's start less the margin, then powers the node down
        (`settle_graces`), as after a spot warning."""
        c = self.ctx
        reason = reasons.reason(Why.UNHEALTHY, f"{v.cause.value}: {v.detail}")
        # (a node whose slurmd does not answer never reports its jobs completed: no wait)
        wait = GONE_WAIT_S if v.cause is Cause.NOT_RESPONDING else COMPLETING_WAIT_S
        deadline = None if v.deadline is None else datetime.fromtimestamp(v.deadline, UTC)
        lost = Lost(PreemptionCause.UNHEALTHY, f"{REPLACED_KIND}{v.cause.value}",
                    iso(v.since), reason)
        if not self.interruptions.evacuate(inst, lost, now, steer=False, wait_s=wait,
                                           deadline=deadline):
            return  # Slurm did not let it finish: the next pass redoes what is left
        requeued = sum(1 for p in c.store.preemptions(since=v.since - 1)
                       if p.instance_id == v.instance_id)
        graced = sum(1 for g in self.interruptions.graces.open()
                     if g.instance_id == v.instance_id)
        row = self._row(v, inst, now, requeued, left=False)
        self.replacing[v.node] = (v.since, v.pool)
        c.effects.apply([Record(row), Say(
            Kind.NODE_REPLACED, f"{v.node} ({v.instance_id}, pool {v.pool}): "
            f"{v.cause.value}: {v.detail}; {requeued} job(s) requeued"
            + (f", {graced} signalled (requeued before the event if still there)"
               if graced else "")
            + ", instance terminated by the suspend hook, node returned once powered down",
            v.node)])
        if self.metrics is not None:
            self.metrics.replaced(v.pool, v.cause.value,
                                  row.gpus * max(0.0, now.timestamp() - v.since) / 3600)

    def _leave(self, v: Verdict, inst: InstanceRow, times: int, now: datetime) -> None:
        c = self.ctx
        why = (f"{times} time(s) in {self.cfg.window_s:g}s, now {v.cause.value}: {v.detail}; "
               "left for an admin")
        said = (Kind.NODE_REPLACE_LOOP,
                f"pool {v.pool} is losing nodes: {v.node} ({v.instance_id}) replaced {why}")
        reason = reasons.reason(Why.REPLACE_LOOP, why)[:250]
        (drained, *_) = c.effects.apply([Chain(edits.drain([v.node], reason, said=said),
                                               then=(Record(self._row(v, inst, now, 0, True)),))])
        if drained.taken and self.metrics is not None:
            self.metrics.left_drained(v.pool)

    def _fresh(self, nodes: list[SlurmNode], t: float) -> None:
        """Replaced nodes back in service (returned, not drained by us any more): the time
        from detection to a node ready for the next job."""
        if not self.replacing:
            return
        for n in nodes:
            if n.name in self.replacing and reasons.drained_by_us(n) is None:
                since, pool = self.replacing.pop(n.name)
                if self.metrics is not None:
                    self.metrics.replacement_time(pool, t - since)

    def _row(self, v: Verdict, inst: InstanceRow, now: datetime, requeued: int,
             left: bool) -> ReplacementRow:
        """One replacement row (the loop guard counts them)."""
        try:
            gpus = self.ctx.cfg.pool(inst.pool).gpus_per_node
        except KeyError:
            gpus = 0
        return ReplacementRow(
            at=now, detected_at=datetime.fromtimestamp(v.since, UTC), node=v.node,
            pool=v.pool, instance_id=v.instance_id, instance_type=inst.instance_type,
            gpus=gpus, cause=v.cause.value, detail=v.detail[:500], jobs_requeued=requeued,
            left=left)


def health_knobs(s: HealthSettings) -> HealthKnobs:
    """The config's `health` as the rules' knobs."""
    return HealthKnobs(tuple(s.replace_on_reasons), s.grace_s, s.event_lead_s,
                       s.max_replacements)
