"""The instance sweep: one DescribeInstances by the cluster tag each pass (and one more for
instances the store has running that it did not list), compared with the store and with
Slurm. Instances that vanished without an event, instances running that no node
expects (leaks), tracked instances whose node Slurm does not have, and nodes Slurm has up with
no instance at all are each dealt with here; placement groups whose gang is gone are deleted;
the warm pools' stopped instances are tended (warm_pool.py)."""

from __future__ import annotations

import logging
from datetime import datetime

from slurmscale.audit import Kind
from slurmscale.cloud.protocol import TAG_CLUSTER, TAG_GANG, TAG_NODE, CloudError, CloudInstance
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.executor import edits
from slurmscale.daemon.passes.fleets import GangFleets
from slurmscale.daemon.passes.interruptions import InterruptionPass
from slurmscale.daemon.passes.lost_nodes import (
    LostNodes,
    nodes_without_instances,
    stuck_powered_down,
)
from slurmscale.daemon.passes.warm_pool import WarmInstances
from slurmscale.hostlists import compress
from slurmscale.lifecycles import GangStatus
from slurmscale.model import SlurmNode
from slurmscale.slurm import reasons
from slurmscale.slurm.reasons import Why
from slurmscale.store.protocol import ReconcileStore
from slurmscale.store.rows import InstanceRow, TimerKind, utc

log = logging.getLogger(__name__)


def leaked_instances(seen: list[CloudInstance], cluster: str, tracked: set[str],
                     now: datetime, grace_s: float) -> list[CloudInstance]:
    """Instances of this cluster (by tag, checked again here) that are up, that the store does
    not track as running, and that are older than the grace period. Anything without this
    cluster's tag is never a leak of ours."""
    out = []
    for i in seen:
        if i.tags.get(TAG_CLUSTER) != cluster or i.state not in ("pending", "running"):
            continue
        if i.instance_id in tracked or i.launched_at is None:
            continue
        if (now - utc(i.launched_at)).total_seconds() >= grace_s:
            out.append(i)
    return out


