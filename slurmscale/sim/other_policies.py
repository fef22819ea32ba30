"""The policies that are not slurmscale (`static`, `naive`, `immediate` and the like): their
plans are made from a snapshot of the simulated cluster and carried out as the tool each
models would (slurmscale's own run the daemon's loop instead, `sim/daemon.py`)."""

from __future__ import annotations

from slurmscale.policy.model import ActionKind, NodeState, NodeView, Plan, Snapshot
from slurmscale.sim.disruptions import Disruptions


class OtherPolicies(Disruptions):
    def _snapshot(self, now: float) -> Snapshot:
        views = []
        for n, down in zip(self.nodes, self.down_views, strict=True):
            if n.state == "down":
                views.append(down)  # most nodes, most of the time: one shared view each
                continue
            if n.resv is not None and not n.jobs:
                st = NodeState.RESERVED
            elif n.jobs:
                st = NodeState.ALLOCATED
            elif n.state == "booting":
                st = NodeState.BOOTING
            else:
                st = NodeState.IDLE
            views.append(NodeView(n.name, n.pool, st, n.idle_since, alloc_gpus=n.gpus - n.free,
                                  free_at=n.free_at if n.jobs else None,
                                  paid=n.paid is not None))
        jobs = tuple(self.pending_views.values())
        while self.arrivals and self.arrivals[0][0] < now - self.main.reuse_window_s:
            self.arrivals.popleft()
        return Snapshot(now, tuple(self.pools), tuple(views), jobs, dict(self.memory),
                        tuple(self.arrivals))

    def _apply(self, plan: Plan, now: float) -> None:
        """The other policies' plans, carried out as the tool each models would."""
        for k in self.pools:
            self.memory[k.name] = plan.memory.get(k.name, self.memory[k.name])
        for a in plan.actions:
            if a.kind is ActionKind.RELEASE:
                self.release_nodes(list(a.nodes), now)
            elif a.kind is ActionKind.WARM:
                self.warm_nodes(list(a.nodes), now)
        if self.policy.provision_to_target:
            k = self.main
            launch = self.new_launch()
            for n in self.nodes_of[k.name]:
                if self._live(k.name) >= min(self.memory[k.name].target, k.max_nodes):
                    break
                if n.state == "down":
                    self._power_up(n, now, launch=launch)
