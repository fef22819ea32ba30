"""The policies that are not slurmscale (`static`, `naive`, `immediate` and the like): their
plans are made from a snapshot of the simulated cluster and carried out as the tool each
models would, through the simulated Slurm (slurmscale's own run the daemon's loop instead,
`sim/daemon.py`)."""

from __future__ import annotations

from collections import deque

from slurmscale.policy.model import ActionKind, NodeState, NodeView, Plan, Snapshot
from slurmscale.sim.scheduler import SimSlurmctld
from slurmscale.sim.state import SimState
from slurmscale.sim.trace import TraceJob


class OtherPolicies:
    """One of the other policies (the state's `policy`, whose `decide` it calls) on the
    simulated Slurm `slurm`."""

    def __init__(self, st: SimState, slurm: SimSlurmctld) -> None:
        self.st = st
        self.slurm = slurm
        # the arrivals the reuse forecast reads (slurmscale's daemon keeps its own log)
        self.arrivals: deque[tuple[float, str, int]] = deque()
        self.down_views = [NodeView(n.name, n.pool, NodeState.POWERED_DOWN)
                           for n in st.nodes]

    def arrived(self, now: float, job: TraceJob) -> None:
        if not job.carry_in:
            self.arrivals.append((now, self.st.main.name, job.nodes))

    def step(self, now: float) -> None:
        """The policy's tick: its plan, made and carried out."""
        decide = self.st.policy.decide
        assert decide is not None
        self._apply(decide(self._snapshot(now)), now)

    def _snapshot(self, now: float) -> Snapshot:
        st = self.st
        views = []
        for n, down in zip(st.nodes, self.down_views, strict=True):
            if n.state == "down":
                views.append(down)  # most nodes, most of the time: one shared view each
                continue
            if n.resv is not None and not n.jobs:
                state = NodeState.RESERVED
            elif n.jobs:
                state = NodeState.ALLOCATED
            elif n.state == "booting":
                state = NodeState.BOOTING
            else:
                state = NodeState.IDLE
            views.append(NodeView(n.name, n.pool, state, n.idle_since,
                                  alloc_gpus=n.gpus - n.free,
                                  free_at=n.free_at if n.jobs else None,
                                  paid=n.paid is not None))
        jobs = tuple(self.slurm.pending_views.values())
        while self.arrivals and self.arrivals[0][0] < now - st.main.reuse_window_s:
            self.arrivals.popleft()
        return Snapshot(now, tuple(st.pools), tuple(views), jobs, dict(st.memory),
                        tuple(self.arrivals))

    def _apply(self, plan: Plan, now: float) -> None:
        """The plan, carried out as the tool each policy models would."""
        st, slurm = self.st, self.slurm
        for k in st.pools:
            st.memory[k.name] = plan.memory.get(k.name, st.memory[k.name])
        for a in plan.actions:
            if a.kind is ActionKind.RELEASE:
                slurm.release_nodes(list(a.nodes), now)
            elif a.kind is ActionKind.WARM:
                slurm.warm_nodes(list(a.nodes), now)
        if st.policy.provision_to_target:
            k = st.main
            launch = st.new_launch()
            for n in st.nodes_of[k.name]:
                if st.live_count[k.name] >= min(st.memory[k.name].target, k.max_nodes):
                    break
                if n.state == "down":
                    slurm.power.up(n, now, launch=launch)
