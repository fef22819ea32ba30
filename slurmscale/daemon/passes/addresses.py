"""Node addresses and tags: each node's NodeAddr points at its instance while it runs and back
at its own name once it is gone, whatever failed in between (slurmctld down during the
`scontrol update`, the daemon killed between recording an instance and finishing its node)."""

from __future__ import annotations

from collections.abc import Callable

from slurmscale.audit import Kind
from slurmscale.cloud.protocol import TAG_NODE
from slurmscale.config import AddressSource
from slurmscale.daemon.context import PassContext, launched
from slurmscale.daemon.executor import edits
from slurmscale.daemon.executor.effects import Effect, GangUpdate, Say, Tag, Together
from slurmscale.hostlists import compress
from slurmscale.lifecycles import GangStatus
from slurmscale.model import LaunchedInstance, SlurmNode
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.rows import InstanceRow

_RELEASING = frozenset({"POWERED_DOWN", "POWERING_DOWN"})
_POWERING = frozenset({"POWERING_UP", "POWERING_DOWN"})


class NodeAddresses:
    def __init__(self, ctx: PassContext[LaunchStore]) -> None:
        self.ctx = ctx
        # powered-down nodes whose NodeAddr was judged not slurmscale's (slurm.conf's): not
        # looked up again until the node powers up or its address changes
        self.addr_kept: dict[str, str] = {}
        # the address each running instance's node is given (it never changes while the
        # instance runs): worked out once, not every pass for every node
        self.given: dict[str, tuple[str, str]] = {}

    def finish_nodes(self, pairs: list[tuple[str, LaunchedInstance]], address: bool,
                     gid: str | None = None) -> None:
        """Tag each instance with its node and point Slurm's NodeAddr at it (`finish`)."""
        self.ctx.effects.apply(self.finish(pairs, address, gid))

    def finish(self, pairs: list[tuple[str, LaunchedInstance]], address: bool,
               gid: str | None = None) -> list[Effect]:
        """Each instance tagged with its node, Slurm's NodeAddr pointed at it and its node
        record told which instance backs it; failures are events (the resume is replayed,
        and every step is idempotent). A gang's tags go out in parallel, its addresses in one
        scontrol update (node by node if Slurm refuses that, so each failure names its
        node)."""
        c = self.ctx
        if not pairs:
            return []
        name = c.cfg.cluster_name
        out: list[Effect] = [Together(tuple(
            Tag(inst.instance_id, node, {TAG_NODE: node, "Name": f"{name}-{node}"}, gid)
            for node, inst in pairs))]
        if address:
            out.append(self.addressed([(node, *c.address(node, inst)) for node, inst in pairs],
                                      gang=gid))
        # Slurm's node record says which instance backs each node (23.02+; `scontrol show
        # node` InstanceId/InstanceType): informational, so a refusal is logged, not an event
        out.append(edits.instances([(node, inst.instance_id, inst.instance_type)
                                    for node, inst in pairs]))
        return out

    def set_all(self, entries: list[tuple[str, str, str]], again: bool = False,
                said: Callable[[str], tuple[Kind, str]] | None = None,
                gang: str | None = None) -> None:
        """(node, addr, hostname) set (`addressed`)."""
        self.ctx.effects.apply([self.addressed(entries, again, said, gang)])

    @staticmethod
    def addressed(entries: list[tuple[str, str, str]], again: bool = False,
                  said: Callable[[str], tuple[Kind, str]] | None = None,
                  gang: str | None = None) -> Together:
        """(node, addr, hostname) set in one scontrol update; if Slurm refuses that, node by
        node, so one bad node does not keep the others unaddressed, each refusal said with
        its node (`again`: only logged, the caller sets it again next pass). `said`: each
        node's event once set."""
        return Together(tuple(
            edits.address(node, addr, host, None if said is None else said(node), again, gang)
            for node, addr, host in entries))

    def readdress(self, nodes: list[str]) -> None:
        """Nodes whose instances are recorded: tag and address them again (both idempotent),
        in case the daemon died between recording an instance and finishing its node; and
        finish the gang the daemon died in the middle of (recorded, still `launching`)."""
        c = self.ctx
        rows = c.store.active_instances(nodes)
        # the store keeps no DNS name: with private-dns the first launch's address stands
        self.finish_nodes([(row.node, launched(row)) for row in rows],
                          address=c.cfg.node_address is not AddressSource.PRIVATE_DNS)
        for gid in sorted({r.gang_id for r in rows}):
            gang = c.store.get_gang(gid)
            if gang is None or gang.status != GangStatus.LAUNCHING:
                continue
            mine = [r for r in rows if r.gang_id == gid]
            c.effects.apply([
                GangUpdate(gid, dict(status=GangStatus.LAUNCHED, updated_at=c.clock())),
                Say(Kind.LAUNCHED, f"{compress([r.node for r in mine])}: "
                    + ", ".join(f"{r.node}={r.instance_id}" for r in mine)
                    + " (recorded before a restart; the launch is finished now)",
                    node=compress([r.node for r in mine]), gang=gid)])

    def keep(self, nodes: list[SlurmNode], active: list[InstanceRow]) -> None:
        """A node with an instance up whose NodeAddr is not the address slurmscale gave it
        (the `scontrol update` after the launch failed: slurmctld was down, say) is addressed
        again, every pass until it holds: otherwise slurmctld cannot reach the new slurmd, the
        job is requeued and a second launch follows. Costs nothing while addresses hold.
        With private_dns the store has no DNS name to compare: left to the launch."""
        c = self.ctx
        if c.cfg.node_address is AddressSource.PRIVATE_DNS:
            return
        by_name = {n.name: n for n in nodes}
        given = {}
        for row in active:
            addr, host = given[row.instance_id] = self.given.get(row.instance_id) or \
                c.address(row.node, launched(row))
            n = by_name.get(row.node)
            # (addressed as given, the common case, first; being released: release resets
            # the address)
            if n is None or not addr or n.addr == addr or not _RELEASING.isdisjoint(n.flags):
                continue
            c.effects.apply([edits.address(row.node, addr, host, again=True, said=(
                Kind.NODE_ADDRESS_FIXED, f"{row.node} runs on {row.instance_id} but Slurm "
                f"had NodeAddr={n.addr}: set to {addr}"))])
        self.given = given

    def reset_stale(self, nodes: list[SlurmNode]) -> None:
        """A powered-down node still addressed at its released instance (the reset at release
        failed because slurmctld did not answer) is pointed back at its own name, as release
        does, so Slurm never keeps the address of an instance that is gone. Only an address
        slurmscale itself gave the node's last instance counts as stale: a NodeAddr from
        slurm.conf is the admin's. Nodes in transition or with an instance tracked are left
        alone; with private_dns addressing slurmscale never sets NodeAddr at all."""
        c = self.ctx
        if c.cfg.node_address is AddressSource.PRIVATE_DNS:
            return
        candidates = {}
        for n in nodes:
            if ("POWERED_DOWN" not in n.flags or not _POWERING.isdisjoint(n.flags)
                    or n.addr == n.name or c.cfg.pool_of(n.name) is None):
                self.addr_kept.pop(n.name, None)
            elif self.addr_kept.get(n.name) != n.addr:
                candidates[n.name] = n
        if not candidates:
            return
        tracked = {i.node for i in c.store.active_instances(candidates)}
        last_of = c.store.last_instances(candidates)
        stale = []
        for name, n in candidates.items():
            if name in tracked:
                continue  # its release is pending; that resets the address
            last = last_of.get(name)
            given = c.address(name, launched(last))[0] if last else ""
            if not given or n.addr != given:
                self.addr_kept[name] = n.addr
                continue
            stale.append(name)
        self.set_all([(s, s, s) for s in stale], again=True, said=lambda name: (
            Kind.NODE_ADDRESS_RESET, f"{name} is powered down and its instance "
            f"{last_of[name].instance_id} gone, but Slurm still addressed it at "
            f"{candidates[name].addr}: reset to its name"))
