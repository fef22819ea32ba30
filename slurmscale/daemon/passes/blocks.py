"""The Capacity Block pass: keeps each capacity-block pool's closed-window reservation in
Slurm as the pure plan (policy/blocks.py) says, and once a window has closed requeues the jobs
still running on the pool's nodes (never killed, never FAILED) and powers the nodes down, so
the instances are released cleanly before EC2 takes the block back.

Nothing is changed on missing information: with the blocks unreadable (EC2 not answering)
or Slurm's reservations unreadable, the pass does nothing until they can be read.
"""

from __future__ import annotations

import logging
import os
import pwd
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from slurmscale.audit import Kind
from slurmscale.config import CapacityType, Config, Pool
from slurmscale.crashpoints import crash_point
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.executor import edits
from slurmscale.daemon.executor.effects import Effect, taken
from slurmscale.daemon.passes.graces import Graces
from slurmscale.daemon.passes.reserved_capacity import ReservedCapacity
from slurmscale.hostlists import compress
from slurmscale.model import (
    GOING_DOWN,
    CapacityReservation,
    QueueJob,
    SlurmNode,
    SlurmReservation,
)
from slurmscale.policy.blocks import (
    FOREVER_S,
    BlockEdit,
    BlockEditKind,
    BlockPlan,
    Closed,
    at,
    plan_block,
    starts_at_open,
)
from slurmscale.policy.observe import slurm_time
from slurmscale.slurm.protocol import SlurmError
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.rows import CapacityReservationRow, PreemptionCause, utc

log = logging.getLogger(__name__)


def _owner() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return "root"


def held_by(prefix: str, pool: str, reservations: list[SlurmReservation]
            ) -> list[SlurmReservation]:
    """The pool's window reservations among Slurm's (<prefix><pool>-before, -after,
    -after-N; a pool named like another's prefix does not take the other's)."""
    pattern = re.compile(re.escape(f"{prefix}{pool}") + r"-(before|after(-[0-9]+)?)$")
    return [r for r in reservations if pattern.match(r.name)]


def as_closed(r: SlurmReservation) -> Closed:
    """Slurm's reservation as the plan reads it (an unreadable start: begun)."""
    end = slurm_time(r.end_time)
    return Closed(r.name, slurm_time(r.start_time), FOREVER_S * 10 if end is None else end)


@dataclass(frozen=True)
class BlockOutlook:
    """What `slurmscale plan` says of a block pool: its window and its pending jobs' fate."""

    pool: str
    plan: BlockPlan
    jobs: tuple[tuple[str, str], ...]  # (job id, starts when the block opens / why not)


def block_outlook(cfg: Config, rows: list[CapacityReservationRow], jobs: list[QueueJob],
                  now: float) -> list[BlockOutlook]:
    """From the blocks as the daemon last read them (the store) and Slurm's queue."""
    out = []
    for pool in cfg.pools:
        if pool.capacity_type is not CapacityType.CAPACITY_BLOCK:
            continue
        blocks = [CapacityReservation(
            r.id, r.instance_type, r.availability_zone, r.total, r.available, r.state,
            r.kind, utc(r.start_at).timestamp() if r.start_at else None,
            utc(r.end_at).timestamp() if r.end_at else None)
            for r in rows if r.pool == pool.name]
        plan = plan_block(pool.name, cfg.capacity_blocks.prefix, blocks, now,
                          cfg.block_end_margin_s())
        pending = sorted((j for j in jobs if j.state == "PENDING"
                          and pool.partition in j.partitions), key=lambda j: -j.priority)
        out.append(BlockOutlook(pool.name, plan, tuple(starts_at_open(
            plan, [(j.job_id, j.num_nodes, j.time_limit_s) for j in pending]))))
    return out


