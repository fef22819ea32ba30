"""The daemon inside the simulator: its own capacity passes on the simulated Slurm.

A slurmscale policy in `simulate` is not a model of the daemon: `DaemonDriver` builds the
config the daemon would be given for the simulated pools, and every policy tick runs what the
daemon's reconcile pass runs for capacity — the capacity backoff's upkeep (pools held out after
an insufficient-capacity error or a reclaim), then `CapacityPass` (reservations for starving
gangs, pool sizes, scale-down, spot fallback rewrites) — against `SimSlurm` and a
`MemoryStore`. A spot interruption is AWS's warning on the event queue (`SimQueue`), about
the node's instance in the simulated EC2 (`SimEc2`): the daemon's `InterruptionPass` acts on
it — capacity backoff, drain, requeue, preemption records, a job that lost too many runs
moved to on-demand, power down — and undrains the node once it is down, as in production.
Each node Slurm powers up gets its instance from `SimEc2` and recorded as a launch records it;
each node powered down has it terminated, as the suspend hook does. What stays the engine's:
when a node is ready (the boot delay), and that a launch succeeds (the daemon's gang launcher,
its fleets and capacity errors are not run here; a spot outage is the engine's).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from datetime import UTC, datetime

from slurmscale.cloud.protocol import TAG_CLUSTER, TAG_GANG, TAG_NODE, TAG_POOL, FleetSpec
from slurmscale.config import (
    CapacityReservations,
    CapacitySettings,
    CapacityType,
    Config,
    LaunchTemplate,
    Pool,
    PoolPolicy,
    PowerSaving,
    ReservationSettings,
    SpotSettings,
)
from slurmscale.daemon.backoff import CapacityBackoff
from slurmscale.daemon.capacity import CapacityPass
from slurmscale.daemon.interruptions import InterruptionPass
from slurmscale.daemon.launch import client_token
from slurmscale.lifecycles import InstanceState
from slurmscale.policy.model import PoolKnobs
from slurmscale.policy.reservations import ReservationKnobs
from slurmscale.sim.ec2_adapter import SimEc2, SimQueue
from slurmscale.sim.slurm_adapter import EPOCH, SimModel, SimSlurm
from slurmscale.store.memory import MemoryStore
from slurmscale.store.tables import InstanceRow

MAIN_PREFIX = "n-"  # the simulated pools' node names: n-1.., od-1..
OD_PREFIX = "od-"
_POLICY_FIELDS = tuple(PoolPolicy.model_fields)


def _pool(k: PoolKnobs, prefix: str, capacity: CapacityType, **extra: object) -> Pool:
    policy = PoolPolicy(**{f: getattr(k, f) for f in _POLICY_FIELDS if f != "mode"},
                        mode=k.mode.value)
    return Pool(name=k.name, partition=k.name, node_prefix=prefix, max_nodes=k.max_nodes,
                min_nodes=k.min_nodes, gpus_per_node=k.gpus_per_node,
                instance_types=["p5.48xlarge"], capacity_type=capacity,
                launch_template=LaunchTemplate(name="sim", version="1"),
                subnets=["subnet-sim"], policy=policy, **extra)  # type: ignore[arg-type]


def sim_config(main: PoolKnobs, holds: ReservationKnobs | None, od: PoolKnobs | None = None,
               spot: SpotSettings | None = None, reclaim_backoff_s: float = 180.0,
               paid: bool = False) -> Config:
    """The config the daemon runs with for the simulated pools: `main` (spot when `od` is
    its on-demand fallback), its knobs as the pool policy; `holds` None: no reservations."""
    extra: dict[str, object] = {}
    if paid:  # an idle node in paid capacity is kept (capacity_reservations.release_idle)
        extra["capacity_reservations"] = CapacityReservations(
            ids=["cr-0000000000000000"], launch_template_version="2", release_idle=False)
    pools = []
    if od is not None:
        pools.append(_pool(main, MAIN_PREFIX, CapacityType.SPOT, fallback_pool=od.name,
                           spot=spot or SpotSettings(), **extra))
        pools.append(_pool(od, OD_PREFIX, CapacityType.ON_DEMAND))
    else:
        pools.append(_pool(main, MAIN_PREFIX, CapacityType.ON_DEMAND, **extra))
    res = (ReservationSettings(**asdict(holds)) if holds is not None
           else ReservationSettings(enabled=False))
    longest = max([res.max_hold_s] + [p.policy.max_idle_s for p in pools])
    # no backoff (0) is a TTL over before the next pass (the config wants one above 0)
    ttl = max(reclaim_backoff_s, 0.001)
    return Config(
        cluster_name="sim", pools=pools, reservations=res,
        capacity=CapacitySettings(unavailable_ttl_s=ttl, max_unavailable_ttl_s=max(1800.0, ttl)),
        # slurmscale releases nodes itself; SuspendTime is only its backstop
        power_saving=PowerSaving(suspend_time=int(longest) + 3600),
        store_url="sqlite://", log_file=None)


def at(t: float) -> datetime:
    """A trace time as the daemon's clock."""
    return datetime.fromtimestamp(t + EPOCH, UTC)


