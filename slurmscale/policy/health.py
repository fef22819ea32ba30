"""Which cloud nodes are unhealthy, and what is done about each: pure (Slurm's nodes, the
running instances, EC2's status reading and the watch's memory in; verdicts out).

A node is unhealthy when, while its instance runs:
- EC2's system or instance status check reports it impaired (acted on at once: EC2's checks
  already span minutes);
- slurmctld has it NOT_RESPONDING, or DOWN because it stopped responding;
- slurmctld has it DOWN as "Node unexpectedly rebooted" (ReturnToService 0 or 1: the instance
  rebooted without `scontrol reboot`; replaced at once: that instance is not trusted again);
- the site's health check (HealthCheckProgram, NHC, a DCGM prolog) drained or downed it with a
  reason matching `health.replace_on_reasons`.
The two Slurm-side causes must last `health.grace_s` across passes (a slurmd restarting is
not a dead node). A node with a scheduled EC2 event (retirement, maintenance, a reboot or a
stop) is drained at once, and replaced once idle or `event_lead_s` before the event.

Never touched: a node an admin drained or downed with any other reason, a node in a power
transition, a node slurmscale already drained because its instance is going away, and a node
left for an admin after `max_replacements` within `window_s` (replacing it again would only
loop: the fault is not the instance)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol

from slurmscale.model import POWER_TRANSITIONS, InstanceHealth, ScheduledEvent, SlurmNode
from slurmscale.slurm import reasons
from slurmscale.slurm.reasons import Why

# the kind of a preemption row (a requeue) when the node was replaced as unhealthy
REPLACED_KIND = "unhealthy:"
# drained by slurmscale already: its instance is going away, or it is left for an admin
_HANDLED = (reasons.INSTANCE_LOST - {Why.SCHEDULED}) | {Why.REPLACE_LOOP}
NOT_RESPONDING = "Not responding"  # the reason slurmctld gives a node it set DOWN for that
# ... and a node whose slurmd registered after a reboot slurmctld did not order, which
# ReturnToService 0 or 1 (Slurm's default) leaves DOWN: an instance held for nothing
REBOOTED = "Node unexpectedly rebooted"
_TROUBLE = frozenset({"NOT_RESPONDING", "DOWN"})  # flags that make a node worth a look


class Cause(StrEnum):
    IMPAIRED = "ec2-status-check"
    NOT_RESPONDING = "not-responding"
    HEALTH_CHECK = "health-check"
    SCHEDULED = "scheduled-event"
    REBOOTED = "unexpected-reboot"


class HealthStep(StrEnum):
    WAIT = "wait"  # unhealthy, not acted on yet (grace, or a scheduled event's node busy)
    DRAIN = "drain"  # scheduled event: nothing new starts there
    REPLACE = "replace"  # jobs requeued, node powered down (instance terminated), returned
    LEAVE = "leave"  # replaced too often: drained and left for an admin


@dataclass(frozen=True)
class Verdict:
    node: str
    instance_id: str
    pool: str
    cause: Cause
    detail: str  # what was seen, for the reason, the audit log and `status`
    step: HealthStep
    since: float  # when first seen unhealthy (Unix seconds)
    # a scheduled event's start (Unix seconds): the time a pool's grace_signal gives its
    # jobs before the requeue; None: no time to give (an unhealthy node's jobs requeue now)
    deadline: float | None = None


class RunningInstance(Protocol):
    """What a verdict reads of a node's running instance: the store's row gives it as it is
    (a record made for every running node every pass was a pass's cost for nothing)."""

    @property
    def instance_id(self) -> str: ...

    @property
    def pool(self) -> str: ...


def iso(t: float | None) -> str:
    return "unknown" if t is None else datetime.fromtimestamp(t, UTC).isoformat(
        timespec="seconds")


@dataclass(frozen=True)
class HealthKnobs:
    """What the rules weigh (`health` in the config, which takes these defaults): the
    drain reasons that mean bad hardware (regular expressions), how long a node stays
    unhealthy before it is replaced, how long before a scheduled event a busy node is, and
    how many replacements in the config's window leave a node for an admin instead."""

    replace_on_reasons: tuple[str, ...] = ()
    grace_s: float = 120.0
    event_lead_s: float = 900.0
    max_replacements: int = 3


@dataclass
class HealthWatch:
    """The verdicts, with the memory they need across passes: since when each node has been
    unhealthy by Slurm's account (the grace), and the scheduled events heard of (from
    DescribeInstanceStatus or AWS Health on the queue) by instance."""

    settings: HealthKnobs
    since: dict[str, float] = field(default_factory=dict)
    scheduled: dict[str, ScheduledEvent] = field(default_factory=dict)
    announced: set[str] = field(default_factory=set)  # instances AWS Health told us of

    def __post_init__(self) -> None:
        self.patterns = [re.compile(p) for p in self.settings.replace_on_reasons]

    def heard(self, instance_id: str, ev: ScheduledEvent) -> None:
        """A scheduled change AWS Health announced on the queue (kept until the instance is
        gone: a status read that does not list it yet does not undo it)."""
        self.scheduled[instance_id] = ev
        self.announced.add(instance_id)

    def statuses_read(self, statuses: Iterable[InstanceHealth]) -> dict[str, InstanceHealth]:
        """EC2's latest reading by instance. Its scheduled events replace what was known of
        each instance it lists: one EC2 no longer lists was completed or canceled (a node
        already drained for it is still replaced once idle); AWS Health's stay."""
        out = {s.instance_id: s for s in statuses}
        for s in out.values():
            if s.events:
                self.scheduled[s.instance_id] = min(
                    s.events, key=lambda e: e.not_before or float("inf"))
            elif s.instance_id not in self.announced:
                self.scheduled.pop(s.instance_id, None)
        return out

    def verdicts(self, nodes: Iterable[SlurmNode], running: Mapping[str, RunningInstance],
                 statuses: Mapping[str, InstanceHealth], replaced_recently: Mapping[str, int],
                 now: float) -> list[Verdict]:
        """`running`: node -> its running instance (store); `statuses`: EC2's latest reading
        by instance (empty when never read); `replaced_recently`: replacements per node
        within `window_s`."""
        out: list[Verdict] = []
        unwell: dict[str, float] = {}
        scheduled = self.scheduled
        for n in nodes:
            inst = running.get(n.name)
            if inst is None:
                continue
            flags = n.flags  # (isdisjoint: no set made for every node every pass)
            if not POWER_TRANSITIONS.isdisjoint(flags):
                continue
            status = statuses.get(inst.instance_id) if statuses else None
            if (not n.reason and _TROUBLE.isdisjoint(flags) and inst.instance_id not in scheduled
                    and (status is None or not status.impaired)):
                continue  # (_cause's common case, every running node every pass: looked at here)
            found = self._cause(n, inst, status)
            if found is None:
                continue
            cause, detail = found
            since = now
            if cause in (Cause.NOT_RESPONDING, Cause.HEALTH_CHECK):
                since = unwell[n.name] = self.since.get(n.name, now)
            step = self._step(n, cause, inst, since, now)
            if step is HealthStep.REPLACE and replaced_recently.get(n.name, 0) >= \
                    self.settings.max_replacements:
                step = HealthStep.LEAVE
            ev = self.scheduled.get(inst.instance_id) if cause is Cause.SCHEDULED else None
            out.append(Verdict(n.name, inst.instance_id, inst.pool, cause, detail, step, since,
                               None if ev is None else ev.not_before))
        self.since = unwell
        if self.scheduled or self.announced:  # (those of instances gone forgotten)
            live = {r.instance_id for r in running.values()}
            self.scheduled = {i: e for i, e in self.scheduled.items() if i in live}
            self.announced &= live
        return out

    def _cause(self, n: SlurmNode, inst: RunningInstance, status: InstanceHealth | None
               ) -> tuple[Cause, str] | None:
        """Why a node that is not the common case (a reason, trouble flags, a scheduled
        event or impaired status checks: `verdicts` passes over the rest) needs a step."""
        flags = n.flags
        why = reasons.ours(n.reason) if n.reason else None
        if "DRAIN" in flags and why in _HANDLED:
            return None
        admins = (n.reason and why is None
                  and not n.reason.startswith((NOT_RESPONDING, REBOOTED)))
        matched = admins and any(p.search(n.reason) for p in self.patterns)
        if admins and not matched and (flags & {"DRAIN", "DOWN"}):
            return None  # an admin's drain or down: never touched
        if status is not None and status.impaired:
            return Cause.IMPAIRED, (f"EC2 status checks: system {status.system_status}, "
                                    f"instance {status.instance_status}")
        if "DOWN" in flags and n.reason.startswith(REBOOTED):
            return Cause.REBOOTED, f"Slurm has it {n.state}: {n.reason}"
        if "NOT_RESPONDING" in flags or ("DOWN" in flags and not matched):
            return Cause.NOT_RESPONDING, f"Slurm has it {n.state}"
        if matched:
            return Cause.HEALTH_CHECK, n.reason
        ev = self.scheduled.get(inst.instance_id)
        if ev is not None or why is Why.SCHEDULED:
            code = ev.code if ev else "event"
            return Cause.SCHEDULED, f"{code} from {iso(ev.not_before if ev else None)}"
        return None

    def _step(self, n: SlurmNode, cause: Cause, inst: RunningInstance, since: float,
              now: float) -> HealthStep:
        match cause:
            case Cause.IMPAIRED | Cause.REBOOTED:
                return HealthStep.REPLACE  # (Slurm has taken the node out already)
            case Cause.NOT_RESPONDING | Cause.HEALTH_CHECK:
                return (HealthStep.REPLACE if now - since >= self.settings.grace_s
                        else HealthStep.WAIT)
        if reasons.drained_by_us(n) is not Why.SCHEDULED:
            return HealthStep.DRAIN
        if n.base_state == "IDLE" and "COMPLETING" not in n.flags:
            return HealthStep.REPLACE  # drained and idle: nothing is lost by replacing it now
        ev = self.scheduled.get(inst.instance_id)
        if ev is not None and ev.not_before is not None and \
                now >= ev.not_before - self.settings.event_lead_s:
            return HealthStep.REPLACE  # its jobs requeue now rather than die in the event
        return HealthStep.WAIT

