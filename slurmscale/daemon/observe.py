"""Live Slurm state and the config -> the policy's inputs: the Snapshot, the pending gangs, the
pools' knobs and the spot fallback's rules. The edge between the config file and the pure
policy (which knows nothing of the config): built once per pass, here. Pure: the caller reads
Slurm and the clock."""

from __future__ import annotations

from collections import Counter

from slurmscale import timeframe
from slurmscale.config import CapacityType, Config, Pool
from slurmscale.model import QueueJob, SlurmNode
from slurmscale.policy import observe as reading
from slurmscale.policy.fallback import FallbackRule
from slurmscale.policy.model import (
    BufferRule,
    NodeState,
    NodeView,
    PendingJob,
    PoolKnobs,
    PoolMemory,
    Snapshot,
)
from slurmscale.policy.observe import (
    CAPACITY_REASONS,
    down_view,
    running_ends,
    slurm_time,
    state_facts,
)
from slurmscale.policy.reservations import GangJob
from slurmscale.slurm.reasons import Why, drained_by_us


def knobs(cfg: Config) -> tuple[PoolKnobs, ...]:
    """The config's pool policy as the policy's knobs (PoolPolicy mirrors PoolKnobs' fields)."""
    return tuple(
        PoolKnobs(name=p.name, gpus_per_node=p.gpus_per_node, max_nodes=p.max_nodes,
                  min_nodes=p.min_nodes, buffer=buffer_rules(cfg, p.name),
                  release_paid_idle=(p.capacity_reservations is None
                                     or p.capacity_reservations.release_idle),
                  **p.policy.knob_values())
        for p in cfg.pools)


def buffer_rules(cfg: Config, pool: str) -> tuple[BufferRule, ...]:
    """The safety buffers on-demand pool `pool` keeps for the spot pools falling back to it."""
    return tuple(BufferRule(p.name, p.spot.on_demand_buffer, p.spot.warm_on_demand_nodes)
                 for p in cfg.pools if p.fallback_pool == pool
                 and (p.spot.on_demand_buffer or p.spot.warm_on_demand_nodes))


def gang_jobs(cfg: Config, jobs: list[QueueJob], min_nodes: int,
              also: frozenset[str] = frozenset()) -> tuple[GangJob, ...]:
    """Jobs the reservation planner considers: multi-node jobs, and any job in `also` (the
    jobs slurmscale already holds nodes for, whatever their state)."""
    # a capacity-block pool's gangs wait for its block's window, never for a hold
    by_partition = {p.partition: p for p in cfg.pools
                    if p.capacity_type is not CapacityType.CAPACITY_BLOCK}
    pool_of: dict[tuple[str, ...], Pool | None] = {}  # (a queue has few partition lists)
    out = []
    # (tens of thousands a pass: each GangJob made as the tuple it is, in field order, and
    # a time looked up in slurm_time's memo before calling it)
    make, missing = tuple.__new__, reading._MISSING
    times = {} if timeframe.FRAME.eras else reading._TIMES  # (a stepped clock: through slurm_time)
    for j in jobs:
        if j.num_nodes < min_nodes and j.job_id not in also:
            continue
        if j.partitions in pool_of:
            pool = pool_of[j.partitions]
        else:
            pool = pool_of[j.partitions] = next(
                (by_partition[p] for p in j.partitions if p in by_partition), None)
        if pool is None:
            continue
        submit = times.get(j.submit_time, missing)
        if submit is missing:
            submit = slurm_time(j.submit_time)
        expected = None
        if j.expected_start:
            expected = times.get(j.expected_start, missing)
            if expected is missing:
                expected = slurm_time(j.expected_start)
        reason = j.reason
        out.append(make(GangJob, (
            j.job_id, pool.name, j.num_nodes, j.gpus_per_node or pool.gpus_per_node,
            submit or 0.0, j.priority, j.user, j.account, j.state == "PENDING",
            reason in CAPACITY_REASONS or reason.startswith("ReqNodeNotAvail"),
            reason.startswith("JobHeld") or j.priority == 0, j.reservation, expected,
            None, None)))
    return tuple(out)


def _node_views(cfg: Config, nodes: list[SlurmNode], jobs: list[QueueJob],
                paid: frozenset[str]) -> list[NodeView]:
    """The pools' nodes as the policy sees them (`paid`: nodes in a capacity reservation)."""
    free_at, job_gpus = running_ends(jobs)
    # (the loops here and in build_snapshot run for every node and job every pass: kept flat,
    # enum members and methods looked up once)
    views: list[NodeView] = []
    pool_of_node, idle, allocated, down, held_why = cfg.pool_of, NodeState.IDLE, \
        NodeState.ALLOCATED, NodeState.POWERED_DOWN, Why.HELD
    for n in nodes:
        pool = pool_of_node(n.name)
        if pool is None:
            continue
        st, drained, unusable = state_facts(n.state)
        # held by slurmscale (governed pools): only these are ever undrained, never an admin's
        held = drained and drained_by_us(n) is held_why
        usable = held or not unusable
        if st is down and not n.alloc_gpus and n.name not in job_gpus and n.name not in paid:
            views.append(down_view(n.name, pool.name, held, usable))  # most nodes, at rest
            continue
        views.append(NodeView(
            n.name, pool.name, st, slurm_time(n.last_busy) if st is idle else None, held,
            usable, n.alloc_gpus or min(job_gpus.get(n.name, 0), pool.gpus_per_node),
            free_at.get(n.name) if st is allocated else None, n.name in paid))
    return views


