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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from slurmscale.config import CapacityType, Config, Pool
from slurmscale.daemon.fleets import ReservedCapacity
from slurmscale.hostlists import compress
from slurmscale.model import CapacityReservation, QueueJob, SlurmNode, SlurmReservation
from slurmscale.policy.blocks import FOREVER_S, BlockPlan, at, plan_block, starts_at_open
from slurmscale.policy.observe import slurm_time
from slurmscale.slurm.protocol import SlurmClient, SlurmError
from slurmscale.store.repo import utc
from slurmscale.store.tables import CapacityReservationRow

log = logging.getLogger(__name__)

Event = Callable[..., None]

# Slurm prints whole seconds; a window moved by less than this is the same window.
SAME_WINDOW_S = 90.0


def _owner() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return "root"


def same_window(plan: BlockPlan, r: SlurmReservation, nodes: list[str], now: float) -> bool:
    """Does Slurm's reservation `r` already close the pool as `plan` wants?"""
    start, end = slurm_time(r.start_time), slurm_time(r.end_time)
    if start is None or end is None or sorted(r.nodes) != sorted(nodes):
        return False
    if plan.closed_from is None:
        start_ok = start <= now + SAME_WINDOW_S
    else:
        start_ok = abs(start - plan.closed_from) < SAME_WINDOW_S
    forever = now + FOREVER_S / 2
    end_ok = (end > forever and plan.closed_until > forever) or \
        abs(end - plan.closed_until) < SAME_WINDOW_S
    return start_ok and end_ok


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
            r.kind, utc(r.start_at).timestamp() if r.start_at else None,  # type: ignore[union-attr]
            utc(r.end_at).timestamp() if r.end_at else None)  # type: ignore[union-attr]
            for r in rows if r.pool == pool.name]
        plan = plan_block(pool.name, cfg.capacity_blocks.prefix, blocks, now,
                          cfg.block_end_margin_s())
        pending = sorted((j for j in jobs if j.state == "PENDING"
                          and pool.partition in j.partitions), key=lambda j: -j.priority)
        out.append(BlockOutlook(pool.name, plan, tuple(starts_at_open(
            plan, [(j.job_id, j.num_nodes, j.time_limit_s) for j in pending]))))
    return out


class BlockPass:
    def __init__(self, cfg: Config, slurm: SlurmClient, reserved: ReservedCapacity,
                 event: Event) -> None:
        self.cfg = cfg
        self.slurm = slurm
        self.reserved = reserved
        self.event = event
        self.pools = [p for p in cfg.pools if p.capacity_type is CapacityType.CAPACITY_BLOCK]
        self.prefix = cfg.capacity_blocks.prefix
        self.user = _owner()

    def plans(self, now: float) -> list[tuple[Pool, BlockPlan]] | None:
        """Each block pool's plan, or None while the blocks cannot be read."""
        if not self.pools:
            return []
        self.reserved.reservations(now)
        if not self.reserved.readable:
            return None
        return [(p, plan_block(p.name, self.prefix, self.reserved.of_pool(p, now), now,
                               self.cfg.block_end_margin_s())) for p in self.pools]

    def run(self, nodes: list[SlurmNode], now: datetime) -> None:
        plans = self.plans(now.timestamp())
        if not plans:
            return
        try:
            mine = {r.name: r for r in self.slurm.reservations()
                    if r.name.startswith(self.prefix)}
        except SlurmError as e:
            log.warning("block pass skipped: %s", e)
            return
        for pool, plan in plans:
            self._keep_closed(pool, plan, mine.pop(plan.reservation, None), now.timestamp())
            if not plan.is_open:
                self._close(pool, plan, nodes)
        for name in sorted(mine):  # a pool that is no longer a block pool
            self._delete(name, "no capacity-block pool of that name in the config")

    def _delete(self, name: str, why: str) -> bool:
        try:
            self.slurm.delete_reservation(name)
        except SlurmError as e:
            self.event("slurm_update_failed", f"delete reservation {name}: {e}")
            return False
        self.event("block_reservation_deleted", f"{name}: {why}")
        return True

    def _keep_closed(self, pool: Pool, plan: BlockPlan, current: SlurmReservation | None,
                     now: float) -> None:
        names = pool.node_names()
        if current is not None:
            if same_window(plan, current, names, now):
                return
            if not self._delete(current.name, f"its window changed: {plan.reason}"):
                return
        start = plan.closed_from if plan.closed_from is not None and plan.closed_from > now \
            else None
        try:
            self.slurm.create_window_reservation(plan.reservation, names, [self.user], start,
                                                 plan.closed_until)
        except SlurmError as e:
            self.event("slurm_update_failed", f"reservation {plan.reservation}: {e}")
            return
        until = ("until further notice" if plan.closed_until - now > FOREVER_S / 2
                 else f"until {at(plan.closed_until)}")
        self.event("block_reservation", f"{pool.name}: nodes closed from "
                   f"{'now' if start is None else at(start)} {until}: {plan.reason}",
                   node=compress(names))

    def _close(self, pool: Pool, plan: BlockPlan, nodes: list[SlurmNode]) -> None:
        """Outside a window: requeue what still runs on the pool, power its nodes down."""
        up = [n for n in nodes if pool.owns(n.name)
              and not ({"POWERED_DOWN", "POWERING_DOWN"} & n.flags)]
        idle = []
        requeued: set[str] = set()
        for n in up:
            try:
                jobs = self.slurm.jobs_on_node(n.name)
            except SlurmError as e:
                log.warning("block %s: cannot list jobs on %s: %s", pool.name, n.name, e)
                continue
            for job in jobs:
                if job in requeued:
                    continue
                try:
                    self.slurm.requeue(job)
                except SlurmError as e:
                    self.event("slurm_update_failed", f"requeue job {job}: {e}", node=n.name)
                    continue
                requeued.add(job)
                self.event("block_job_requeued", f"job {job} still running on {n.name} when "
                           f"{pool.name}'s block window closed: requeued ({plan.reason})",
                           node=n.name)
            if not jobs and n.base_state == "IDLE":
                idle.append(n.name)
        if idle:
            try:
                self.slurm.power_down(idle)
            except SlurmError as e:
                self.event("slurm_update_failed", f"power down {compress(idle)}: {e}",
                           node=compress(idle))
                return
            self.event("block_closed", f"{pool.name}: {compress(idle)} powered down, the "
                       f"block window is closed ({plan.reason})", node=compress(idle))