class DaemonDriver:
    def __init__(self, sim: SimModel, cfg: Config) -> None:
        self.cfg = cfg
        self.store = MemoryStore()
        self.slurm = SimSlurm(sim)
        self.now = 0.0
        self.ec2 = SimEc2(clock=lambda: at(self.now))
        self.queue = SimQueue()
        self.events: dict[str, int] = {}
        self.capacity = CapacityPass(cfg, self.store, self.slurm, self._event)
        self.backoff = CapacityBackoff(cfg, self.store, self.slurm, self._event)
        self.interruptions = InterruptionPass(cfg, self.store, self.slurm, self.queue,
                                              self._event, self.backoff)
        self.instance_of: dict[str, str] = {}  # node -> its live instance

    def _event(self, kind: str, message: str, **_: object) -> None:
        self.events[kind] = self.events.get(kind, 0) + 1

    def _begin(self, now: float) -> None:
        self.now = now
        self.slurm.begin_pass(now)

    def step(self, now: float, paid: frozenset[str]) -> None:
        """One reconcile pass's capacity part at trace time `now`."""
        self._begin(now)
        self.store.paid = paid
        clock = at(now)
        if self.queue.messages:  # one Slurm did not let it finish comes back (SQS)
            self.interruptions.run(clock)
        nodes = self.slurm.nodes()
        self.interruptions.return_powered_down_nodes(nodes)
        self.backoff.upkeep(nodes, clock)
        self.capacity.run(clock)

    def launched(self, node: str, pool: str, paid: bool, now: float) -> None:
        """Slurm powered `node` up: its instance (on-demand in paid capacity), recorded as
        the daemon's launch records one."""
        self.now = now
        p = self.cfg.pool(pool)
        spec = replace(FleetSpec.of(p), reserved=paid)
        gid = f"sim-{node}-{now:.0f}"
        (inst,) = self.ec2.launch(p, 1, 1, client_token(gid), {
            TAG_CLUSTER: self.cfg.cluster_name, TAG_POOL: pool, TAG_GANG: gid,
            TAG_NODE: node}, spec).instances
        self.store.add_instances([InstanceRow(
            instance_id=inst.instance_id, node=node, pool=pool, gang_id=gid,
            instance_type=inst.instance_type, lifecycle=inst.lifecycle,
            image_id=inst.image_id, launch_template_version=spec.launch_template_version,
            private_ip=inst.private_ip, state=InstanceState.RUNNING, launched_at=at(now))])
        self.instance_of[node] = inst.instance_id

    def released(self, node: str, now: float) -> None:
        """Slurm powered `node` down: the suspend hook has the daemon terminate its
        instance."""
        iid = self.instance_of.pop(node, None)
        if iid is not None:
            self.ec2.terminate([iid])
            self.store.mark_terminated([iid], at(now))

    def interrupted(self, nodes: list[str], now: float) -> None:
        """AWS reclaims these spot nodes' instances: each warning goes on the event queue and
        the daemon's interruption pass handles what is queued."""
        self._begin(now)
        for node in nodes:
            self.queue.put(self.ec2.reclaim(self.instance_of[node]))
        for _ in range(len(nodes) // 10 + 1):  # (the pass reads up to ten at a time)
            self.interruptions.run(at(now))

    def reservation_end(self, name: str) -> float | None:
        return self.slurm.end_of(name)

    @property
    def holding(self) -> bool:
        return bool(self.slurm.res)
