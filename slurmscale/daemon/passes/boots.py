"""The boot pass: launched nodes that fail to join Slurm get a fresh instance in seconds,
not at Slurm's ResumeTimeout (`policy/boots.py` decides; the bootstrap's side is
`slurmscale/node_init.py`).

A replacement, in the order that survives a crash at any point:
1. a replacement row (the attempt counts even if the daemon dies right after);
2. one instant fleet of one instance for the node, pinned where its gang is (its instance
   type, its subnet so AZ, its placement group, its template version and reservation
   kind), with a ClientToken of its own (gang, node, attempt): a retry is the same request;
3. the new instance recorded for the node (same gang), the failed one terminated;
4. the new instance tagged with its node (its bootstrap is waiting for that tag) and the
   node's NodeAddr pointed at it. Slurm has kept waiting all along: the job keeps its
   allocation and starts when the fresh slurmd registers (Restarts 0).
A crash between 2 and 3 leaves an instance with the gang's tag and no node: the sweep
terminates it as a leak after `daemon.leak_grace_s`. Giving up (retries spent, the replace
loop guard, no capacity for the fresh instance): the instance is terminated and the node
powered down with slurmscale's boot-failed reason; Slurm requeues the job.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import replace

from slurmscale.audit import Kind
from slurmscale.cloud.errors import is_transient
from slurmscale.cloud.protocol import (
    TAG_CLUSTER,
    TAG_GANG,
    TAG_POOL,
    CloudInstance,
    FleetSpec,
)
from slurmscale.config import CapacityType
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.executor import edits
from slurmscale.daemon.executor.effects import (
    Chain,
    Effect,
    Fleet,
    Record,
    Say,
    Terminate,
    Untrack,
    fleet,
)
from slurmscale.daemon.metrics import Metrics
from slurmscale.daemon.passes.addresses import NodeAddresses
from slurmscale.daemon.passes.fleets import GangFleets
from slurmscale.daemon.passes.launch import client_token
from slurmscale.lifecycles import InstanceState
from slurmscale.model import LaunchedInstance, SlurmNode
from slurmscale.policy.boots import (
    BOOT_CAUSE_PREFIX,
    TAG_BOOT_ERROR,
    Booting,
    BootStep,
    BootVerdict,
    boot_verdicts,
)
from slurmscale.slurm import reasons
from slurmscale.slurm.reasons import Why
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.rows import InstanceRow, LaunchPhasesRow, ReplacementRow, utc

log = logging.getLogger(__name__)


class BootPass:
    def __init__(self, ctx: PassContext[LaunchStore], fleets: GangFleets,
                 addresses: NodeAddresses, metrics: Metrics | None = None) -> None:
        self.ctx = ctx
        self.fleets = fleets
        self.addresses = addresses
        self.metrics = metrics

    def run(self, nodes: list[SlurmNode], active: list[InstanceRow] | None,
            seen: list[CloudInstance] | None) -> None:
        """`active`: the store's running instances (read this pass); `seen`: the cluster's
        instances as EC2 listed them this pass (their tags), None when EC2 did not answer."""
        c = self.ctx
        rows = c.store.active_instances() if active is None else active
        # (the nodes powering up first: most passes have none, and the rest is not read)
        powering = {n.name: n for n in nodes if "POWERING_UP" in n.flags}
        booting = [r for r in rows if r.node in powering and r.state == InstanceState.RUNNING]
        if not booting:
            return
        now = c.clock().timestamp()
        cloud = {i.instance_id: i for i in seen or []}
        errors = {iid: i.tags[TAG_BOOT_ERROR] for iid, i in cloud.items()
                  if TAG_BOOT_ERROR in i.tags}
        hc = c.cfg.health
        recent_rows = c.store.replacements(since=now - hc.window_s)
        running = [Booting(r.instance_id, r.node, r.pool, utc(r.launched_at).timestamp())
                   for r in booting]
        verdicts = boot_verdicts(
            powering, running, errors, now,
            {p.name: p.join_timeout() for p in c.cfg.pools},
            self._attempts(booting, recent_rows), Counter(r.node for r in recent_rows),
            max_retries={p.name: p.max_boot_retries for p in c.cfg.pools},
            max_replacements=hc.max_replacements)
        by_id = {r.instance_id: r for r in booting}
        for v in verdicts:
            row = by_id[v.instance_id]
            # (Slurm's refusals are outcomes, said where they are applied: one node's
            # trouble never stops the others)
            if v.step is BootStep.REPLACE:
                self._replace(v, row, cloud.get(v.instance_id))
            else:
                self._give_up(v, row)

    def _attempts(self, booting: list[InstanceRow], recent: list[ReplacementRow]
                  ) -> dict[str, int]:
        """Fresh instances already given each node in its current power-up: the boot
        replacements since its gang was launched."""
        out: dict[str, int] = {}
        created: dict[str, float | None] = {}  # gang -> when launched (one read a gang)
        starts: dict[str, float] = {}
        for r in booting:
            if r.gang_id not in created:
                gang = self.ctx.store.get_gang(r.gang_id)
                created[r.gang_id] = None if gang is None else utc(gang.created_at).timestamp()
            start = created[r.gang_id]
            starts[r.node] = start if start is not None else utc(r.launched_at).timestamp()
        for rep in recent:
            if (rep.cause.startswith(BOOT_CAUSE_PREFIX) and rep.node in starts
                    and utc(rep.at).timestamp() >= starts[rep.node]):
                out[rep.node] = out.get(rep.node, 0) + 1
        return out

    def _spec(self, row: InstanceRow, inst: CloudInstance | None) -> FleetSpec:
        pool = self.ctx.cfg.pool(row.pool)
        spec = FleetSpec.of(pool)
        block = pool.capacity_type is CapacityType.CAPACITY_BLOCK
        return replace(
            spec, instance_types=(row.instance_type,),
            subnets=(inst.subnet_id,) if inst is not None and inst.subnet_id else spec.subnets,
            launch_template_version=row.launch_template_version,
            reserved=bool(row.capacity_reservation_id) and not block, capacity_block=block,
            placement_group=self.fleets.placement_group(pool, row.gang_id))

    def _replace(self, v: BootVerdict, row: InstanceRow, inst: CloudInstance | None) -> None:
        c = self.ctx
        pool = c.cfg.pool(row.pool)
        token = client_token(f"{row.gang_id}/boot/{v.node}/{v.attempt + 1}")
        tags = {TAG_CLUSTER: c.cfg.cluster_name, TAG_POOL: pool.name, TAG_GANG: row.gang_id}
        sent = fleet(c.effects.apply([self._record(v, row, v.detail),
                                      Fleet(pool, 1, 1, token, tags, self._spec(row, inst))]))
        if sent.fleet is None:
            if is_transient(sent.code):
                c.effects.apply([Say(
                    Kind.BOOT_REPLACE_DEFERRED, f"{v.node} ({v.instance_id}): {v.cause}; EC2 "
                    f"did not answer ({sent.code}), tried again next pass", node=v.node)])
                return
            return self._give_up(v, row, f"no fresh instance: {sent.code}")
        if not sent.fleet.instances:
            return self._give_up(v, row, "no fresh instance: "
                                 f"{sent.fleet.error_code or 'InsufficientInstanceCapacity'}")
        c.effects.apply(self._replaced(v, row, sent.fleet.instances))
        if self.metrics is not None:
            self.metrics.boot_failed(pool.name, v.cause, "replaced")

    def _replaced(self, v: BootVerdict, row: InstanceRow,
                  got: tuple[LaunchedInstance, ...]) -> list[Effect]:
        """The fresh instance (the first EC2 gave; any other terminated) recorded for the
        node, the failed one terminated (untracked if EC2 will not: one instance a node on
        the store, the sweep terminates it as a leak), the fresh one tagged and the node
        addressed at it."""
        c = self.ctx
        fresh, surplus = got[0], tuple(i.instance_id for i in got[1:])
        max_tries = c.cfg.pool(row.pool).max_boot_retries
        gang = c.store.get_gang(row.gang_id)
        return [
            *([Terminate(surplus, f"surplus fresh instances for {v.node}")] if surplus else []),
            Record((InstanceRow(
                instance_id=fresh.instance_id, node=v.node, pool=row.pool, gang_id=row.gang_id,
                instance_type=fresh.instance_type or row.instance_type,
                lifecycle=fresh.lifecycle or row.lifecycle, image_id=fresh.image_id,
                launch_template_version=row.launch_template_version,
                capacity_reservation_id=fresh.capacity_reservation_id,
                subnet_id=fresh.subnet_id or row.subnet_id, private_ip=fresh.private_ip,
                state=InstanceState.RUNNING, launched_at=c.clock()),)),
            # (its own time to run, from this answer: launch_phases.py)
            Record((LaunchPhasesRow(
                instance_id=fresh.instance_id, node=v.node, pool=row.pool,
                job_nodes=1 if gang is None or gang.coalesced else gang.size,
                answered_s=c.clock().timestamp()),)),
            Chain(Terminate((v.instance_id,), f"{v.node} failed to boot: {v.cause}"),
                  otherwise=(Untrack((v.instance_id,)),)),
            *self.addresses.finish([(v.node, fresh)], address=True, gid=row.gang_id),
            Say(Kind.BOOT_REPLACED, f"{v.node}: {v.instance_id} failed to join Slurm "
                f"({v.cause}: {v.detail}); fresh instance {fresh.instance_id} "
                f"(attempt {v.attempt + 1} of {max_tries}), Slurm still waits",
                node=v.node, gang=row.gang_id)]

    def _record(self, v: BootVerdict, row: InstanceRow, detail: str) -> Record:
        """One replacement row per boot failure (replaced or given up on): the attempts of a
        power-up, the replace-loop guard, `status` and `report` count them."""
        c = self.ctx
        gpus = c.cfg.pool(v.pool).gpus_per_node  # (verdicts are for the config's pools only)
        now = c.clock()
        return Record(ReplacementRow(
            at=now, detected_at=now, node=v.node, pool=v.pool, instance_id=v.instance_id,
            instance_type=row.instance_type, gpus=gpus,
            cause=(BOOT_CAUSE_PREFIX + v.cause)[:32], detail=detail[:500],
            jobs_requeued=0, left=False))

    def _give_up(self, v: BootVerdict, row: InstanceRow, why: str = "") -> None:
        """The node's attempt recorded (unless a failed replacement did), its instance
        terminated, the node powered down with slurmscale's boot-failed reason: Slurm
        requeues its job."""
        c = self.ctx
        detail = f"{v.detail}; {why}" if why else v.detail
        reason = reasons.reason(Why.BOOT_FAILED, f"{v.cause}: {detail}")[:250]
        done = c.effects.apply([
            *([] if why else [self._record(v, row, detail)]),
            Terminate((v.instance_id,), f"{v.node} failed to boot: {v.cause}"),
            edits.power_down([v.node], reason, gang=row.gang_id, said=(
                Kind.BOOT_FAILED, f"{v.node} ({v.instance_id}) did not join Slurm: "
                f"{v.cause}: {detail}; powered down, its job requeues"))])
        if done[-1].taken and self.metrics is not None:
            self.metrics.boot_failed(v.pool, v.cause, "gave-up")

