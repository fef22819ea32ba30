"""EC2 events from the SQS queue, acted on so that no job fails silently.

- Spot interruption warning for one of our instances: drain the node (reason carries the
  notice time) so nothing new lands there, requeue every job on it (`scontrol requeue`: the
  whole job, every node of a gang; restart count +1, never FAILED), record each preemption,
  then power the node down (Slurm runs the suspend hook, the instance is terminated; AWS
  would reclaim it within two minutes anyway).
- Rebalance recommendation: drain only, killing nothing; the node is powered down once idle.
- State change to shutting-down/terminated/stopping/stopped: requeue what still runs there and
  power the node down.
- A message that is malformed, not an EC2 event, or about an instance slurmscale did not
  launch is recorded as an event and deleted: it never stops the loop.

A node slurmscale drained for one of these is undrained once it is powered down, so the next
launch can use it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from slurmscale.cloud.events import Ec2Event, EventError, EventKind, parse_event
from slurmscale.cloud.protocol import CloudError, EventQueue
from slurmscale.daemon.drains import undrain
from slurmscale.model import SlurmNode
from slurmscale.slurm.protocol import SlurmClient, SlurmError
from slurmscale.store.repo import Store
from slurmscale.store.tables import InstanceRow, PreemptionRow

log = logging.getLogger(__name__)

Event = Callable[..., None]

INTERRUPT_REASON = "slurmscale: spot interruption notice"
REBALANCE_REASON = "slurmscale: rebalance recommendation"
GONE_REASON = "slurmscale: instance"
OUR_REASONS = (INTERRUPT_REASON, REBALANCE_REASON, GONE_REASON)
GONE_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})


class InterruptionPass:
    def __init__(self, store: Store, slurm: SlurmClient, queue: EventQueue | None,
                 event: Event) -> None:
        self.store = store
        self.slurm = slurm
        self.queue = queue
        self.event = event

    def run(self, now: datetime) -> int:
        """Handle what is queued now; returns the number of messages consumed."""
        if self.queue is None:
            return 0
        try:
            messages = self.queue.receive()
        except CloudError as e:
            log.warning("cannot read the interruption queue: %s", e)
            return 0
        for m in messages:
            try:
                ev = parse_event(m.body)
            except EventError as e:
                self.event("event_dropped", f"malformed EC2 event message dropped: {e}")
            else:
                self._handle(ev, now)
            try:
                self.queue.delete(m.receipt)
            except CloudError as e:  # it comes back after its visibility timeout: harmless
                log.warning("cannot delete event message: %s", e)
        return len(messages)

    def _handle(self, ev: Ec2Event, now: datetime) -> None:
        inst = self.store.instance(ev.instance_id)
        if inst is None:
            self.event("event_dropped", f"{ev.kind.value} for {ev.instance_id}: not an "
                       "instance slurmscale launched; ignored")
            return
        if inst.state != "running":
            self.event("event_dropped", f"{ev.kind.value} for {ev.instance_id} ({inst.node}):"
                       f" already {inst.state}; nothing to do", node=inst.node)
            return
        match ev.kind:
            case EventKind.SPOT_WARNING:
                reason = f"{INTERRUPT_REASON} {ev.time} ({ev.action or 'terminate'})"
                self._evacuate(inst, ev, reason, now)
            case EventKind.REBALANCE:
                reason = f"{REBALANCE_REASON} {ev.time}"
                try:
                    self.slurm.drain([inst.node], reason)
                except SlurmError as e:
                    self.event("slurm_update_failed", f"drain {inst.node}: {e}", node=inst.node)
                    return
                self.event("rebalance_drained", f"{inst.node} ({inst.instance_id}): {reason}; "
                           "running jobs continue, nothing new starts there", node=inst.node)
            case EventKind.STATE_CHANGE:
                if (ev.state or "") in GONE_STATES:
                    reason = f"{GONE_REASON} {inst.instance_id} {ev.state} at {ev.time}"
                    self._evacuate(inst, ev, reason, now)

    def _evacuate(self, inst: InstanceRow, ev: Ec2Event, reason: str, now: datetime) -> None:
        node = inst.node
        try:
            self.slurm.drain([node], reason)
        except SlurmError as e:
            self.event("slurm_update_failed", f"drain {node}: {e}", node=node)
        try:
            jobs = self.slurm.jobs_on_node(node)
        except SlurmError as e:
            self.event("slurm_read_failed", f"jobs on {node}: {e}; not powering it down "
                       "until they can be requeued", node=node)
            return
        for job in jobs:
            try:
                self.slurm.requeue(job)
            except SlurmError as e:
                self.event("requeue_failed", f"job {job} on {node}: {e}", node=node)
                continue
            self.store.add_preemption(PreemptionRow(
                at=now, job_id=job, node=node, instance_id=inst.instance_id, pool=inst.pool,
                instance_type=inst.instance_type, lifecycle=inst.lifecycle,
                kind=ev.kind.value, notice_time=ev.time))
            self.event("job_requeued", f"job {job} on {node} requeued: {reason}", node=node)
        try:
            self.slurm.power_down_force([node], reason)
        except SlurmError as e:
            self.event("slurm_update_failed", f"power down {node}: {e}", node=node)
            return
        self.event("node_evacuated", f"{node} ({inst.instance_id}): {reason}; "
                   f"{len(jobs)} job(s) requeued, node powered down", node=node)

    def return_powered_down_nodes(self, nodes: list[SlurmNode]) -> None:
        """Undrain nodes slurmscale drained for an interruption once they are powered down
        (their instance is gone): the next launch gets a fresh instance."""
        back = [n.name for n in nodes
                if "DRAIN" in n.flags and n.reason.startswith(OUR_REASONS)
                and "POWERED_DOWN" in n.flags]
        undrain(self.slurm, self.event, back, "nodes_returned",
                "powered down after an interruption; available again")
