"""Live Slurm state and the config -> the policy's inputs: the Snapshot, the pending gangs, the
pools' knobs and the spot fallback's rules. The edge between the config file and the pure
policy (which knows nothing of the config): built once per pass, here. Pure: the caller reads
Slurm and the clock."""

from __future__ import annotations

from collections import Counter
from typing import cast

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


class QueueView:
    """The queue as the daemon's passes saw it, kept from one pass to the next: what each
    job's record gave the snapshot and the hold planner last pass is given again while Slurm
    prints the same record (the squeue parse hands back the very record for an unchanged
    line; the simulated Slurm keeps its records), and worked out afresh for the jobs that
    changed. So a pass's cost follows what changed, not the queue's length (issue 44;
    `tests/benchmarks/observe_delta.py`). Also the arrival log (job id -> submit, pool,
    nodes): a job that already finished is gone from squeue but still counts as an arrival
    within the reuse forecast's window.

    What a job's view depends on beyond its record is either part of the key (the config
    object, the clock's eras) or never remembered (a job slurmscale requeued, a throttled
    array, a submit time Slurm does not give)."""

    def __init__(self) -> None:
        self.arrivals: dict[str, tuple[float, str, int]] = {}
        # job id -> (its record, its arrival (None: no pool's), its demand (None: not pending))
        self._jobs: dict[str, tuple[QueueJob, tuple[float, str, int] | None,
                                    PendingJob | None]] = {}
        self._gangs: dict[str, tuple[QueueJob, GangJob | None]] = {}
        self._running: list[QueueJob] = []
        self._ends: tuple[dict[str, float], dict[str, int]] = ({}, {})
        # node name -> (its record, its view (None: no pool's)), made under these ends/paid
        self._nodes: dict[str, tuple[SlurmNode, NodeView | None]] = {}
        self._nodes_under: tuple[object, frozenset[str]] | None = None
        self._key: tuple[int, int] | None = None
        self.knobs: tuple[PoolKnobs, ...] = ()  # the config's, made once per config

    def forget(self) -> None:
        """Every job's view (not the arrival log): the next pass reads the whole queue."""
        self._jobs, self._gangs, self._running, self._ends = {}, {}, [], ({}, {})
        self._nodes, self._nodes_under = {}, None

    def valid_for(self, cfg: Config) -> None:
        """Forget the views made under another config or before the host's clock stepped
        (Slurm's times read into the daemon's frame differently since)."""
        key = (id(cfg), len(timeframe.FRAME.eras))
        if key != self._key:
            self._key = key
            self.knobs = knobs(cfg)
            self.forget()

    def ends(self, jobs: list[QueueJob]) -> tuple[dict[str, float], dict[str, int]]:
        """running_ends, again only when a running job's record changed."""
        running = [j for j in jobs if j[13]]  # (NodeList: only a running job's is read)
        if len(running) != len(self._running) or any(
                a is not b for a, b in zip(running, self._running, strict=True)):
            self._running, self._ends = running, running_ends(running)
        return self._ends


def gang_jobs(cfg: Config, jobs: list[QueueJob], min_nodes: int,
              also: frozenset[str] = frozenset(),
              view: QueueView | None = None) -> tuple[GangJob, ...]:
    """Jobs the reservation planner considers: multi-node jobs, and any job in `also` (the
    jobs slurmscale already holds nodes for, whatever their state). `view`: the daemon's
    queue view (a job whose record is unchanged since last pass is not looked at again)."""
    # a capacity-block pool's gangs wait for its block's window, never for a hold
    by_partition = {p.partition: p for p in cfg.pools
                    if p.capacity_type is not CapacityType.CAPACITY_BLOCK}
    pool_of: dict[tuple[str, ...], Pool | None] = {}  # (a queue has few partition lists)
    out = []
    # (tens of thousands a pass: each GangJob made as the tuple it is, in field order, and
    # a time looked up in slurm_time's memo before calling it)
    make, missing, times = tuple.__new__, reading._MISSING, reading.time_memo()
    keep = view is not None and min_nodes == 2  # (the daemon's pass: its list is kept)
    if view is not None:
        view.valid_for(cfg)
    last = view._gangs if keep and view is not None else {}
    fresh: dict[str, tuple[QueueJob, GangJob | None]] = {}
    for j in jobs:
        hit = last.get(j[0])
        if hit is not None and hit[0] is j and (hit[1] is not None or j[0] not in also):
            fresh[j[0]] = hit
            if hit[1] is not None:
                out.append(hit[1])
            continue
        if j.num_nodes < min_nodes and j.job_id not in also:
            if keep:
                fresh[j[0]] = (j, None)
            continue
        if j.partitions in pool_of:
            pool = pool_of[j.partitions]
        else:
            pool = pool_of[j.partitions] = next(
                (by_partition[p] for p in j.partitions if p in by_partition), None)
        if pool is None:
            if keep:
                fresh[j[0]] = (j, None)
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
        g = make(GangJob, (
            j.job_id, pool.name, j.num_nodes, j.gpus_per_node or pool.gpus_per_node,
            submit or 0.0, j.priority, j.user, j.account, j.state == "PENDING",
            reason in CAPACITY_REASONS or reason.startswith("ReqNodeNotAvail"),
            reason.startswith("JobHeld") or j.priority == 0, j.reservation, expected,
            None, None))
        out.append(g)
        if keep and j.num_nodes >= min_nodes:  # (one in `also` alone: looked at each time)
            fresh[j[0]] = (j, g)
    if keep and view is not None:
        view._gangs = fresh
    return tuple(out)


