"""The simulated world as the parts of a simulation share it: its settings, the pools and
their nodes (the `Node` records Slurm and the cloud both change), the event agenda, the
policy's memory and the figures being measured. Each part owns the rest of its own state:
the simulated Slurm its queue (`scheduler.py`), EC2 and the hardware their random draws
(`disruptions.py`); `engine.py` builds them on one `SimState` and runs the events."""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from dataclasses import replace

from slurmscale.config import Config, GraceSignal, SpotSettings
from slurmscale.daemon.queue.knobs import knobs
from slurmscale.policy.model import BufferRule, Mode, NodeState, NodeView, PoolKnobs, PoolMemory
from slurmscale.sim.daemon import BLOCK_PREFIX, MAIN_PREFIX, OD_PREFIX, DaemonDriver, sim_config
from slurmscale.sim.policies import SimPolicy
from slurmscale.sim.result import SimResult
from slurmscale.sim.world import PERIODIC, FailureModel, Node, PaidCapacity, SimCloud, SpotModel


class SimState:
    """Built from the settings; `daemon` is set by the engine once the simulated Slurm the
    daemon reads exists (slurmscale's policies; None for the others)."""

    def __init__(self, policy: SimPolicy, cloud: SimCloud, spot: SpotModel | None = None,
                 paid: PaidCapacity | None = None, failures: FailureModel | None = None
                 ) -> None:
        self.policy = policy
        self.cloud = cloud
        self.spot = spot
        self.failures = failures
        self.paid = paid or PaidCapacity()
        # slurmscale's daemon routes launches into paid capacity itself (the ODCR, the
        # blocks); the nodes powered up since, whose instance it has not been asked where it
        # went (`Simulation._routed`). The other policies: the engine's model (`paid.py`)
        self.routes_paid = policy.decide is None and paid is not None
        self.engine_blocks = bool(self.paid.blocks) and not self.routes_paid
        self.unrouted: list[Node] = []
        self.daemon: DaemonDriver | None = None
        self._pools(policy, spot, paid is not None)
        self._bookkeeping()

    def _pools(self, policy: SimPolicy, spot: SpotModel | None, paid: bool) -> None:
        """The main pool and, with spot, its on-demand fallback, their nodes, and for
        slurmscale's policies the config the daemon will be given for them."""
        self.main = policy.knobs
        if paid:  # idle paid nodes: kept, as the daemon's knob says
            self.main = replace(self.main, release_paid_idle=False)
        self.pools: list[PoolKnobs] = [self.main]
        self.fallback: PoolKnobs | None = None
        self.nodes = [Node(f"{MAIN_PREFIX}{i + 1}", self.main.gpus_per_node, pool=self.main.name,
                            spot=spot is not None) for i in range(self.main.max_nodes)]
        if spot is not None and spot.on_demand_nodes:
            rule = ((BufferRule(self.main.name, spot.buffer, spot.warm_nodes),)
                    if spot.buffer or spot.warm_nodes else ())
            # The fallback runs in immediate mode: Slurm powers up its nodes per job.
            self.fallback = replace(self.main, name=f"{self.main.name}-od",
                                    max_nodes=spot.on_demand_nodes, min_nodes=0,
                                    mode=Mode.IMMEDIATE, buffer=rule)
            self.pools.append(self.fallback)
            self.nodes += [Node(f"{OD_PREFIX}{i + 1}", self.main.gpus_per_node,
                                pool=self.fallback.name) for i in range(spot.on_demand_nodes)]
        # slurmscale's policies: the daemon's own passes on the simulated Slurm, with the
        # config the daemon would be given (its pools' knobs are the ones simulated)
        self.daemon_config: Config | None = None
        self.block: PoolKnobs | None = None  # the daemon's capacity-block pool
        if policy.decide is None:
            if self.paid.blocks:
                self._block_pool()
            cfg = sim_config(self.main, policy.holds, self.fallback, SpotSettings(
                on_demand_buffer=spot.buffer, warm_on_demand_nodes=spot.warm_nodes,
                max_preemptions=spot.max_preemptions) if spot and self.fallback else None,
                spot.reclaim_backoff_s if spot else 180.0, self.paid if paid else None,
                GraceSignal(margin_s=spot.grace_margin_s)
                if spot and self.fallback and spot.grace_margin_s is not None else None,
                self.block, self.cloud.warm.size if self.cloud.warm is not None else 0)
            by_name = {k.name: k for k in knobs(cfg)}
            self.main = by_name[self.main.name]
            self.fallback = by_name[self.fallback.name] if self.fallback is not None else None
            self.block = by_name[self.block.name] if self.block is not None else None
            # in Slurm's PriorityTier order (slurm-conf renders the block partition 3, spot
            # 2, on-demand 1): a job of several partitions starts on the block when it can
            self.pools = [k for k in (self.block, self.main, self.fallback) if k is not None]
            self.daemon_config = cfg

    def _block_pool(self) -> None:
        """The capacity-block pool beside the main one (as many nodes as the blocks have at
        once, at most), its nodes started only when Slurm powers one up for a job (immediate
        mode), its idle nodes kept (paid whether used or not)."""
        starts = [b.start_s for b in self.paid.blocks]
        peak = max(sum(b.nodes for b in self.paid.blocks if b.start_s <= t < b.end_s)
                   for t in starts)
        self.block = replace(self.main, name=f"{self.main.name}-block", max_nodes=peak,
                             min_nodes=0, mode=Mode.IMMEDIATE, buffer=(),
                             release_paid_idle=False)
        self.nodes += [Node(f"{BLOCK_PREFIX}{i + 1}", self.main.gpus_per_node,
                            pool=self.block.name) for i in range(peak)]

    def _bookkeeping(self) -> None:
        """What every part keeps of the nodes, the clocks and the figures."""
        # every job is submitted to both partitions (-p spot,on-demand)
        self.also: tuple[str, ...] = (self.fallback.name,) if self.fallback is not None else ()
        self.nodes_of = {k.name: [n for n in self.nodes if n.pool == k.name] for k in self.pools}
        self.by_name = {n.name: n for n in self.nodes}
        self.touched: set[str] = set()  # nodes changed since the simulated Slurm last read them
        self.live_count = {k.name: 0 for k in self.pools}  # nodes not powered down, per pool
        self.cluster_nodes = len(self.nodes)  # what Slurm's job size factor divides by
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        self.down_views = [NodeView(n.name, n.pool, NodeState.POWERED_DOWN)
                           for n in self.nodes]
        self.future_events = 0  # queued events other than the policy tick
        self.last_event_at = 0.0
        self.agenda: list[tuple[float, int, int, int]] = []
        self.seq = itertools.count()
        self.memory = {k.name: PoolMemory(k.max_nodes if k.mode is Mode.IMMEDIATE
                                          else k.min_nodes) for k in self.pools}
        self.arrivals: deque[tuple[float, str, int]] = deque()
        self.result = SimResult(self.policy.name)
        self.node_runs: dict[str, list[tuple[float, float]]] = {}  # (the oracle's)
        self.last_launch_batch: float | None = None
        self.launches = 0  # launches so far (Node.launch)
        self.spot_down_until = -math.inf  # spot launches fail until then (a storm's outage)

    def push(self, t: float, kind: int, idx: int) -> None:
        """An event on the agenda (`world.py`'s kinds; `idx` says which job, node or block)."""
        if kind not in PERIODIC:
            self.future_events += 1
        heapq.heappush(self.agenda, (t, kind, next(self.seq), idx))

    def new_launch(self) -> int:
        """An id for the nodes about to be powered up together (one launch)."""
        self.launches += 1
        return self.launches
