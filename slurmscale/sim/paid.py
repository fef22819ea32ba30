"""Capacity paid whether used or not, for the other policies (`static`, `naive`,
`immediate`: no daemon routes their launches): a Capacity Block the new nodes fit whole in
(and the job's time limit ends in), else the On-Demand Capacity Reservation, else normal
capacity; a job never placed on a block node it would outlast. slurmscale's daemon routes
into both itself (`SimState.routes_paid`): its launch pass, its block pass's windows in the
simulated Slurm, the simulated EC2's block."""

from __future__ import annotations

from slurmscale.policy.model import PoolKnobs
from slurmscale.policy.routing import reclaims_exhausted
from slurmscale.sim.state import SimState
from slurmscale.sim.world import ODCR, Node


class PaidRouting:
    """Where the simulated Slurm's new nodes launch (its ResumeProgram's answer), read off
    the shared state's nodes and paid capacity."""

    def __init__(self, st: SimState) -> None:
        self.st = st
        self.paid = st.paid

    def in_paid(self, src: int) -> int:
        return sum(1 for n in self.st.nodes if n.state != "down" and n.paid == src)

    def source(self, k: PoolKnobs, limit_s: float, preempted: int, need: int, now: float
               ) -> int | None:
        """Where `need` new nodes for a job (its time limit `limit_s`, preempted `preempted`
        times) launch: a block they fit whole in (and the job's limit ends in), the
        reservation they fit whole in, or normal capacity (None)."""
        st, paid = self.st, self.paid
        if k is not st.main or st.routes_paid:
            return None  # paid capacity is the main pool's; the daemon's to route
        for i, b in enumerate(paid.blocks):
            if (b.start_s <= now < paid.taken_back_s(b)
                    and now + st.cloud.boot_s + limit_s <= paid.close_s(b)
                    and b.nodes - self.in_paid(i) >= need):
                return i
        if (paid.use_reserved and paid.reserved_nodes
                and paid.reserved_nodes - self.in_paid(ODCR) >= need
                and not (paid.reclaim_rate > 0
                         and reclaims_exhausted(preempted, paid.max_reclaims))):
            return ODCR
        return None

    def outlasts(self, n: Node, start: float, limit_s: float) -> bool:
        """Could a job of time limit `limit_s` starting at `start` run past the end of the
        block node `n` is in?"""
        if n.paid is None or n.paid == ODCR:
            return False
        return start + limit_s > self.paid.close_s(self.paid.blocks[n.paid])
