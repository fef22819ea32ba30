"""What the reports and metrics are made of, recorded as the daemon sees it (no slurmdbd is
needed): when each job started and ended, and each pool's capacity and demand once a minute.

Both come from the squeue read the capacity pass makes anyway: a job is recorded the first
pass it is RUNNING (its StartTime is Slurm's, after its nodes booted) and ended the first pass
it is gone from the queue (so an end is late by up to one tick).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from slurmscale.config import Config
from slurmscale.model import QueueJob
from slurmscale.policy.model import NodeState, Snapshot
from slurmscale.policy.observe import slurm_time
from slurmscale.store.repo import Store
from slurmscale.store.tables import JobRow, SampleRow

SAMPLE_EVERY_S = 60.0
KEEP_SAMPLES = timedelta(days=35)  # a month of reports, and some


@dataclass(frozen=True)
class PoolNow:
    """One pool's capacity and demand this pass (a sample row, and the metrics' gauges)."""

    pool: str
    nodes_up: int
    nodes_busy: int
    nodes_booting: int
    nodes_held: int
    nodes_idle: int
    pending_gpus: int
    pending_gpu_hours: float
    pending_gangs: int


def pools_now(snap: Snapshot) -> list[PoolNow]:
    out = []
    for k in snap.pools:
        nodes = [n for n in snap.nodes if n.pool == k.name]
        jobs = [j for j in snap.jobs if j.pool == k.name and j.actionable]
        count = {s: sum(1 for n in nodes if n.state is s) for s in NodeState}
        out.append(PoolNow(
            pool=k.name,
            nodes_up=len(nodes) - count[NodeState.POWERED_DOWN],
            nodes_busy=count[NodeState.ALLOCATED],
            nodes_booting=count[NodeState.BOOTING],
            nodes_held=count[NodeState.RESERVED] + sum(1 for n in nodes if n.held),
            nodes_idle=count[NodeState.IDLE],
            pending_gpus=sum(j.nodes * j.gpus_per_node for j in jobs),
            pending_gpu_hours=sum(j.nodes * j.gpus_per_node
                                  * (j.time_limit_s or k.default_time_limit_s)
                                  for j in jobs) / 3600.0,
            pending_gangs=sum(1 for j in jobs if j.nodes >= 2)))
    return out


OnStart = Callable[[str, int, float], None]  # pool, nodes, seconds waited


class Ledger:
    def __init__(self, cfg: Config, store: Store, on_start: OnStart | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.on_start = on_start
        self.by_partition = {p.partition: p for p in cfg.pools}
        self.running: set[str] | None = None  # loaded from the store on the first pass
        self.last_sample: datetime | None = None
        self.last_prune: datetime | None = None

    def observe(self, snap: Snapshot, jobs: list[QueueJob], now: datetime) -> list[PoolNow]:
        if self.running is None:
            self.running = self.store.running_job_ids()
        starts = []
        active = set()
        for j in jobs:
            active.add(j.job_id)
            if j.state != "RUNNING" or j.job_id in self.running:
                continue
            pool = next((self.by_partition[p] for p in j.partitions
                         if p in self.by_partition), None)
            if pool is None:
                continue
            started = slurm_time(j.start_time) or now.timestamp()
            submitted = min(slurm_time(j.submit_time) or started, started)
            starts.append(JobRow(
                job_id=j.job_id, pool=pool.name, user_name=j.user, num_nodes=j.num_nodes,
                gpus_per_node=j.gpus_per_node or pool.gpus_per_node,
                submitted_at=datetime.fromtimestamp(submitted, UTC),
                started_at=datetime.fromtimestamp(started, UTC)))
        self.store.add_job_starts(starts)
        self.running |= {r.job_id for r in starts}
        if self.on_start is not None:
            for r in starts:
                self.on_start(r.pool, r.num_nodes,
                              (r.started_at - r.submitted_at).total_seconds())
        ended = self.running - active
        self.store.end_jobs(ended, now)
        self.running -= ended
        current = pools_now(snap)
        if self.last_sample is None or (now - self.last_sample).total_seconds() >= \
                SAMPLE_EVERY_S:
            self.last_sample = now
            self.store.add_samples([SampleRow(
                at=now, pool=p.pool, nodes_up=p.nodes_up, nodes_busy=p.nodes_busy,
                nodes_booting=p.nodes_booting, nodes_held=p.nodes_held,
                pending_gpus=p.pending_gpus, pending_gpu_hours=p.pending_gpu_hours,
                pending_gangs=p.pending_gangs) for p in current])
        if self.last_prune is None or now - self.last_prune >= timedelta(hours=1):
            self.last_prune = now
            self.store.prune_samples(now - KEEP_SAMPLES)
        return current
