"""The daemon inside the simulator: its own reconcile loop on the simulated Slurm and EC2.

A slurmscale policy in `simulate` is not a model of the daemon: `DaemonDriver` builds the
config the daemon would be given for the simulated pools and runs the daemon's own
`Reconciler` - every pass, in the daemon's order - against `SimSlurm`, `SimEc2`, `SimQueue`
and a `MemoryStore`. What reaches it is what reaches the daemon:
- its timer: a pass every policy tick;
- Slurm's hooks: a resume or suspend request, then a pass at once, at the end of the event
  that made Slurm ask (a hook pokes the daemon): the request pass plans the resume requests
  into gangs and launches each all or nothing on `SimEc2` (a spot outage is EC2's capacity
  error: rolled back, nodes powered down, job requeued, pool in backoff); a suspend
  terminates the node's instances;
- EC2's events: a spot interruption's warning on the queue, read by the next pass;
- a warm pool (`simulate --warm-pool`): the on-demand pool's `warm_pool`, the daemon's own
  stops and starts on `SimEc2` (a start refused at `--warm-start-failure`), the engine
  booting a started node in the warm start's time (`warm_booted`).
The passes the simulated world gives nothing to do (EC2's status checks, bootstrap failures,
leaks) run all the same and find nothing; with node failures modelled the health pass
replaces a node Slurm has DOWN and not responding after `health.grace_s` (EC2's status is
not read: the simulated failure is the hardware under slurmd, which Slurm sees first). Paid
capacity is the daemon's to route, as on EC2: its launch pass puts gangs into the ODCR
(preference use_first) and a capacity-block pool's gangs into the open block, its block
pass keeps the block pool's closed windows in Slurm and opens its partition, and the engine
reads where each node went from its instance (`launched_into`). What stays the engine's:
Slurm's scheduling, when a node is ready (the boot delay), when interruptions come, and
EC2 taking a block's instances back 30 minutes before its end.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from random import Random

from slurmscale.cloud.protocol import TAG_NODE
from slurmscale.config import (
    INTERRUPTION_NOTICE_S,
    CapacityBlockSettings,
    CapacityReservations,
    CapacitySettings,
    CapacityType,
    Config,
    DaemonSettings,
    GraceSignal,
    HealthSettings,
    LaunchTemplate,
    Pool,
    PoolPolicy,
    PowerSaving,
    ReservationPreference,
    ReservationSettings,
    SpotSettings,
    WarmPool,
)
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.hostlists import compress
from slurmscale.model import INTERRUPTIBLE, CapacityReservation
from slurmscale.policy.limit_use import LimitUse
from slurmscale.policy.model import PoolKnobs
from slurmscale.policy.reservations import ReservationKnobs
from slurmscale.sim.ec2_adapter import BLOCK, SPOT, SimEc2, SimQueue
from slurmscale.sim.model_view import EPOCH, SimModel
from slurmscale.sim.slurm_adapter import SimSlurm
from slurmscale.sim.world import PaidCapacity
from slurmscale.sim.world import WarmPool as SimWarmPool
from slurmscale.spool import RequestKind, SpooledRequest
from slurmscale.store.memory import MemoryStore

MAIN_PREFIX = "n-"  # the simulated pools' node names: n-1.., od-1.., cb-1..
OD_PREFIX = "od-"
BLOCK_PREFIX = "cb-"
RESERVATION_ID = "cr-0000000000000000"  # the simulated pool's ODCR


def block_id(i: int) -> str:
    """The reservation id of the simulated Capacity Block `i` (`PaidCapacity.blocks`)."""
    return f"cr-0b10c{i + 1:012x}"


def _pool(k: PoolKnobs, prefix: str, capacity: CapacityType, **extra: object) -> Pool:
    policy = PoolPolicy.of_knobs(k)
    return Pool(name=k.name, partition=k.name, node_prefix=prefix, max_nodes=k.max_nodes,
                min_nodes=k.min_nodes, gpus_per_node=k.gpus_per_node,
                instance_types=["p5.48xlarge"], capacity_type=capacity,
                launch_template=LaunchTemplate(name="sim", version="1"),
                subnets=["subnet-sim"], policy=policy, **extra)  # type: ignore[arg-type]


def sim_config(main: PoolKnobs, holds: ReservationKnobs | None, od: PoolKnobs | None = None,
               spot: SpotSettings | None = None, reclaim_backoff_s: float = 180.0,
               paid: PaidCapacity | None = None, grace: GraceSignal | None = None,
               block: PoolKnobs | None = None, warm: int = 0) -> Config:
    """The config the daemon runs with for the simulated pools: `main` (spot when `od` is
    its on-demand fallback), its knobs as the pool policy; `holds` None: no reservations;
    `paid`: the capacity paid whether used or not; `grace`: the spot pool's grace_signal;
    `block`: the capacity-block pool for `paid`'s blocks; `warm`: the on-demand pool's warm
    pool size (its `warm_pool`; 0: none)."""
    extra: dict[str, object] = {}
    if paid is not None:  # an idle node in paid capacity is kept (release_idle false).
        # The ODCR is used first by the daemon's own route (preference use_first); with
        # --reserved-preference none (or no reserved nodes) preference none: the simulated
        # EC2 reports the reservation, the daemon launches nothing into it
        extra["capacity_reservations"] = CapacityReservations(
            ids=[RESERVATION_ID], launch_template_version="2", release_idle=False,
            max_reclaims=paid.max_reclaims,
            preference=ReservationPreference.USE_FIRST
            if paid.use_reserved and paid.reserved_nodes else ReservationPreference.NONE)
    pools = []
    kept = {} if not warm else {"warm_pool": WarmPool(size=min(warm, (od or main).max_nodes))}
    if od is not None:
        pools.append(_pool(main, MAIN_PREFIX, CapacityType.SPOT, fallback_pool=od.name,
                           spot=spot or SpotSettings(), grace_signal=grace, **extra))
        pools.append(_pool(od, OD_PREFIX, CapacityType.ON_DEMAND, **kept))
    else:
        pools.append(_pool(main, MAIN_PREFIX, CapacityType.ON_DEMAND, **extra, **kept))
    blocks = CapacityBlockSettings()
    if block is not None and paid is not None:  # (its partition starts DOWN: SimSlurmctld)
        pools.append(_pool(block, BLOCK_PREFIX, CapacityType.CAPACITY_BLOCK,
                           capacity_reservations=CapacityReservations(ids=[
                               block_id(i) for i in range(len(paid.blocks))])))
        blocks = CapacityBlockSettings(termination_lead_s=paid.block_lead_s,
                                       end_margin_s=paid.block_margin_s)
    res = (ReservationSettings(**asdict(holds)) if holds is not None
           else ReservationSettings(enabled=False))
    longest = max([res.max_hold_s] + [p.policy.max_idle_s for p in pools])
    # no backoff (0) is a TTL over before the next pass (the config wants one above 0)
    ttl = max(reclaim_backoff_s, 0.001)
    return Config(
        cluster_name="sim", pools=pools, reservations=res, capacity_blocks=blocks,
        capacity=CapacitySettings(unavailable_ttl_s=ttl, max_unavailable_ttl_s=max(1800.0, ttl)),
        # slurmscale releases nodes itself; SuspendTime is only its backstop
        power_saving=PowerSaving(suspend_time=int(longest) + 3600),
        # a request is carried out when Slurm makes it (no batching window to wait out)
        daemon=DaemonSettings(batch_window_seconds=0),
        # failures are Slurm's to see (DOWN, not responding): no EC2 status reads
        health=HealthSettings(status_interval_s=0),
        store_url="sqlite://", log_file=None)


@functools.lru_cache(maxsize=4)
def at(t: float) -> datetime:
    """A trace time as the daemon's clock (the same few times asked again and again: every
    pass reads the clock a few dozen times at one trace time)."""
    return datetime.fromtimestamp(t + EPOCH, UTC)


class SimSpool:
    """Implements `RequestSource`: the requests the simulated hooks made, waiting for the
    daemon's next pass (named by their ids; nothing is written to disk)."""

    def __init__(self) -> None:
        self.waiting: dict[Path, SpooledRequest] = {}

    def put(self, req: SpooledRequest) -> None:
        self.waiting[Path(req.id)] = req

    def pending(self) -> Iterator[tuple[Path, SpooledRequest | str]]:
        yield from list(self.waiting.items())

    def done(self, path: Path) -> None:
        self.waiting.pop(path, None)

    def reject(self, path: Path) -> None:
        self.waiting.pop(path, None)


