"""The policy's inputs and outputs: a snapshot of one moment in, a plan with reasons out.

Times are plain seconds (the daemon passes Unix time, the simulator its own clock); nothing
here reads a clock, so the same snapshot always gives the same plan.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple, Protocol


class Mode(StrEnum):
    IMMEDIATE = "immediate"  # Slurm powers nodes up per job; target pinned at max_nodes
    GOVERNED = "governed"  # a target between min and max; nodes above it are held out


class StepSizing(StrEnum):
    """How far a governed pool's target rises on queue pressure."""

    PENDING = "pending"  # what the pending jobs need, at most their GPU-hours over a cooldown
    FIXED = "fixed"  # `step_nodes`, whatever is pending


class NodeState(StrEnum):
    POWERED_DOWN = "powered_down"
    BOOTING = "booting"
    IDLE = "idle"
    ALLOCATED = "allocated"  # runs at least one job (or is booting for one)
    RESERVED = "reserved"  # held in a reservation for a pending job


class BufferRule(NamedTuple):
    """An on-demand pool keeps warm capacity for a spot pool: at least `fraction` of the GPUs
    in use in the spot pool (and in itself), and at least `warm_nodes` nodes, powered up."""

    spot_pool: str
    fraction: float
    warm_nodes: int = 0


@dataclass(frozen=True)
class PoolKnobs:
    """One pool's policy settings. Defaults are the worked example's (see docs/policy.md):
    the one copy of them, which the config's PoolPolicy takes."""

    name: str
    gpus_per_node: int
    max_nodes: int
    min_nodes: int = 0
    mode: Mode = Mode.IMMEDIATE
    step_nodes: int = 1  # the least step (`step_sizing: fixed`: the step)
    step_sizing: StepSizing = StepSizing.PENDING
    queue_gpu_hours: float = 16.0
    sustained_s: float = 300.0
    # a job waiting this long counts as queue pressure on its own
    max_wait_s: float = 900.0
    cooldown_s: float = 600.0
    max_scale_down_per_cycle: int = 4
    # released at the first pass idle with no pending job for it and no reuse forecast
    # (issue 33: nearest the clairvoyant bound on every shipped trace and cap; docs/policy.md)
    min_idle_s: float = 0.0
    # never keep an idle node longer than Slurm's usual SuspendTime
    max_idle_s: float = 600.0
    reuse_window_s: float = 3600.0
    reuse_horizon_s: float = 0.0  # 0: no reuse forecast (it kept more than it saved)
    default_time_limit_s: float = 4 * 3600.0
    # False: an idle node on capacity paid whether used or not (a capacity reservation) is
    # kept, as releasing it saves nothing and a relaunch costs a boot
    release_paid_idle: bool = True
    # On-demand pools only: the safety buffer it keeps for the spot pools that fall back to it
    buffer: tuple[BufferRule, ...] = ()


class PendingJob(NamedTuple):
    """A NamedTuple: the daemon builds one per pending job every pass (tens of thousands)."""

    job_id: str
    pool: str
    nodes: int
    gpus_per_node: int
    time_limit_s: float | None
    submit_s: float
    priority: int = 0
    actionable: bool = True  # pending for capacity (Resources/Priority), not held/dependent
    also: tuple[str, ...] = ()  # other pools it may run in (submitted to several partitions)
    # a pending job array's line: the tasks it stands for (pending GPU-hours, GPUs), and how
    # many of them may start now (its `%` throttle less its tasks running: nodes to find)
    tasks: int = 1
    startable: int = 1


