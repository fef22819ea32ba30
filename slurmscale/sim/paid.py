"""Capacity paid whether used or not, as the daemon routes launches into it: a Capacity Block
the new nodes fit whole in (and the job's time limit ends in), else the On-Demand Capacity
Reservation, else normal capacity; a job never placed on a block node it would outlast.
The model of the other policies, and of slurmscale's with blocks: without blocks slurmscale's
daemon routes into the ODCR itself (`PaidCapacity.routed_by_daemon`)."""

from __future__ import annotations

from slurmscale.policy.model import PoolKnobs
from slurmscale.policy.routing import reclaims_exhausted
from slurmscale.sim.state import SimState
from slurmscale.sim.world import ODCR, Node


class PaidRouting(SimState):
    def _in_paid(self, src: int) -> int:
        return sum(1 for n in self.nodes if n.state != "down" and n.paid == src)

    def _paid_source(self, k: PoolKnobs, idx: int, need: int, now: float) -> int | None:
        """Where `need` new nodes for job `idx` launch: a block they fit whole in (and the
        job's limit ends in), the reservation they fit whole in, or normal capacity (None)."""
        if k is not self.main:
            return None  # paid capacity is the main pool's
        for i, b in enumerate(self.paid.blocks):
            if (b.start_s <= now < self.paid.taken_back_s(b)
                    and now + self.cloud.boot_s + self.limit[idx] <= self.paid.close_s(b)
                    and b.nodes - self._in_paid(i) >= need):
                return i
        if (self.paid.use_reserved and self.paid.reserved_nodes and not self.routes_reserved
                and self.paid.reserved_nodes - self._in_paid(ODCR) >= need
                and not (self.paid.reclaim_rate > 0
                         and reclaims_exhausted(self.preempted.get(idx, 0),
                                                self.paid.max_reclaims))):
            return ODCR
        return None

    def _outlasts(self, n: Node, start: float, idx: int) -> bool:
        """Could job `idx` (by its limit) run past the end of the block node `n` is in?"""
        if n.paid is None or n.paid == ODCR:
            return False
        return start + self.limit[idx] > self.paid.close_s(self.paid.blocks[n.paid])