def build_snapshot(cfg: Config, nodes: list[SlurmNode], jobs: list[QueueJob], now: float,
                   memory: dict[str, PoolMemory] | None = None,
                   arrival_log: dict[str, tuple[float, str, int]] | None = None,
                   requeued: frozenset[str] = frozenset(),
                   paid: frozenset[str] = frozenset()) -> Snapshot:
    """`jobs`: pending jobs (the demand) plus, optionally, starting/running ones (their submit
    times feed the reuse forecast, as every arrival does in the simulator). `arrival_log`, the
    daemon's memory across passes (job id -> submit, pool, nodes), is updated here and used
    for the forecast instead: a job that already finished is gone from squeue but still
    counts as an arrival within the window. `requeued`: jobs slurmscale requeued off an
    interrupted node; while Slurm holds them back (BeginTime, or no reason yet) they are still
    demand that is about to need capacity. `paid`: nodes whose instance runs in a capacity
    reservation."""
    views = _node_views(cfg, nodes, jobs, paid)
    by_partition = {p.partition: p for p in cfg.pools}
    # partition list -> (pool name, its other pools, max nodes, GPUs a node), or None: not
    # slurmscale's (a queue has few partition lists; looked up once each)
    pool_of: dict[tuple[str, ...], tuple[str, tuple[str, ...], int, int] | None] = {}
    pending = []
    arrivals = []
    window = max((p.policy.reuse_window_s for p in cfg.pools), default=3600.0)
    # a throttled array (`%N`) starts no more tasks than N less those running
    running_tasks: Counter[str] = Counter()
    if any(j.array_throttle for j in jobs):
        running_tasks.update(j.array_job for j in jobs if j.array_job and j.state != "PENDING")
    # (every job every pass: each QueueJob unpacked once, not read field by field)
    for (job_id, partitions, num_nodes, gpus, limit, submit_time, reason, priority, _user,
         state, _account, _resv, _end, _nodes, _start, _expected, array_job, tasks,
         throttle) in jobs:
        if partitions in pool_of:
            seen = pool_of[partitions]
        else:
            mine = [by_partition[p] for p in partitions if p in by_partition]
            seen = pool_of[partitions] = (mine[0].name, tuple(
                p.name for p in mine[1:] if p is not mine[0]), mine[0].max_nodes,
                mine[0].gpus_per_node) if mine else None
        if seen is None:
            continue
        pool_name, also, max_nodes, pool_gpus = seen
        submit = slurm_time(submit_time) or now
        # (a pending array line: every task is an arrival; the log keys tasks by line)
        arrived = num_nodes * min(tasks, max_nodes)
        if arrival_log is None:
            arrivals.append((submit, pool_name, arrived))
        elif submit >= now - window:  # (an older one would be dropped from the log below)
            arrival_log[job_id] = (submit, pool_name, arrived)
        if state != "PENDING":
            continue  # running or starting: an arrival for the reuse forecast, not demand
        startable = tasks
        if throttle:
            startable = max(0, min(tasks, throttle - running_tasks[array_job]))
        pending.append(PendingJob(
            job_id, pool_name, num_nodes, gpus or pool_gpus, limit, submit, priority,
            (reason in CAPACITY_REASONS or job_id in requeued) and priority > 0
            and startable > 0, also, tasks, startable))
    if arrival_log is not None:
        for job_id in [k for k, (t, _, _) in arrival_log.items() if t < now - window]:
            del arrival_log[job_id]
        arrivals = list(arrival_log.values())
    return Snapshot(now=now, pools=knobs(cfg), nodes=tuple(views), jobs=tuple(pending),
                    memory=dict(memory or {}), arrivals=tuple(sorted(arrivals)))


def fallback_rules(cfg: Config) -> tuple[FallbackRule, ...]:
    """The spot pools whose users' spot-only jobs may be given the on-demand partition
    (`spot.allow_partition_rewrite`), and after how long."""
    return tuple(FallbackRule(p.name, p.partition, cfg.pool(p.fallback_pool).partition,
                              p.spot.fallback_after_s)
                 for p in cfg.pools if p.capacity_type is CapacityType.SPOT
                 and p.fallback_pool is not None and p.spot.allow_partition_rewrite)