class BlockPass:
    def __init__(self, ctx: PassContext[LaunchStore], reserved: ReservedCapacity) -> None:
        cfg, store, slurm, event = ctx.cfg, ctx.store, ctx.slurm, ctx.event
        self.cfg = cfg
        self.store = store
        self.slurm = slurm
        self.reserved = reserved
        self.event = event
        self.effects = ctx.effects  # (its refusals' waits on the store)
        # a pool's grace_signal: the jobs still running at a close are signalled first
        self.graces = Graces(cfg, store, ctx.effects, event)
        self.pools = [p for p in cfg.pools if p.capacity_type is CapacityType.CAPACITY_BLOCK]
        self.prefix = cfg.capacity_blocks.prefix
        self.user = _owner()

    def plans(self, now: float, held: list[SlurmReservation]
              ) -> list[tuple[Pool, BlockPlan]] | None:
        """Each block pool's plan against Slurm's reservations `held`, or None while the
        blocks cannot be read."""
        if not self.pools:
            return []
        self.reserved.reservations(now)
        if not self.reserved.readable:
            return None
        return [(p, plan_block(p.name, self.prefix, self.reserved.of_pool(p, now), now,
                               self.cfg.block_end_margin_s(),
                               [as_closed(r) for r in held_by(self.prefix, p.name, held)]))
                for p in self.pools]

    def run(self, nodes: list[SlurmNode], now: datetime) -> None:
        t = now.timestamp()
        if not self.pools:
            return
        try:
            slurm_has = [r for r in self.slurm.reservations() if r.name.startswith(self.prefix)]
        except SlurmError as e:
            log.warning("block pass skipped: %s", e)
            return
        plans = self.plans(t, slurm_has)
        if plans is None:
            return
        mine: set[str] = set()
        planned: list[Pool] = []  # pools whose whole plan Slurm now holds
        for pool, plan in plans:
            held = {r.name: r for r in held_by(self.prefix, pool.name, slurm_has)}
            mine |= set(held)
            if self._edit(pool, plan, held, t):
                planned.append(pool)
            if not plan.is_open:
                self._close(pool, plan, nodes, now)
        self.effects.apply([
            self._unreserve(name, "no capacity-block pool of that name in the config")
            for name in sorted({r.name for r in slurm_has} - mine)
            if not any(name.startswith(f"{self.prefix}{p.name}-") for p in self.pools)], t)
        if planned:
            self._open(planned, t)

    def _edit(self, pool: Pool, plan: BlockPlan, held: dict[str, SlurmReservation],
              now: float) -> bool:
        """Carry out the plan's edits, in its order (deletes, shrinks, moves, creates): never
        delete-then-create one span, in between the scheduler would see the pool open.
        True when Slurm now holds the whole plan (every edit made, or none needed)."""
        names = pool.node_names()
        todo = list(plan.edits)
        touched = {e.name for e in todo}
        for c in plan.closed:  # the right span over the wrong nodes (the pool grew, say)
            r = held.get(c.name)
            if r is not None and c.name not in touched and sorted(r.nodes) != sorted(names):
                todo.append(BlockEdit(BlockEditKind.UPDATE, c.name, None, c.end))
        out: list[Effect] = []
        for e in todo:
            if e.kind is BlockEditKind.DELETE:
                out.append(self._unreserve(e.name, plan.reason))
                continue
            start = None if e.start is None or e.start <= now else e.start
            until = ("until further notice" if e.end - now > FOREVER_S / 2
                     else f"until {at(e.end)}")
            said = (Kind.BLOCK_RESERVATION, f"{pool.name}: nodes closed from "
                    f"{'now' if start is None else at(start)} {until}: {plan.reason}")
            out.append(edits.window(e.name, names, [self.user], start, e.end, said=said)
                       if e.kind is BlockEditKind.CREATE
                       else edits.window_set(e.name, names, start, e.end, said=said))
        return all(a.taken for a in self.effects.apply(out, now))

    def _open(self, pools: list[Pool], now: float) -> None:
        """The pools' partitions UP once Slurm holds their windows: the rendered slurm.conf
        starts them DOWN (jobs queue, none starts), so from slurmctld's start until this
        pass no job lands on a block node outside a window Slurm knows of. The block
        partition's State is slurmscale's (docs/capacity.md)."""
        try:
            states = self.slurm.partition_states()
        except SlurmError as e:
            log.warning("partitions not read: %s", e)
            return
        self.effects.apply([edits.partition_up(pool.partition, pool.node_names(), said=(
            Kind.BLOCK_PARTITION_OPENED, f"{pool.partition}: UP, the block's windows being in "
            "Slurm's reservations (slurm.conf starts it DOWN)")) for pool in pools
            if states.get(pool.partition, "UP") == "DOWN"], now)

    @staticmethod
    def _unreserve(name: str, why: str) -> edits.Edit:
        return edits.unreserve(name, said=(Kind.BLOCK_RESERVATION_DELETED, f"{name}: {why}"))

    def _close(self, pool: Pool, plan: BlockPlan, nodes: list[SlurmNode],
               now: datetime) -> None:
        """Outside a window: requeue what still runs on the pool, power its idle nodes down
        (decided as edits, then applied in order: the requeues, then the power-down). With
        the pool's `grace_signal`, a job still running is signalled first and requeued by
        the interruption pass (`settle_graces`) at EC2's terminations less the margin, if
        it has not left by then. A job on several of the nodes is requeued once (a refusal
        is tried again next pass)."""
        up = [n for n in nodes if pool.owns(n.name) and not (GOING_DOWN & n.flags)]
        idle = []
        requeues: dict[str, Effect] = {}
        graced = self._graced(pool, up, now)
        for n in up:
            try:
                jobs = self.slurm.jobs_on_node(n.name)
            except SlurmError as e:
                log.warning("block %s: cannot list jobs on %s: %s", pool.name, n.name, e)
                continue
            for job in jobs:
                if job in requeues or graced(job, n.name):
                    continue
                requeues[job] = edits.requeue(job, n.name, said=(
                    Kind.BLOCK_JOB_REQUEUED, f"job {job} still running on {n.name} when "
                    f"{pool.name}'s block window closed: requeued ({plan.reason})"))
            if not jobs and n.base_state == "IDLE":
                idle.append(n.name)
        t = now.timestamp()
        if taken(self.effects.apply(requeues.values(), t), edits.EditKind.REQUEUE):
            crash_point("block:after_requeue")
        if idle:
            self.effects.apply([edits.release(idle, said=(
                Kind.BLOCK_CLOSED, f"{pool.name}: {compress(idle)} powered down, the block "
                f"window is closed ({plan.reason})"))], t)

    def _graced(self, pool: Pool, up: list[SlurmNode], now: datetime
                ) -> Callable[[str, str], bool]:
        """Whether a job on a closing pool's node is in its grace (signalled now, or
        earlier and not over): (job, node) -> True to leave it running for now. Without the
        pool's `grace_signal`, or with no time left before EC2's terminations (its margin
        included), or the node's instance or block unknown: never (requeued now)."""
        if pool.grace_signal is None or not up:
            return lambda job, node: False
        graces = self.graces.open()
        held = {(g.job_id, g.node) for g in graces}
        signalled = {g.job_id for g in graces}
        names = {n.name for n in up}
        insts = {i.node: i for i in self.store.active_instances()
                 if i.node in names and i.state == "running"}
        ends = {r.id: r.end for r in self.reserved.of_pool(pool, now.timestamp())}
        lead = self.cfg.capacity_blocks.termination_lead_s

        def graced(job: str, node: str) -> bool:
            if (job, node) in held:
                return True
            inst = insts.get(node)
            end = None if inst is None else ends.get(inst.capacity_reservation_id)
            if inst is None or end is None:
                return False
            window = self.graces.window(pool.name, datetime.fromtimestamp(end - lead, UTC),
                                        now)
            if window is None or not self.graces.start(
                    job, inst, window, PreemptionCause.BLOCK_END,
                    f"capacity-block-end:{inst.capacity_reservation_id}",
                    now.isoformat(timespec="seconds"), now, again=job in signalled):
                return False
            held.add((job, node))
            signalled.add(job)
            return True
        return graced
