"""The simulated slurmctld's power saving over the shared state (`state.py`): ResumeProgram (a
node boots for the cloud's delay, into paid capacity or not, with the nodes of its launch),
SuspendProgram (its instance goes: its on-time counted, the daemon told), and the end of a
node's hardware fault. `scheduler.py`'s SimSlurmctld decides when; this part does it."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from slurmscale.sim.state import SimState
from slurmscale.sim.world import NOT_RESPONDING, READY, Node


class SimPower:
    """Power saving on the nodes of `st`; `changed` is told when a node comes back to
    service (backfill may start a job on it)."""

    def __init__(self, st: SimState, changed: Callable[[], None]) -> None:
        self.st = st
        self.changed = changed
        warm = st.cloud.warm
        # the pool whose released instances are stopped (on-demand: spot's are terminated);
        # none where the daemon runs: its own warm pool stops and starts them (engine.py)
        self.warm_pool = None if warm is None or st.daemon_config is not None else (
            st.main.name if st.spot is None else st.fallback.name if st.fallback else None)
        self.stopped = 0  # its stopped instances now
        self.stopped_at = 0.0  # since the count last changed
        self.rng = random.Random(warm.seed if warm is not None else 0)

    def up_many(self, nodes: Sequence[Node], now: float, paid: int | None = None,
                launch: int = 0) -> None:
        """One launch's nodes: from the warm pool, all or none, where it holds enough."""
        boot_s = self._warm_start(nodes, now, paid)
        for n in nodes:
            self.up(n, now, paid, launch, boot_s)

    def _warm_start(self, nodes: Sequence[Node], now: float, paid: int | None) -> float:
        """The launch's boot time: warm when the pool has a stopped instance for each node
        and EC2 starts them all; else the cloud's cold boot."""
        st, warm = self.st, self.st.cloud.warm
        if (warm is None or paid is not None or not nodes or len(nodes) > self.stopped
                or nodes[0].pool != self.warm_pool):
            return st.cloud.boot_s
        if warm.start_failure and any(self.rng.random() < warm.start_failure for _ in nodes):
            st.result.warm_refused += 1  # (the started ones go back stopped)
            return st.cloud.boot_s
        self._stopped(now, -len(nodes))
        st.result.warm_starts += len(nodes)
        return warm.boot_s

    def settle(self, now: float) -> None:
        """The end of the run: the stopped instances' time counted to `now`."""
        self._stopped(now, 0)

    def _stopped(self, now: float, change: int) -> None:
        self.st.result.stopped_node_s += self.stopped * (now - self.stopped_at)
        self.stopped, self.stopped_at = self.stopped + change, now

    def up(self, n: Node, now: float, paid: int | None = None, launch: int = 0,
           boot_s: float | None = None) -> None:
        """`n` boots for the cloud's delay (`paid`: in that paid capacity; `launch`: with
        the nodes of that launch; `boot_s`: a warm start's), Slurm's resume hook telling
        the daemon."""
        st = self.st
        n.launch = launch or st.new_launch()
        boot = st.cloud.boot_s if boot_s is None else boot_s
        n.state, n.ready_at, n.free, n.on_since = "booting", now + boot, n.gpus, now
        st.touched.add(n.name)
        st.live_count[n.pool] += 1
        n.idle_since = None
        n.paid = paid
        n.spot = st.spot is not None and n.pool == st.main.name and paid is None
        if st.routes_paid and (n.pool == st.main.name
                               or (st.block is not None and n.pool == st.block.name)):
            st.unrouted.append(n)
        st.result.node_launches += 1
        if st.last_launch_batch != now:
            st.result.scale_up_actions += 1
            st.last_launch_batch = now
        st.push(n.ready_at, READY, st.node_index[n.name])

    def down(self, n: Node, now: float) -> None:
        st = self.st
        broken = n.failed_at is not None  # (its instance is replaced, never kept stopped)
        if n.failed_at is not None:  # the instance goes, and its hardware fault with it
            self.recovered(n, now)
        st.result.node_on_s += now - n.on_since
        if n.spot:
            st.result.spot_node_s += now - n.on_since
        if n.paid is not None:
            st.result.paid_node_s += now - n.on_since
        warm = st.cloud.warm
        if (warm is not None and n.pool == self.warm_pool and n.paid is None and not broken
                and self.stopped < warm.size):
            self._stopped(now, +1)  # stopped, not terminated
        n.state, n.idle_since, n.jobs, n.free, n.paid = "down", None, 0, 0, None
        st.touched.add(n.name)
        st.live_count[n.pool] -= 1
        if st.daemon is not None:  # Slurm's suspend hook: the daemon terminates it
            st.daemon.suspend([n.name], now)

    def recovered(self, n: Node, now: float) -> None:
        """A failed node's fault is over: replaced (powered down) or repaired by an admin."""
        assert n.failed_at is not None
        self.st.result.capacity_lost_gpu_s += n.gpus * (now - n.failed_at)
        n.failed_at = None
        if n.drain == NOT_RESPONDING:
            n.drain = ""
        if n.state == "up" and n.jobs == 0:
            n.idle_since = now
        self.st.touched.add(n.name)
        self.changed()
