"""The daemon inside the simulator: its own passes on the simulated Slurm and EC2.

A slurmscale policy in `simulate` is not a model of the daemon: `DaemonDriver` builds the
config the daemon would be given for the simulated pools and runs the daemon's passes against
`SimSlurm`, `SimEc2`, `SimQueue` and a `MemoryStore`:
- every policy tick, what the reconcile pass runs for capacity: nodes back from an
  interruption undrained, the capacity backoff's upkeep, then `CapacityPass` (reservations for
  starving gangs, pool sizes, scale-down, the on-demand buffer);
- what Slurm's hooks ask, at the end of the event that made Slurm ask (a hook wakes the daemon
  at once): `RequestPass` plans the resume requests into gangs and `GangLauncher` launches
  each all or nothing on `SimEc2` (a spot outage is EC2's capacity error: rolled back, nodes
  powered down, job requeued, pool in backoff); a suspend terminates the node's instances;
- a spot interruption: AWS's warning on the queue, acted on by `InterruptionPass`;
- with node failures modelled, `HealthPass` every tick: a node Slurm has DOWN and not
  responding is replaced after `health.grace_s` (EC2's status is not read: the simulated
  failure is the hardware under slurmd, which Slurm sees first).
What stays the engine's: Slurm's scheduling, when a node is ready (the boot delay), when
interruptions come, and which nodes run in paid capacity.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict
from datetime import UTC, datetime

from slurmscale.config import (
    CapacityReservations,
    CapacitySettings,
    CapacityType,
    Config,
    DaemonSettings,
    HealthSettings,
    LaunchTemplate,
    Pool,
    PoolPolicy,
    PowerSaving,
    ReservationPreference,
    ReservationSettings,
    SpotSettings,
)
from slurmscale.daemon.addresses import NodeAddresses
from slurmscale.daemon.backoff import CapacityBackoff
from slurmscale.daemon.capacity import CapacityPass
from slurmscale.daemon.context import PassContext, TickResult
from slurmscale.daemon.fleets import GangFleets, ReservedCapacity
from slurmscale.daemon.health import HealthPass
from slurmscale.daemon.interruptions import InterruptionPass
from slurmscale.daemon.launch import GangLauncher, client_token
from slurmscale.daemon.requests import RequestPass
from slurmscale.daemon.retry import EndpointRetry
from slurmscale.hostlists import compress
from slurmscale.model import CapacityReservation
from slurmscale.policy.model import PoolKnobs
from slurmscale.policy.reservations import ReservationKnobs
from slurmscale.sim.ec2_adapter import SPOT, SimEc2, SimQueue
from slurmscale.sim.slurm_adapter import EPOCH, SimModel, SimSlurm
from slurmscale.spool import RequestKind, SpooledRequest
from slurmscale.store.memory import MemoryStore

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
    if paid:  # an idle node in paid capacity is kept (capacity_reservations.release_idle);
        # which nodes are in paid capacity is the engine's model (preference none: the
        # simulated EC2 reports the reservation but does not launch into it)
        extra["capacity_reservations"] = CapacityReservations(
            ids=["cr-0000000000000000"], launch_template_version="2", release_idle=False,
            preference=ReservationPreference.NONE)
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
        # a request is carried out when Slurm makes it (no batching window to wait out)
        daemon=DaemonSettings(batch_window_seconds=0),
        # failures are Slurm's to see (DOWN, not responding): no EC2 status reads
        health=HealthSettings(status_interval_s=0),
        store_url="sqlite://", log_file=None)


def at(t: float) -> datetime:
    """A trace time as the daemon's clock."""
    return datetime.fromtimestamp(t + EPOCH, UTC)


