"""Slurm's records and the config -> the policy's inputs, one record at a time: a pending
job's demand, a gang as the hold planner sees it, a node's view, a job's arrival. Each rule is
written once, here, and called alike by the daemon's queue view for the records that changed
since its last pass and by a rebuild for every record (daemon/queue/queue_view.py holds what is kept
between passes). Pure: the caller reads Slurm and the clock."""

from __future__ import annotations

from typing import NamedTuple

from slurmscale.config import CapacityType, Config, Pool
from slurmscale.model import QueueJob, SlurmNode
from slurmscale.policy.model import NodeState, NodeView, PendingJob
from slurmscale.policy.observe import CAPACITY_REASONS, down_view, slurm_time, state_facts
from slurmscale.policy.reservations import GangJob
from slurmscale.slurm.reasons import Why, drained_by_us


class PoolOf(NamedTuple):
    """Where a job submitted to a list of partitions runs: the first of slurmscale's pools
    among them, the other pools it may also run in, and that pool's size and node."""

    name: str
    also: tuple[str, ...]
    max_nodes: int
    gpus_per_node: int


def pool_for(partitions: tuple[str, ...], by_partition: dict[str, Pool]) -> PoolOf | None:
    """A partition list's pool (None: no partition of slurmscale's)."""
    mine = [by_partition[p] for p in partitions if p in by_partition]
    if not mine:
        return None
    return PoolOf(mine[0].name, tuple(p.name for p in mine[1:] if p is not mine[0]),
                  mine[0].max_nodes, mine[0].gpus_per_node)


def gang_pools(cfg: Config) -> dict[str, Pool]:
    """The pools whose gangs a hold may be for, by partition: a capacity-block pool's gangs
    wait for its block's window, never for a hold."""
    return {p.partition: p for p in cfg.pools
            if p.capacity_type is not CapacityType.CAPACITY_BLOCK}


def counts(reason: str, requeued: bool, priority: int, startable: int) -> bool:
    """When a pending job's demand counts (PendingJob.actionable): it waits for capacity (a
    capacity reason, or slurmscale requeued it and Slurm holds it back), it is not held
    (priority 0), and a task of it may start now."""
    return (reason in CAPACITY_REASONS or requeued) and priority > 0 and startable > 0


def startable(j: QueueJob, running_tasks: int) -> int:
    """The tasks of a pending line that may start now: all of them, or for a throttled
    array (`%N`) no more than N less its tasks running."""
    if not j.array_throttle:
        return j.array_tasks
    return max(0, min(j.array_tasks, j.array_throttle - running_tasks))


def arrival(j: QueueJob, pool: PoolOf, submit: float) -> tuple[float, str, int]:
    """A job's arrival for the reuse forecast: (submit, pool, nodes); a pending array line's
    every task is one."""
    return (submit, pool.name, j.num_nodes * min(j.array_tasks, pool.max_nodes))


def demand(j: QueueJob, pool: PoolOf, submit: float, requeued: bool, running_tasks: int
           ) -> PendingJob | None:
    """What a job asks of its pool (None: running or starting, an arrival but no demand).
    `requeued`: slurmscale requeued it off an interrupted node; `running_tasks`: its array's
    tasks running."""
    if j.state != "PENDING":
        return None
    can_start = startable(j, running_tasks)
    return PendingJob(
        j.job_id, pool.name, j.num_nodes, j.gpus_per_node or pool.gpus_per_node,
        j.time_limit_s, submit, j.priority, counts(j.reason, requeued, j.priority, can_start),
        pool.also, j.array_tasks, can_start)


def gang(j: QueueJob, pool: Pool) -> GangJob:
    """A queued job as the reservation planner sees it (pending or running)."""
    reason = j.reason
    return GangJob(
        j.job_id, pool.name, j.num_nodes, j.gpus_per_node or pool.gpus_per_node,
        slurm_time(j.submit_time) or 0.0, j.priority, j.user, j.account,
        j.state == "PENDING",
        reason in CAPACITY_REASONS or reason.startswith("ReqNodeNotAvail"),
        reason.startswith("JobHeld") or j.priority == 0, j.reservation,
        slurm_time(j.expected_start) if j.expected_start else None)


def node_view(n: SlurmNode, pool: Pool, free_at: float | None, job_gpus: int | None,
              paid: bool) -> NodeView:
    """A pool's node as the policy sees it. `free_at`, `job_gpus`: when its running jobs
    end and the GPUs they use (policy/observe.running_ends); `paid`: its instance runs in a
    capacity reservation. Held: drained by slurmscale (only these are ever undrained, never
    an admin's)."""
    st, drained, unusable = state_facts(n.state)
    held = drained and drained_by_us(n) is Why.HELD
    usable = held or not unusable
    if st is NodeState.POWERED_DOWN and not n.alloc_gpus and job_gpus is None and not paid:
        return down_view(n.name, pool.name, held, usable)  # most nodes, at rest
    return NodeView(
        n.name, pool.name, st, slurm_time(n.last_busy) if st is NodeState.IDLE else None,
        held, usable, n.alloc_gpus or min(job_gpus or 0, pool.gpus_per_node),
        free_at if st is NodeState.ALLOCATED else None, paid)