class Queued(Protocol):
    """A queued job as ranked among gangs (a PendingJob, the hold planner's GangJob)."""

    @property
    def job_id(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def submit_s(self) -> float: ...


def gang_order(j: Queued) -> tuple[int, float, str]:
    """Pending gangs in priority order: the highest first, then the longest waiting (the
    pools' demand and the hold planner rank them alike)."""
    return (-j.priority, j.submit_s, j.job_id)


class PoolTally(NamedTuple):
    """A pool's actionable pending jobs summed up: what a snapshot carries (immutable)."""

    tasks: int = 0
    limited_gpu_s: int = 0  # nodes x GPUs x time limit x tasks, of the jobs with a limit
    unlimited_gpus: int = 0  # nodes x GPUs x tasks of those without (x the pool's default)
    inexact: int = 0  # jobs whose limit is not a whole number of seconds
    multi_nodes: int = 0  # nodes x startable, of multi-node jobs and jobs without GPUs
    single_gpus: int = 0  # GPUs x startable, of single-node jobs with GPUs
    single_nodes: int = 0  # nodes x startable, of those
    gpus: int = 0  # nodes x GPUs x tasks (the GPUs they ask for)
    gang_tasks: int = 0  # tasks of the multi-node jobs
    gangs: tuple[PendingJob, ...] = ()  # multi-node jobs, in priority order
    oldest_submit: float | None = None

    def exact(self, k: PoolKnobs) -> bool:
        return not self.inexact and (not self.unlimited_gpus
                                     or float(k.default_time_limit_s).is_integer())

    def plus(self, other: PoolTally) -> PoolTally:
        """The two tallies' jobs together (a pool's own, and those that may also run in
        it)."""
        olds = [t for t in (self.oldest_submit, other.oldest_submit) if t is not None]
        return PoolTally(
            self.tasks + other.tasks, self.limited_gpu_s + other.limited_gpu_s,
            self.unlimited_gpus + other.unlimited_gpus, self.inexact + other.inexact,
            self.multi_nodes + other.multi_nodes, self.single_gpus + other.single_gpus,
            self.single_nodes + other.single_nodes, self.gpus + other.gpus,
            self.gang_tasks + other.gang_tasks,
            tuple(heapq.merge(self.gangs, other.gangs, key=gang_order)),
            min(olds) if olds else None)


class NodeView(NamedTuple):
    """A NamedTuple: the daemon and the simulator build one per node every pass."""

    name: str
    pool: str
    state: NodeState
    idle_since: float | None = None
    held: bool = False  # drained by slurmscale to keep it above a governed pool's target
    usable: bool = True  # False: drained or down by someone else; never touched
    alloc_gpus: int = 0  # GPUs its running jobs use (a held node's idle cost is the rest)
    free_at: float | None = None  # when its last running job hits its time limit
    paid: bool = False  # its instance runs in a capacity reservation (paid used or not)


@dataclass(frozen=True)
class PoolMemory:
    """What the policy remembers between decisions (kept in the store by the daemon)."""

    target: int
    above_since: float | None = None
    last_step_at: float | None = None


@dataclass(frozen=True)
class Snapshot:
    now: float
    pools: tuple[PoolKnobs, ...]
    nodes: tuple[NodeView, ...]
    jobs: tuple[PendingJob, ...]
    memory: dict[str, PoolMemory] = field(default_factory=dict)
    # (submit time, pool, nodes) of recent job arrivals, pending or not: the reuse forecast
    arrivals: tuple[tuple[float, str, int], ...] = ()
    # every pool's pending jobs summed up, where kept as jobs came and went (None: decide
    # walks `jobs`); `near`: per pool, the tally of other pools' jobs that may also run there
    tallies: Mapping[str, PoolTally] | None = None
    near: Mapping[str, PoolTally] = field(default_factory=dict)
    # jobs slurmscale requeued moments ago that are not back in the queue yet (Slurm still
    # completing them off the interrupted node): demand no listing shows, so nothing idle
    # is released this pass
    settling: frozenset[str] = frozenset()


class ActionKind(StrEnum):
    RAISE_TARGET = "raise_target"
    LOWER_TARGET = "lower_target"
    RELEASE = "release"
    KEEP = "keep"  # an idle node deliberately kept; recorded so `plan` explains it
    HOLD = "hold"  # drain powered-down nodes above a governed target so Slurm cannot use them
    UNHOLD = "unhold"  # undrain held nodes the target now covers
    WARM = "warm"  # power up on-demand nodes for the safety buffer (no job asked for them)


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    pool: str
    reason: str
    nodes: tuple[str, ...] = ()
    count: int = 0
    # KEEP only: kept idle past max_idle_s on purpose (paid capacity, the safety buffer,
    # min_nodes), so Slurm's own SuspendTime must not release them either (slurm/suspend_exc)
    lasting: bool = False


@dataclass(frozen=True)
class Plan:
    now: float
    actions: tuple[Action, ...]
    targets: dict[str, int]
    memory: dict[str, PoolMemory]
    demand: dict[str, PoolDemand]


@dataclass(frozen=True)
class PoolDemand:
    pending_jobs: int
    pending_gpu_hours: float
    pending_gangs: tuple[tuple[str, int], ...]  # (job id, nodes) in priority order
    oldest_wait_s: float