class DaemonDriver:
    """`reserved_nodes`: the size of the pool's capacity reservation, as EC2 reports it."""

    def __init__(self, sim: SimModel, cfg: Config, reserved_nodes: int = 0,
                 health: bool = False) -> None:
        self.cfg = cfg
        self.store = MemoryStore()
        self.slurm = SimSlurm(sim)
        self.now = 0.0
        self.ec2 = SimEc2(clock=lambda: at(self.now))
        for p in cfg.pools:
            for rid in p.capacity_reservations.ids if p.capacity_reservations else ():
                self.ec2.reservations[rid] = CapacityReservation(
                    rid, p.instance_types[0], "us-east-1a", reserved_nodes, reserved_nodes,
                    "active")
        self.queue = SimQueue()
        self.events: dict[str, int] = {}
        self.capacity = CapacityPass(cfg, self.store, self.slurm, self._event)
        self.backoff = CapacityBackoff(cfg, self.store, self.slurm, self._event)
        self.interruptions = InterruptionPass(cfg, self.store, self.slurm, self.queue,
                                              self._event, self.backoff)
        ctx = PassContext(cfg, self.store, self.slurm, self.ec2, lambda: at(self.now),
                          self._event)
        addresses = NodeAddresses(ctx)
        retry = EndpointRetry(base_s=max(2.0, cfg.daemon.tick_seconds))
        launcher = GangLauncher(ctx, addresses, self.backoff,
                                ReservedCapacity(cfg, self.ec2, self._event, lambda *_: None),
                                GangFleets(cfg, self.ec2, client_token), retry)
        self.requests = RequestPass(ctx, launcher, addresses, retry)
        # (only where failures are modelled: nothing else makes a node unhealthy here)
        self.health = HealthPass(ctx, self.interruptions) if health else None
        self._asked: list[SpooledRequest] = []  # the hooks' requests not yet carried out
        self._ids = itertools.count(1)

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
        if self.health is not None:
            # (the nodes as read before it: a node it powers down returns on the next pass,
            # once the suspend hook's request has terminated its instance, as in the daemon)
            self.health.run(nodes, None)
        self.interruptions.return_powered_down_nodes(nodes)
        self.backoff.upkeep(nodes, clock)
        self.capacity.run(clock)

    # --- Slurm's hooks -------------------------------------------------------------------
    def resume(self, nodes: list[str], job: int | None, partition: str, now: float) -> None:
        """Slurm runs ResumeProgram for `nodes`, for job `job` (Slurm's numeric id) or for no
        job (nodes powered up by `scontrol`): the request the hook spools, with the
        SLURM_RESUME_FILE Slurm writes (23.02+ keys)."""
        hl = compress(nodes)
        rf = json.dumps({"all_nodes_resume": hl, "jobs": [] if job is None else [
            {"job_id": job, "nodes_alloc": hl, "nodes_resume": hl, "partition": partition}]})
        self._ask(RequestKind.RESUME, nodes, rf, now)

    def suspend(self, nodes: list[str], now: float) -> None:
        """Slurm runs SuspendProgram for `nodes` (powered down)."""
        self._ask(RequestKind.SUSPEND, nodes, None, now)

    def _ask(self, kind: RequestKind, nodes: list[str], rf: str | None, now: float) -> None:
        self._asked.append(SpooledRequest(f"sim-{next(self._ids)}", kind, tuple(nodes),
                                          compress(nodes), rf, now + EPOCH))

    def carry_out(self, now: float) -> None:
        """The daemon's request pass on what the hooks spooled during this event (a hook
        wakes the daemon at once): gangs planned from the resume files, launched all or
        nothing by the daemon's launcher on the simulated EC2 (a gang that falls short rolled
        back, its nodes powered down, its job requeued), released nodes' instances
        terminated. What that powers down in turn is carried out too."""
        while self._asked:
            asked, self._asked = self._asked, []
            for r in asked:
                self.store.add_request(r)
            self._begin(now)
            self.requests.handle_requests(TickResult())

    def spot_outage(self, out: bool) -> None:
        """EC2 has no spot capacity (`out`) or has it again."""
        self.ec2.limit[SPOT] = 0 if out else None

    def interrupted(self, nodes: list[str], now: float, reclaim: bool = False) -> None:
        """AWS reclaims these spot nodes' instances (`reclaim`: an interruptible reservation's
        owner takes reserved ones back): each warning goes on the event queue and the daemon's
        interruption pass handles what is queued."""
        self._begin(now)
        for node in nodes:
            (inst,) = self.store.active_instances([node])
            self.queue.put(self.ec2.reclaim(inst.instance_id, reservation=reclaim))
        for _ in range(len(nodes) // 10 + 1):  # (the pass reads up to ten at a time)
            self.interruptions.run(at(now))

    def reservation_end(self, name: str) -> float | None:
        return self.slurm.end_of(name)

    @property
    def holding(self) -> bool:
        return bool(self.slurm.res)
