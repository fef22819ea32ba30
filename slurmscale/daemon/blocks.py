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
from slurmscale.policy.blocks import (
    FOREVER_S,
    BlockPlan,
    Closed,
    at,
    plan_block,
    starts_at_open,
)
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


def same_window(want: Closed, r: SlurmReservation, now: float) -> tuple[bool, bool]:
    """Does Slurm's reservation `r` already have `want`'s start, and its end?"""
    start, end = slurm_time(r.start_time), slurm_time(r.end_time)
    if start is None or end is None:
        return False, False
    if want.start is None or want.start <= now:
        start_ok = start <= now + SAME_WINDOW_S
    else:
        start_ok = abs(start - want.start) < SAME_WINDOW_S
    forever = now + FOREVER_S / 2
    end_ok = (end > forever and want.end > forever) or abs(end - want.end) < SAME_WINDOW_S
    return start_ok, end_ok


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
            for want in plan.closed:
                self._keep_closed(pool, plan, want, mine.pop(want.name, None),
                                  now.timestamp())
            for name in (f"{self.prefix}{pool.name}-before", f"{self.prefix}{pool.name}-after"):
                if name in mine:  # (a "before" past its start: Slurm ends it by itself too)
                    self._delete(mine.pop(name).name, plan.reason)
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

    def _keep_closed(self, pool: Pool, plan: BlockPlan, want: Closed,
                     current: SlurmReservation | None, now: float) -> None:
        """Make Slurm's reservation `want.name` what `want` says. A change is made in place
        (`scontrol update`), never by deleting and creating again: in between, the pool would
        be open to Slurm's scheduler."""
        names = pool.node_names()
        start = want.start if want.start is not None and want.start > now else None
        until = ("until further notice" if want.end - now > FOREVER_S / 2
                 else f"until {at(want.end)}")
        what = (f"{pool.name}: nodes closed from {'now' if start is None else at(start)} "
                f"{until}: {plan.reason}")
        try:
            if current is None:
                self.slurm.create_window_reservation(want.name, names, [self.user], start,
                                                     want.end)
            else:
                start_ok, end_ok = same_window(want, current, now)
                if start_ok and end_ok and sorted(current.nodes) == sorted(names):
                    return
                self.slurm.update_window_reservation(
                    want.name, names, None if start_ok else start, want.end)
        except SlurmError as e:
            self.event("slurm_update_failed", f"reservation {want.name}: {e}")
            return
        self.event("block_reservation", what, node=compress(names))

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
