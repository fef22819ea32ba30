"""The simulated world's settings (what `simulate`'s options build, once) and its nodes: the
cloud (boot delay, prices, the policy's tick), spot and its interruptions, node failures, paid
capacity (an On-Demand Capacity Reservation and Capacity Blocks)."""

from __future__ import annotations

from dataclasses import dataclass

# same-time order: arrivals first, policy last
SUBMIT, ELIGIBLE, READY, END, BLOCK, SCHED, BACKFILL, TICK = 0, 1, 2, 3, 4, 5, 6, 7
PERIODIC = (SCHED, BACKFILL, TICK)  # Slurm's and the daemon's own wake-ups, not the trace's
ODCR = -1  # a node's `paid` when it runs in the On-Demand Capacity Reservation
NOT_RESPONDING = "Not responding"  # what Slurm says of a node whose hardware failed


@dataclass
class Node:
    name: str
    gpus: int
    state: str = "down"  # down | booting | up
    ready_at: float = 0.0
    free: int = 0
    jobs: int = 0
    idle_since: float | None = None
    on_since: float = 0.0
    resv: str | None = None  # held in this reservation: only its job may use it
    drain: str = ""  # drained (the reason): Slurm starts nothing on it
    free_at: float = 0.0  # latest end of its running jobs by their time limits
    pool: str = ""
    spot: bool = False
    paid: int | None = None  # ODCR or a block's index: in capacity paid used or not
    failed_at: float | None = None  # its hardware failed then (Slurm: DOWN, not responding)
    # the launch it came up in (nodes powered up together: one fleet, one cluster placement
    # group, which EC2 "packs close together" - user guide, "Placement strategies")
    launch: int = 0
    # Slurm reservations over a time window on it (start, end; no job in them: a Capacity
    # Block pool's closed windows): Slurm starts no job whose time limit would reach one
    windows: tuple[tuple[float, float], ...] = ()



@dataclass(frozen=True)
class WarmPool:
    """Stopped instances kept for a pool (issue 67): a released node's instance is stopped
    instead of terminated while fewer than `size` are; a launch starts stopped instances
    first, all its nodes or none (a gang whole), in `boot_s` instead of the cloud's cold
    boot. A stopped instance costs its volumes only (`stopped_price_per_node_hour`): EC2's
    API reference, StartInstances, "when an instance is stopped, the compute resources are
    released ... you are charged for Amazon EBS volume usage"; since its compute is released,
    a start may find none (StateReason's Server.InsufficientInstanceCapacity; `start_failure`,
    per instance): then the started ones go back stopped and the launch boots cold, whole."""

    size: int
    boot_s: float = 60.0
    # a 500 GiB gp3 root volume at $0.08 per GB-month (Amazon EBS pricing, us-east-1), 730 h
    stopped_price_per_node_hour: float = 0.055
    start_failure: float = 0.0
    seed: int = 0


@dataclass(frozen=True)
class SimCloud:
    boot_s: float = 300.0
    price_per_node_hour: float = 98.32
    tick_s: float = 60.0
    # With nothing running or arriving, stop when the policy has changed nothing this long.
    give_up_after_s: float = 7 * 86400.0
    spot_price_per_node_hour: float | None = None  # spot nodes (with a SpotModel)
    # the on-demand pool's stopped instances (the main pool's; with spot, its fallback's)
    warm: WarmPool | None = None



@dataclass(frozen=True)
class SpotModel:
    on_demand_nodes: int  # the fallback pool's max_nodes
    buffer: float = 0.0  # on-demand safety buffer: share of the GPUs in use
    warm_nodes: int = 0
    interruption_rate: float = 0.0  # per spot node-hour
    storm_at_s: float | None = None
    storm_fraction: float = 0.0  # share of the live spot nodes a storm takes
    storm_outage_s: float = 1800.0  # spot launches fail this long after a storm
    # after any interruption slurmscale puts the pool in capacity backoff this long
    # (capacity.unavailable_ttl_s): no spot launches, work goes to on-demand meanwhile
    reclaim_backoff_s: float = 180.0
    requeue_delay_s: float = 120.0  # Slurm: a requeued batch job is eligible again after this
    max_preemptions: int = 2
    seed: int = 0
    # the daemon's grace_signal on the spot pool: its jobs get the signal on the warning and
    # are requeued at EC2's deadline less this margin; EC2 ends the instance at its deadline
    # (two minutes on). None: no signal, requeued at once, the instance ended at once.
    grace_margin_s: float | None = None



@dataclass(frozen=True)
class FailureModel:
    """Hardware failing under running nodes: `rate` failures per node-hour up. A failed node
    kills its jobs (Slurm requeues them: node failure) and Slurm has it DOWN, not
    responding. slurmscale's health pass replaces it (powered down, a fresh instance next
    time); the other policies leave it down until an admin returns it after `admin_repair_s`
    (its instance kept meanwhile, as a drained node's is)."""

    rate: float
    admin_repair_s: float = 4 * 3600.0
    seed: int = 0



@dataclass(frozen=True)
class BlockSpec:
    start_s: float
    end_s: float
    nodes: int



@dataclass(frozen=True)
class PaidCapacity:
    """Capacity paid whether used or not, in the pool: `reserved_nodes` of an ODCR (used
    first, or with `use_reserved` False never launched into: preference none) and blocks."""

    reserved_nodes: int = 0
    use_reserved: bool = True
    blocks: tuple[BlockSpec, ...] = ()
    # The daemon's capacity_blocks.end_margin_s: no job may run past a block's end less this.
    block_margin_s: float = 0.0
    # EC2 begins terminating a block's instances this long before its end (AWS: 30 minutes;
    # 0: at its end); a job still on one dies (counted: jobs_killed_at_block_end)
    block_lead_s: float = 0.0
    # The reservation is interruptible: its owner reclaims a reserved node's instance at this
    # rate per reserved node-hour (its jobs requeued, as a spot interruption's)
    reclaim_rate: float = 0.0
    seed: int = 0
    # the daemon's capacity_reservations.max_reclaims: a job whose runs were taken back this
    # often launches on normal capacity, not into the interruptible reservation again
    max_reclaims: int = 2

    def close_s(self, b: BlockSpec) -> float:
        return b.end_s - self.block_margin_s

    def taken_back_s(self, b: BlockSpec) -> float:
        return b.end_s - self.block_lead_s

