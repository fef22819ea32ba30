"""What EC2 and the hardware do to running nodes: spot interruptions (at random, a rate per
node-hour, and in a storm, after which spot launches fail for a while), an interruptible
reservation's owner taking nodes back, a Capacity Block's end, and node failures. Seeded: the
same run gives the same result. slurmscale's policies hear of them as the daemon would (AWS's
warnings on the event queue, Slurm's DOWN nodes); the other policies' tools act on them
here, through the simulated Slurm."""

from __future__ import annotations

import math
import random

from slurmscale.sim.scheduler import SimSlurmctld
from slurmscale.sim.state import SimState
from slurmscale.sim.world import NOT_RESPONDING, ODCR, Node


class Disruptions:
    """The cloud's and the hardware's side, beside the simulated Slurm `slurm` (whose jobs
    and nodes they hit): each kind its own seeded draws."""

    def __init__(self, st: SimState, slurm: SimSlurmctld) -> None:
        self.st = st
        self.slurm = slurm
        self.rng = random.Random(st.spot.seed if st.spot else 0)
        self.reclaim_rng = random.Random(st.paid.seed)
        self.fail_rng = random.Random(st.failures.seed if st.failures else 0)
        self.stormed = False

    def block_end(self, i: int, now: float) -> int:
        """EC2 takes the block back (from `block_lead_s` before its end): its nodes go. A job
        still on one dies with it (counted; a margin of at least the lead makes this never
        happen, a smaller one shows up here). Returns the jobs killed. With the daemon: the
        simulated EC2 terminates the block's instances, Slurm loses the nodes."""
        slurm = self.slurm
        if self.st.daemon is not None:
            self.st.daemon.block_taken_back(i)
        killed = [idx for idx, placed in slurm.placed.items()
                  if any(m.paid == i for m, _ in placed)]
        for idx in killed:
            slurm.kill(idx, now)
        self.st.result.jobs_killed_at_block_end += len(killed)
        for n in self.st.nodes:
            if n.state != "down" and n.paid == i:
                slurm.power.down(n, now)
        return len(killed)

    def interruptions(self, now: float) -> None:
        st, spot = self.st, self.st.spot
        assert spot is not None
        live = [n for n in st.nodes_of[st.main.name] if n.state != "down" and n.spot]
        hit: list[Node] = []
        if spot.interruption_rate > 0:
            p = 1.0 - math.exp(-spot.interruption_rate * st.cloud.tick_s / 3600.0)
            hit = [n for n in live if self.rng.random() < p]
        if spot.storm_at_s is not None and not self.stormed and now >= spot.storm_at_s:
            self.stormed = True
            rest = [n for n in live if n not in hit]
            take = min(len(rest), round(spot.storm_fraction * len(live)))
            hit += self.rng.sample(rest, take)
            st.spot_down_until = now + spot.storm_outage_s
        st.result.preemptions += len(hit)
        if st.daemon is not None:
            # AWS's warnings reach the daemon's interruption pass: it puts the pool in
            # backoff, drains each node, requeues its jobs (recording each preemption, moving
            # a job that lost too many runs to on-demand) and powers the node down
            st.daemon.interrupted([n.name for n in hit])
            return
        for n in hit:
            self._interrupt(n, now)

    def reclaims(self, now: float) -> None:
        """An interruptible reservation's owner takes reserved nodes back (EC2's two-minute
        warning): their jobs requeue, the nodes go; the reservation has them again later."""
        st = self.st
        live = [n for n in st.nodes if n.state != "down" and n.paid == ODCR]
        p = 1.0 - math.exp(-st.paid.reclaim_rate * st.cloud.tick_s / 3600.0)
        hit = [n for n in live if self.reclaim_rng.random() < p]
        st.result.reclaims += len(hit)
        if hit and st.daemon is not None:
            st.daemon.interrupted([n.name for n in hit], reclaim=True)
        elif hit:
            self.slurm.release_nodes([n.name for n in hit], now, force=True)

    def _interrupt(self, n: Node, now: float) -> None:
        """The warning, as the other policies' tools act on it: the node's jobs requeued, the
        instance gone, spot launches held back for the reclaim backoff."""
        st = self.st
        assert st.spot is not None
        st.spot_down_until = max(st.spot_down_until, now + st.spot.reclaim_backoff_s)
        self.slurm.release_nodes([n.name], now, force=True)

    def fail(self, now: float) -> None:
        """Nodes up fail at random (a rate per node-hour): their jobs requeued as Slurm does on
        a node failure, the node DOWN. The other policies' admins return a failed node after
        `admin_repair_s`; slurmscale's health pass replaces it (through SimSlurm)."""
        st, slurm, f = self.st, self.slurm, self.st.failures
        assert f is not None
        if st.daemon is None:
            for n in st.nodes:
                if n.failed_at is not None and now >= n.failed_at + f.admin_repair_s:
                    slurm.power.recovered(n, now)
        if f.rate <= 0:
            return
        p = 1.0 - math.exp(-f.rate * st.cloud.tick_s / 3600.0)
        for n in st.nodes:
            if n.state != "up" or n.failed_at is not None or self.fail_rng.random() >= p:
                continue
            # DOWN: nothing starts there, never idle (so never powered down by Slurm)
            n.failed_at, n.drain = now, NOT_RESPONDING
            st.touched.add(n.name)
            st.result.node_failures += 1
            for idx in [i for i, placed in slurm.placed.items()
                        if any(m is n for m, _ in placed)]:
                slurm.requeue_job(idx, now, preempted=False)
            n.idle_since = None  # (after the requeues, which mark it idle)
            slurm.bf_dirty = True