def _node_views(cfg: Config, nodes: list[SlurmNode], jobs: list[QueueJob],
                paid: frozenset[str], view: QueueView | None) -> list[NodeView]:
    """The pools' nodes as the policy sees them (`paid`: nodes in a capacity reservation).
    With the daemon's `view`: a node whose record is the same as last pass's, while no
    running job changed and the paid nodes are the same, keeps last pass's view."""
    if view is None:
        free_at, job_gpus = running_ends(jobs)
        last: dict[str, tuple[SlurmNode, NodeView | None]] = {}
    else:
        ends = free_at, job_gpus = view.ends(jobs)
        under = (ends, paid)
        last = view._nodes if view._nodes_under == under else {}
        view._nodes_under = under
    fresh: dict[str, tuple[SlurmNode, NodeView | None]] = {}
    # (the loops here and in build_snapshot run for every node and job every pass: kept flat,
    # enum members and methods looked up once)
    views: list[NodeView] = []
    pool_of_node, idle, allocated, down, held_why = cfg.pool_of, NodeState.IDLE, \
        NodeState.ALLOCATED, NodeState.POWERED_DOWN, Why.HELD
    for n in nodes:
        name = n.name
        hit = last.get(name)
        if hit is not None and hit[0] is n:
            fresh[name] = hit
            if hit[1] is not None:
                views.append(hit[1])
            continue
        pool = pool_of_node(name)
        if pool is None:
            fresh[name] = (n, None)
            continue
        st, drained, unusable = state_facts(n.state)
        # held by slurmscale (governed pools): only these are ever undrained, never an admin's
        held = drained and drained_by_us(n) is held_why
        usable = held or not unusable
        if st is down and not n.alloc_gpus and name not in job_gpus and name not in paid:
            v = down_view(name, pool.name, held, usable)  # most nodes, at rest
        else:
            v = NodeView(
                name, pool.name, st, slurm_time(n.last_busy) if st is idle else None, held,
                usable, n.alloc_gpus or min(job_gpus.get(name, 0), pool.gpus_per_node),
                free_at.get(name) if st is allocated else None, name in paid)
        views.append(v)
        fresh[name] = (n, v)
    if view is not None:
        view._nodes = fresh
    return views


