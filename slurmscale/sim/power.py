"""The simulated slurmctld's power saving over the shared state (`state.py`): ResumeProgram (a
node boots for the cloud's delay, into paid capacity or not, with the nodes of its launch),
SuspendProgram (its instance goes: its on-time counted, the daemon told), and the end of a
node's hardware fault. `scheduler.py`'s SimSlurmctld decides when; this part does it."""

from __future__ import annotations

from collections.abc import Callable

from slurmscale.sim.state import SimState
from slurmscale.sim.world import NOT_RESPONDING, READY, Node


class SimPower:
    """Power saving on the nodes of `st`; `changed` is told when a node comes back to
    service (backfill may start a job on it)."""

    def __init__(self, st: SimState, changed: Callable[[], None]) -> None:
        self.st = st
        self.changed = changed

    def up(self, n: Node, now: float, paid: int | None = None, launch: int = 0) -> None:
        """`n` boots for the cloud's delay (`paid`: in that paid capacity; `launch`: with
        the nodes of that launch), Slurm's resume hook telling the daemon."""
        st = self.st
        n.launch = launch or st.new_launch()
        n.state, n.ready_at, n.free, n.on_since = "booting", now + st.cloud.boot_s, n.gpus, now
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
        if n.failed_at is not None:  # the instance goes, and its hardware fault with it
            self.recovered(n, now)
        st.result.node_on_s += now - n.on_since
        if n.spot:
            st.result.spot_node_s += now - n.on_since
        if n.paid is not None:
            st.result.paid_node_s += now - n.on_since
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
