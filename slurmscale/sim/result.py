"""What one simulated run measured (`sim/report.py` turns it into the table and JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SimResult:
    policy: str
    jobs: int = 0
    jobs_completed: int = 0
    waits: list[float] = field(default_factory=list)
    gang_waits: list[float] = field(default_factory=list)
    busy_gpu_s: float = 0.0
    on_gpu_s: float = 0.0
    node_on_s: float = 0.0
    scale_up_actions: int = 0
    scale_down_actions: int = 0
    node_launches: int = 0
    reservations_created: int = 0
    reservation_idle_gpu_s: float = 0.0
    spot_node_s: float = 0.0
    preemptions: int = 0  # spot nodes interrupted
    reclaims: int = 0  # reserved nodes an interruptible reservation's owner took back
    requeues: int = 0  # jobs requeued because their node was interrupted
    jobs_failed: int = 0  # preempted jobs that never ran to the end
    lost_gpu_s: float = 0.0  # GPU time of runs cut short (redone from their last save)
    saved_gpu_s: float = 0.0  # GPU time of runs cut short that their saves kept
    restart_waits: list[float] = field(default_factory=list)  # requeue -> restart
    end_s: float = 0.0
    timeline: list[tuple[float, int, int]] = field(default_factory=list)  # t, demand, live GPUs
    paid_node_s: float = 0.0  # node time spent in paid capacity (reservation or block)
    paid_busy_gpu_s: float = 0.0  # GPU time of jobs on paid capacity
    gpus_per_node: int = 8
    paid_available_node_s: float = 0.0  # node time paid for (the reservation, the blocks)
    jobs_killed_at_block_end: int = 0
    gang_starts: list[tuple[float, str]] = field(default_factory=list)  # (last) start, job id
    # each gang start: how many launches its nodes came from (1: all from one fleet in one
    # cluster placement group; more: kept nodes of other launches, maybe other spines)
    gang_spread: list[int] = field(default_factory=list)
    node_failures: int = 0  # nodes whose hardware failed under them
    warm_starts: int = 0  # nodes started from the warm pool (stopped instances)
    warm_refused: int = 0  # launches whose warm start EC2 refused: booted cold, whole
    stopped_node_s: float = 0.0  # node time instances spent stopped in the warm pool
    capacity_lost_gpu_s: float = 0.0  # GPU time of failed nodes until replaced or repaired
    # the oracle's: the node-seconds a clairvoyant release rule keeps nodes up (sim/oracle.py)
    offline_node_s: float | None = None
    # the daemon's hold rule: the pool's limit_use at the end, the jobs it rests on, and when
    # it was first learned from the jobs that ended (None: never; fixed by the config)
    limit_use: float | None = None
    limit_use_jobs: int = 0
    limit_use_learned_s: float | None = None