def build_snapshot(cfg: Config, nodes: list[SlurmNode], jobs: list[QueueJob], now: float,
                   memory: dict[str, PoolMemory] | None = None,
                   view: QueueView | None = None,
                   requeued: frozenset[str] = frozenset(),
                   paid: frozenset[str] = frozenset()) -> Snapshot:
    """`jobs`: pending jobs (the demand) plus, optionally, starting/running ones (their submit
    times feed the reuse forecast, as every arrival does in the simulator). `view`, the
    daemon's memory across passes (QueueView): its arrival log is updated here and used for
    the forecast, and a job whose record is unchanged since the last pass is not looked at
    again. `requeued`: jobs slurmscale requeued off an interrupted node; while Slurm holds
    them back (BeginTime, or no reason yet) they are still demand that is about to need
    capacity. `paid`: nodes whose instance runs in a capacity reservation."""
    if view is not None:
        view.valid_for(cfg)
    views = _node_views(cfg, nodes, jobs, paid, view)
    by_partition = {p.partition: p for p in cfg.pools}
    # partition list -> (pool name, its other pools, max nodes, GPUs a node), or None: not
    # slurmscale's (a queue has few partition lists; looked up once each)
    pool_of: dict[tuple[str, ...], tuple[str, tuple[str, ...], int, int] | None] = {}
    pending: list[PendingJob] = []
    arrivals: list[tuple[float, str, int]] = []
    window = max((p.policy.reuse_window_s for p in cfg.pools), default=3600.0)
    # a throttled array (`%N`) starts no more tasks than N less those running
    running_tasks: Counter[str] = Counter()
    if any(j.array_throttle for j in jobs):
        running_tasks.update(j.array_job for j in jobs if j.array_job and j.state != "PENDING")
    log = view.arrivals if view is not None else None
    last = view._jobs if view is not None else {}
    times, missing = reading.time_memo(), reading._MISSING  # (looked up before slurm_time)
    fresh: dict[str, tuple[QueueJob, tuple[float, str, int] | None, PendingJob | None]] = {}
    for j in jobs:
        job_id = j[0]
        hit = last.get(job_id)
        if hit is not None and hit[0] is j and job_id not in requeued:
            # unchanged since the last pass: its arrival is logged, its demand the same
            fresh[job_id] = hit
            if hit[2] is not None:
                pending.append(hit[2])
            continue
        # (every changed job: each QueueJob unpacked once, not read field by field)
        (_, partitions, num_nodes, gpus, limit, submit_time, reason, priority, _user,
         state, _account, _resv, _end, _nodes, _start, _expected, array_job, tasks,
         throttle) = j
        if partitions in pool_of:
            seen = pool_of[partitions]
        else:
            mine = [by_partition[p] for p in partitions if p in by_partition]
            seen = pool_of[partitions] = (mine[0].name, tuple(
                p.name for p in mine[1:] if p is not mine[0]), mine[0].max_nodes,
                mine[0].gpus_per_node) if mine else None
        if seen is None:
            if view is not None:
                fresh[job_id] = (j, None, None)
            continue
        pool_name, also, max_nodes, pool_gpus = seen
        got = times.get(submit_time, missing)
        submitted = slurm_time(submit_time) if got is missing else cast(float | None, got)
        submit = submitted or now
        # (a pending array line: every task is an arrival; the log keys tasks by line)
        arrival = (submit, pool_name, num_nodes * min(tasks, max_nodes))
        if submit >= now - window:  # (no pool's forecast looks further back)
            if log is None:
                arrivals.append(arrival)
            else:
                log[job_id] = arrival
        demand = None
        if state == "PENDING":  # (running or starting: an arrival, not demand)
            startable = tasks
            if throttle:
                startable = max(0, min(tasks, throttle - running_tasks[array_job]))
            demand = PendingJob(
                job_id, pool_name, num_nodes, gpus or pool_gpus, limit, submit, priority,
                (reason in CAPACITY_REASONS or job_id in requeued) and priority > 0
                and startable > 0, also, tasks, startable)
            pending.append(demand)
        if view is not None and submitted and not throttle and job_id not in requeued:
            fresh[job_id] = (j, arrival, demand)
    if view is not None:
        view._jobs = fresh
    if log is not None:
        for job_id in [k for k, (t, _, _) in log.items() if t < now - window]:
            del log[job_id]
        arrivals = list(log.values())
    return Snapshot(now=now, pools=knobs(cfg) if view is None else view.knobs,
                    nodes=tuple(views), jobs=tuple(pending),
                    memory=dict(memory or {}), arrivals=tuple(sorted(arrivals)))


def fallback_rules(cfg: Config) -> tuple[FallbackRule, ...]:
    """The spot pools whose users' spot-only jobs may be given the on-demand partition
    (`spot.allow_partition_rewrite`), and after how long."""
    return tuple(FallbackRule(p.name, p.partition, cfg.pool(p.fallback_pool).partition,
                              p.spot.fallback_after_s)
                 for p in cfg.pools if p.capacity_type is CapacityType.SPOT
                 and p.fallback_pool is not None and p.spot.allow_partition_rewrite)
