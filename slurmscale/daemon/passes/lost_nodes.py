"""Nodes Slurm has up with no instance behind them: an instance terminated by hand, or one
the store never learnt of and EC2 has since forgotten. Slurm would only notice when the node
stops answering, set it DOWN, and leave it there; slurmscale powers it down instead (Slurm
requeues its jobs and the next resume launches a fresh instance).

And nodes Slurm keeps out of service while powered down with nothing behind them: a resume
that ran into ResumeTimeout leaves its node `DOWN+CLOUD+POWERED_DOWN+NOT_RESPONDING`
("ResumeTimeout reached") for good, on 22.05 as on later releases (ResumeFailProgram changes
nothing in Slurm), so the pool loses a node per failed boot and jobs wait "Nodes required
for job are DOWN" while the policy counts the node as capacity to power up. A power-down
(power_down_force) returns it to `idle~` after SuspendTimeout, as an admin would by hand.
Only Slurm's own reasons count: a node an admin set DOWN (any other reason) or drained is
left to them.

Both EC2 and the store must agree there is nothing: an instance EC2 still lists under the
node's tag (untracked, say, after a lost store) keeps the node up. Nothing is decided on a
pass where either could not be read."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from slurmscale.cloud.protocol import TAG_NODE, CloudInstance
from slurmscale.daemon.executor.effects import Timers
from slurmscale.model import POWER_TRANSITIONS, SlurmNode
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.rows import TimerKind


def nodes_without_instances(nodes: Iterable[SlurmNode], is_cloud_node: Callable[[str], bool],
                            seen: Iterable[CloudInstance], tracked_nodes: set[str]
                            ) -> set[str]:
    """Cloud nodes that Slurm has up and for which no instance is pending or running in EC2
    (by node tag) or in the store."""
    in_ec2 = {i.tags.get(TAG_NODE) for i in seen if i.state in ("pending", "running")}
    return {n.name for n in nodes  # (the cheap tests first: this runs every pass)
            if n.name not in tracked_nodes and n.name not in in_ec2
            and not (n.flags & POWER_TRANSITIONS) and is_cloud_node(n.name)}


# the reasons slurmctld itself gives a node it set DOWN (slurmctld's power_save and ping)
SLURMS_DOWN = ("ResumeTimeout reached", "Not responding")


def stuck_powered_down(nodes: Iterable[SlurmNode], is_cloud_node: Callable[[str], bool],
                       seen: Iterable[CloudInstance], tracked_nodes: set[str]) -> set[str]:
    """Cloud nodes Slurm holds DOWN while powered down, for a reason of its own (or none,
    while not responding), with no instance pending or running in EC2 or the store and no
    drain: nothing will bring them back but a power-down."""
    in_ec2 = {i.tags.get(TAG_NODE) for i in seen if i.state in ("pending", "running")}
    return {n.name for n in nodes
            if "POWERED_DOWN" in n.flags and n.base_state == "DOWN" and "DRAIN" not in n.flags
            and "POWERING_DOWN" not in n.flags and "POWER_DOWN" not in n.flags
            and (n.reason.startswith(SLURMS_DOWN)
                 or (not n.reason and "NOT_RESPONDING" in n.flags))
            and n.name not in tracked_nodes and n.name not in in_ec2 and is_cloud_node(n.name)}


class LostNodes:
    """Since when each node has been without an instance, on the store (timers of kind
    `kind`, read each pass), so a standby that takes over acts when the leader would have; a
    node is acted on only after `grace_s` of passes that all saw it so (a node that finishes
    booting between two reads is never caught)."""

    KIND = TimerKind.LOST_NODE

    def __init__(self, grace_s: float, store: LaunchStore, kind: TimerKind = KIND) -> None:
        self.kind = kind
        self.grace_s = grace_s
        self.store = store

    def due(self, lost_now: set[str], now: datetime) -> tuple[list[str], Timers]:
        """The nodes whose grace is over, and the waits as they now stand (for the pass's
        executor: the nodes due and those seen again are over, new ones begin)."""
        t = now.timestamp()
        was = self.store.timers(self.kind)
        since = {n: was.get(n, t) for n in lost_now}
        out = sorted(n for n, s in since.items() if t - s >= self.grace_s)
        return out, Timers(self.kind, {n: s for n, s in since.items()
                                       if n not in was and n not in out},
                           over=tuple(sorted((was.keys() - lost_now) | set(out))))
