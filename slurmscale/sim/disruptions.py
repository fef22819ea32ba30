"""What EC2 and the hardware do to running nodes: spot interruptions (at random, a rate per
node-hour, and in a storm, after which spot launches fail for a while), an interruptible
reservation's owner taking nodes back, a Capacity Block's end, and node failures. Seeded: the
same run gives the same result. slurmscale's policies hear of them as the daemon would (AWS's
warnings on the event queue, Slurm's DOWN nodes); the other policies' tools act on them
here."""

from __future__ import annotations

import math

from slurmscale.sim.scheduler import SlurmScheduler
from slurmscale.sim.world import NOT_RESPONDING, ODCR, Node


class Disruptions(SlurmScheduler):
    def _block_end(self, i: int, now: float) -> int:
        """EC2 takes the block back (from `block_lead_s` before its end): its nodes go. A job
        still on one dies with it (counted; a margin of at least the lead makes this never
        happen, a smaller one shows up here). Returns the jobs killed."""
        killed = 0
        for idx, placed in list(self.placed.items()):
            if not any(m.paid == i for m, _ in placed):
                continue
            job = self.jobs[idx]
            self._vacate(idx, now)
            self.running_gpus -= job.gpus_per_node(self.main.gpus_per_node) * job.nodes
            self.start.pop(idx)
            self.waited.pop(idx, None)
            killed += 1
        self.result.jobs_killed_at_block_end += killed
        for n in self.nodes:
            if n.state != "down" and n.paid == i:
                self._power_down(n, now)
        return killed

    def _interruptions(self, now: float) -> None:
        assert self.spot is not None
        live = [n for n in self.nodes_of[self.main.name] if n.state != "down" and n.spot]
        hit: list[Node] = []
        if self.spot.interruption_rate > 0:
            p = 1.0 - math.exp(-self.spot.interruption_rate * self.cloud.tick_s / 3600.0)
            hit = [n for n in live if self.rng.random() < p]
        if (self.spot.storm_at_s is not None and not self.stormed
                and now >= self.spot.storm_at_s):
            self.stormed = True
            rest = [n for n in live if n not in hit]
            take = min(len(rest), round(self.spot.storm_fraction * len(live)))
            hit += self.rng.sample(rest, take)
            self.spot_down_until = now + self.spot.storm_outage_s
        self.result.preemptions += len(hit)
        if self.daemon is not None:
            # AWS's warnings reach the daemon's interruption pass: it puts the pool in
            # backoff, drains each node, requeues its jobs (recording each preemption, moving
            # a job that lost too many runs to on-demand) and powers the node down
            self.daemon.interrupted([n.name for n in hit])
            return
        for n in hit:
            self._interrupt(n, now)

    def _reclaims(self, now: float) -> None:
        """An interruptible reservation's owner takes reserved nodes back (EC2's two-minute
        warning): their jobs requeue, the nodes go; the reservation has them again later."""
        live = [n for n in self.nodes if n.state != "down" and n.paid == ODCR]
        p = 1.0 - math.exp(-self.paid.reclaim_rate * self.cloud.tick_s / 3600.0)
        hit = [n for n in live if self.reclaim_rng.random() < p]
        self.result.reclaims += len(hit)
        if hit and self.daemon is not None:
            self.daemon.interrupted([n.name for n in hit], reclaim=True)
        elif hit:
            self.release_nodes([n.name for n in hit], now, force=True)

    def _interrupt(self, n: Node, now: float) -> None:
        """The warning, as the other policies' tools act on it: the node's jobs requeued, the
        instance gone, spot launches held back for the reclaim backoff."""
        assert self.spot is not None
        self.spot_down_until = max(self.spot_down_until, now + self.spot.reclaim_backoff_s)
        self.release_nodes([n.name], now, force=True)

    def _fail(self, now: float) -> None:
        """Nodes up fail at random (a rate per node-hour): their jobs requeued as Slurm does on
        a node failure, the node DOWN. The other policies' admins return a failed node after
        `admin_repair_s`; slurmscale's health pass replaces it (through SimSlurm)."""
        f = self.failures
        assert f is not None
        if self.daemon is None:
            for n in self.nodes:
                if n.failed_at is not None and now >= n.failed_at + f.admin_repair_s:
                    self._recovered(n, now)
        if f.rate <= 0:
            return
        p = 1.0 - math.exp(-f.rate * self.cloud.tick_s / 3600.0)
        for n in self.nodes:
            if n.state != "up" or n.failed_at is not None or self.fail_rng.random() >= p:
                continue
            # DOWN: nothing starts there, never idle (so never powered down by Slurm)
            n.failed_at, n.drain = now, NOT_RESPONDING
            self.touched.add(n.name)
            self.result.node_failures += 1
            for idx in [i for i, placed in self.placed.items() if any(m is n for m, _ in placed)]:
                self.requeue_job(idx, now, preempted=False)
            n.idle_since = None  # (after the requeues, which mark it idle)
            self.bf_dirty = True