class DaemonDriver:
    """The daemon's `Reconciler` on the simulated adapters, and what reaches it from outside:
    Slurm's hooks (`resume`, `suspend`), EventBridge's messages (`interrupted`), a pass each
    policy tick (`step`). `paid`: the pool's capacity reservation, as EC2 reports it (an
    interruptible one with a reclaim rate)."""

    def __init__(self, sim: SimModel, cfg: Config, paid: PaidCapacity | None = None,
                 warm: SimWarmPool | None = None) -> None:
        """`warm`: the warm pool's start failures (EC2's refusals)."""
        self.cfg = cfg
        self.store = MemoryStore()
        self.slurm = SimSlurm(sim)
        self.now = 0.0
        self.ec2 = SimEc2(clock=lambda: at(self.now))
        if warm is not None:
            self.ec2.start_failure, self.ec2.rng = warm.start_failure, Random(warm.seed)
        if any(p.grace_signal is not None for p in cfg.pools):  # (the two minutes matter)
            self.ec2.notice_s = INTERRUPTION_NOTICE_S
        if paid is not None:
            itype = cfg.pools[0].instance_types[0]
            size = paid.reserved_nodes
            kind = INTERRUPTIBLE if paid.reclaim_rate > 0 else "default"
            self.ec2.reservations[RESERVATION_ID] = CapacityReservation(
                RESERVATION_ID, itype, "us-east-1a", size, size, "active", kind)
            for i, b in enumerate(paid.blocks):  # (their state follows their windows)
                self.ec2.reservations[block_id(i)] = CapacityReservation(
                    block_id(i), itype, "us-east-1a", b.nodes, b.nodes, "scheduled",
                    BLOCK, b.start_s + EPOCH, b.end_s + EPOCH)
        self.queue = SimQueue()
        self.spool = SimSpool()
        self.reconciler = Reconciler(cfg, self.store, self.slurm, self.ec2,
                                     lambda: at(self.now), self.queue, spool=self.spool)
        self._ids = itertools.count(1)

    def launched_into(self, nodes: list[str]) -> dict[str, str]:
        """The capacity reservation each of these nodes' running instance launched into (""
        for none); a node with no running instance is left out."""
        return {r.node: r.capacity_reservation_id or ""
                for r in self.store.active_instances(nodes)}

    def warm_booted(self) -> list[str]:
        """The nodes whose instance the daemon started from its warm pool since this was
        last asked (they boot in the warm start's time, not a launch's)."""
        return [self.ec2.instances[i].tags.get(TAG_NODE, "") for i in self.ec2.started()]

    @property
    def events(self) -> Counter[str]:
        """How many audit events of each kind the daemon wrote."""
        return self.store.event_counts

    def _tick(self, now: float) -> None:
        self.now = now
        self.ec2.expire()
        self.slurm.begin_pass(now)
        self.reconciler.tick()

    def step(self, now: float) -> None:
        """The daemon's timer pass at trace time `now`. EventBridge's messages queued since
        are read by it, ten a pass, and the passes that follow at once while messages are
        left (as the daemon's next pass comes sooner when there is work)."""
        self._tick(now)
        left = len(self.queue.messages)
        while left:
            self._tick(now)
            left, before = len(self.queue.messages), left
            if left >= before:
                break  # what is left comes back on a later pass (the queue keeps it)

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
        self.spool.put(SpooledRequest(f"sim-{next(self._ids)}", kind, tuple(nodes),
                                      compress(nodes), rf, now + EPOCH))

    def carry_out(self, now: float) -> None:
        """The hooks poke the daemon: a pass at once, whenever this event made Slurm ask
        (it takes the requests in, launches each gang all or nothing on the simulated EC2 -
        one that falls short rolled back, its nodes powered down, its job requeued - and
        terminates released nodes' instances). What that powers down in turn is carried
        out by the pass after."""
        while self.spool.waiting:
            self._tick(now)

    def spot_outage(self, out: bool) -> None:
        """EC2 has no spot capacity (`out`) or has it again."""
        self.ec2.limit[SPOT] = 0 if out else None

    def interrupted(self, nodes: list[str], reclaim: bool = False) -> None:
        """AWS reclaims these spot nodes' instances (`reclaim`: an interruptible reservation's
        owner takes reserved ones back): each warning goes on the event queue, which the
        daemon's next pass reads."""
        for node in nodes:
            (inst,) = self.store.active_instances([node])
            self.queue.put(self.ec2.reclaim(inst.instance_id, reservation=reclaim))

    def block_taken_back(self, i: int) -> None:
        """EC2 begins terminating Capacity Block `i`'s instances (30 minutes before its
        end)."""
        self.ec2.take_back(block_id(i))

    def limit_use(self, pool: str) -> LimitUse | None:
        """The hold rule's share of a time limit for `pool` as the daemon's last pass used it
        (None: holds off, or no pass has planned holds yet)."""
        if not self.cfg.reservations.enabled:
            return None
        return self.reconciler.capacity.limit_use.uses.get(pool)

    def reservation_end(self, name: str) -> float | None:
        return self.slurm.end_of(name)

    @property
    def holding(self) -> bool:
        """Does the daemon hold nodes for a gang (a window reservation is not a hold)?"""
        return any(not r.window for r in self.slurm.res.values())