class InstanceSweep:
    def __init__(self, ctx: PassContext[ReconcileStore], interruptions: InterruptionPass,
                 fleets: GangFleets, warm: WarmInstances) -> None:
        self.ctx = ctx
        self.warm = warm
        self.interruptions = interruptions
        self.fleets = fleets
        self.lost = LostNodes(ctx.cfg.daemon.lost_node_grace_s, ctx.store)
        self.stuck = LostNodes(ctx.cfg.daemon.lost_node_grace_s, ctx.store, TimerKind.STUCK_NODE)
        self.untracked_reported: set[str] = set()
        self.seen: list[CloudInstance] | None = None  # this pass's listing (None: EC2 silent)

    def run(self, nodes: list[SlurmNode] | None) -> list[InstanceRow] | None:
        """`nodes`: Slurm's nodes this pass, None when Slurm was unreadable. Returns the
        instances the store tracks as running (read once for the pass), or None when EC2 did
        not answer."""
        c = self.ctx
        self.seen = None
        active = c.store.active_instances()
        try:
            seen = self._listing(active)
        except CloudError as e:
            log.warning("cannot list instances to look for vanished ones: %s", e)
            return None
        self.seen = seen
        now = c.clock()
        self.interruptions.sweep(seen, now, active)
        leaks = leaked_instances(seen, c.cfg.cluster_name, {i.instance_id for i in active},
                                 now, c.cfg.daemon.leak_grace_s)
        if leaks:
            leaks = self._not_launching(leaks)
        if leaks:
            leaks = self._not_in_use(leaks, {i.node for i in active}, nodes)
        if leaks and c.terminate(
                [i.instance_id for i in leaks],
                f"leaked: tagged for cluster {c.cfg.cluster_name}, no node expects it, "
                f"older than {c.cfg.daemon.leak_grace_s:g}s"):
            for i in leaks:
                c.event(Kind.LEAK_TERMINATED, f"{i.instance_id} ({i.state}, node tag "
                        f"{i.tags.get(TAG_NODE, 'none')}, launched {i.launched_at}) was "
                        "running untracked", node=i.tags.get(TAG_NODE))
        self.warm.tend(seen, {i.instance_id for i in active}, now)
        if nodes:
            self._terminate_nodeless(active, nodes, now)
            self._power_down_lost(nodes, seen, {i.node for i in active}, now)
            self._return_stuck(nodes, seen, {i.node for i in active}, now)
        for name in self.fleets.sweep_groups(c.store.live_gangs()):
            c.event(Kind.PLACEMENT_GROUP_DELETED, f"{name}: its gang's instances are gone")
        return active

    def _listing(self, active: list[InstanceRow]) -> list[CloudInstance]:
        """This cluster's instances that are not terminated, and those the store has running
        that EC2 no longer lists as such (terminated: vanished). Two reads, so a pass costs
        what is up, not what ran: EC2 lists terminated instances for up to about an hour
        ("Recently terminated instances might appear in the returned results. This interval
        is usually less than one hour": EC2 API reference, DescribeInstances), a busy
        cluster's hundreds, and the moto server keeps them for ever."""
        tags = {TAG_CLUSTER: self.ctx.cfg.cluster_name}
        seen = self.ctx.cloud.find(tags)
        listed = {i.instance_id for i in seen}
        gone = [i.instance_id for i in active if i.instance_id not in listed]
        if gone:
            seen += self.ctx.cloud.find(tags, include_terminated=True, ids=gone)
        return seen

    def _terminate_nodeless(self, active: list[InstanceRow], nodes: list[SlurmNode],
                            now: datetime) -> None:
        """A tracked instance whose node Slurm does not have (a name Slurm refused, a node
        taken out of slurm.conf) can never run a job: terminated once older than the leak
        grace, like an untracked one. Slurm's node list must be non-empty to judge."""
        c = self.ctx
        known = {n.name for n in nodes}
        grace = c.cfg.daemon.leak_grace_s
        orphans = [i for i in active if i.node not in known
                   and (now - utc(i.launched_at)).total_seconds() >= grace]
        if orphans and c.terminate([i.instance_id for i in orphans],
                                   f"no Slurm node of that name for {grace:g}s"):
            for i in orphans:
                c.event(Kind.LEAK_TERMINATED, f"{i.instance_id} was launched for node "
                        f"{i.node!r}, which Slurm does not have", node=i.node)

    def _power_down_lost(self, nodes: list[SlurmNode], seen: list[CloudInstance],
                         tracked: set[str], now: datetime) -> None:
        c = self.ctx
        lost = nodes_without_instances(nodes, lambda n: c.cfg.pool_of(n) is not None,
                                       seen, tracked)
        due, waits = self.lost.due(lost, now)
        c.effects.apply([waits])
        if not due:
            return
        c.effects.apply([edits.power_down(due, reasons.reason(Why.LOST), said=(
            Kind.NODE_WITHOUT_INSTANCE,
            f"{compress(due)}: up in Slurm, but neither EC2 nor the store has an instance "
            f"for {c.cfg.daemon.lost_node_grace_s:g}s; powered down (jobs requeue)"))])

    def _return_stuck(self, nodes: list[SlurmNode], seen: list[CloudInstance],
                      tracked: set[str], now: datetime) -> None:
        """Nodes Slurm holds DOWN while powered down for a reason of its own (a resume that
        ran into ResumeTimeout): powered down again, so they return to idle~ (lost_nodes)."""
        c = self.ctx
        stuck = stuck_powered_down(nodes, lambda n: c.cfg.pool_of(n) is not None, seen,
                                   tracked)
        due, waits = self.stuck.due(stuck, now)
        c.effects.apply([waits])
        if not due:
            return
        why = {n.name: n.reason or n.state for n in nodes if n.name in due}
        first = why[due[0]]
        c.effects.apply([edits.power_down(due, reasons.reason(Why.STUCK, first), said=(
            Kind.NODE_STUCK,
            f"{compress(due)}: Slurm held {'it' if len(due) == 1 else 'them'} DOWN while "
            f"powered down ({first}) with no instance behind; powered down again to return "
            f"{'it' if len(due) == 1 else 'them'} to service. Repeated: slurmctld cannot "
            "run the resume hook (`slurmscale check`), or boots outlast ResumeTimeout"))])

    def _not_launching(self, leaks: list[CloudInstance]) -> list[CloudInstance]:
        """Of untracked instances, those not tagged for a gang whose launch is still being
        settled: a CreateFleet whose answer was lost is retried with the same ClientToken,
        and EC2 then answers with these very instances (a retried request with the same
        client token returns the first call's result: EC2 API reference, "Ensuring
        idempotency in Amazon EC2 API requests"), which must still be running then. The
        launch pass records them or terminates them once it has an answer; until then they
        are not a leak."""
        gangs = {g for g in {i.tags.get(TAG_GANG, "") for i in leaks} if g}
        launching = {g for g in gangs
                     if (row := self.ctx.store.get_gang(g)) is not None
                     and row.status == GangStatus.LAUNCHING}
        return [i for i in leaks if i.tags.get(TAG_GANG, "") not in launching]

    def _not_in_use(self, leaks: list[CloudInstance], tracked_nodes: set[str],
                    nodes: list[SlurmNode] | None) -> list[CloudInstance]:
        """Of untracked instances, those Slurm cannot be using: no node tag, a node no pool
        has, a node powered down, or a node whose tracked instance is another one. An
        untracked instance of a node Slurm has up (a store lost or pointed elsewhere, say) is
        never terminated on that missing information: it is reported once instead. Slurm
        unreadable: nothing is terminated this pass."""
        if nodes is None:
            log.warning("leak check skipped: Slurm not readable")
            return []
        by_name = {n.name: n for n in nodes}
        out = []
        for i in leaks:
            node = i.tags.get(TAG_NODE, "")
            n = by_name.get(node)
            if (not node or n is None or node in tracked_nodes
                    or ("POWERED_DOWN" in n.flags and "POWERING_UP" not in n.flags)):
                out.append(i)
            elif i.instance_id not in self.untracked_reported:
                self.untracked_reported.add(i.instance_id)
                self.ctx.event(Kind.UNTRACKED_INSTANCE, f"{i.instance_id} is tagged for node "
                               f"{node}, which Slurm has {n.state}, but slurmscale does not "
                               "track it; not terminated: check the store (store_url) and the "
                               "node", node=node)
        return out
