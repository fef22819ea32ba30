"""The daemon inside the simulator: its own capacity passes on the simulated Slurm.

A slurmscale policy in `simulate` is not a model of the daemon: `DaemonDriver` builds the
config the daemon would be given for the simulated pools, and every policy tick runs what the
daemon's reconcile pass runs for capacity — the capacity backoff's upkeep (pools held out after
an insufficient-capacity error or a reclaim), then `CapacityPass` (reservations for starving
gangs, pool sizes, scale-down, spot fallback rewrites) — against `SimSlurm` and a
`MemoryStore`. Interruptions reach it as the daemon's interruption pass reports them: a
reclaim to the backoff, each requeued job a preemption. What the daemon does through EC2
(launching the nodes Slurm powers up, terminating released ones) is the engine's cloud: a boot
delay, a cap, a price.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime

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
from slurmscale.daemon.interruptions import steer
from slurmscale.policy.model import PoolKnobs
from slurmscale.policy.reservations import ReservationKnobs
from slurmscale.sim.slurm_adapter import EPOCH, SimModel, SimSlurm
from slurmscale.store.memory import MemoryStore
from slurmscale.store.tables import PreemptionRow

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
        self.events: dict[str, int] = {}
        self.capacity = CapacityPass(cfg, self.store, self.slurm, self._event)
        self.backoff = CapacityBackoff(cfg, self.store, self.slurm, self._event)

    def _event(self, kind: str, message: str, **_: object) -> None:
        self.events[kind] = self.events.get(kind, 0) + 1

    def step(self, now: float, paid: frozenset[str]) -> None:
        """One reconcile pass's capacity part at trace time `now`."""
        self.slurm.begin_pass(now)
        self.store.paid = paid
        clock = at(now)
        self.backoff.upkeep(self.slurm.nodes(), clock)
        self.capacity.run(clock)

    def reclaimed(self, pool: str, now: float) -> None:
        """AWS took a spot node back (the interruption pass tells the backoff)."""
        self.backoff.reclaimed(pool, at(now))

    def preempted(self, job_id: str, node: str, pool: str, now: float) -> None:
        """The interruption pass requeued `job_id` off `node`: the preemption is recorded and
        the job moved to on-demand only once it has lost `max_preemptions` runs."""
        self.slurm.begin_pass(now)
        self.store.add_preemption(PreemptionRow(
            at=at(now), job_id=job_id, node=node, instance_id="i-sim", pool=pool,
            instance_type="p5.48xlarge", lifecycle="spot",
            kind="EC2 Spot Instance Interruption Warning"))
        steer(self.cfg, self.store, self.slurm, self._event, job_id, pool, node)

    def reservation_end(self, name: str) -> float | None:
        return self.slurm.end_of(name)

    @property
    def holding(self) -> bool:
        return bool(self.slurm.res)
