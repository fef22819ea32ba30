"""What the reports and metrics are made of, recorded as the daemon sees it (no slurmdbd is
needed): when each job started and ended, and each pool's capacity and demand once a minute.

Both come from the squeue read the capacity pass makes anyway: a job is recorded the first
pass it is RUNNING (its StartTime is Slurm's, after its nodes booted) and ended the first pass
it is gone from the queue (so an end is late by up to one tick). A job that started and ended
between two passes is never seen RUNNING; Slurm remembers it for MinJobAge (300 s by
default), so the ledger also reads the ended jobs and records those it missed, with Slurm's
start and end times: on a pass where a job left the queue without being seen running (at
most every 10 s), and once a minute for jobs submitted and ended between two passes. A job
cancelled before it was seen running is not counted as started: Slurm gives a job cancelled
while its nodes booted a StartTime too.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import compress, repeat
from operator import attrgetter, eq, itemgetter

from slurmscale.config import Config
from slurmscale.hostlists import expand_cached
from slurmscale.model import QueueJob, QueueRead
from slurmscale.policy.demand import gpu_seconds
from slurmscale.policy.model import NodeState, PendingJob, Snapshot
from slurmscale.policy.observe import slurm_time
from slurmscale.slurm.protocol import SlurmError
from slurmscale.store.protocol import ReconcileStore
from slurmscale.store.rows import JobRow, SampleRow

log = logging.getLogger(__name__)

SAMPLE_EVERY_S = 60.0
# Users cancelling pending jobs make "gone unseen" frequent on a busy cluster: the ended-jobs
# read (a second squeue of the whole job table) runs at most this often for it.
ENDED_READ_MIN_S = 10.0
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


_POOL_STATE_HELD = attrgetter("pool", "state", "held")


def pools_now(snap: Snapshot) -> list[PoolNow]:
    """Each pool's capacity and demand now: the snapshot's nodes counted by pool, state and
    hold in one pass (in C: a walk per pool was ten walks a pass at ten pools); the demand
    from the snapshot's tallies where it has them exact (the daemon's: kept as jobs come and
    go), else from one walk of its jobs."""
    counts: dict[str, Counter[NodeState]] = {k.name: Counter() for k in snap.pools}
    held: Counter[str] = Counter()
    for (pool, state, is_held), c in Counter(map(_POOL_STATE_HELD, snap.nodes)).items():
        got = counts.get(pool)
        if got is not None:
            got[state] += c
            if is_held:
                held[pool] += c
    tallies = snap.tallies or {}
    walk = [k for k in snap.pools if k.name not in tallies or not tallies[k.name].exact(k)]
    jobs_of: dict[str, list[PendingJob]] = {k.name: [] for k in walk}
    if walk:
        for j in snap.jobs:
            if j.actionable and j.pool in jobs_of:
                jobs_of[j.pool].append(j)
    out = []
    for k in snap.pools:
        count = counts[k.name]
        if k.name in jobs_of:
            jobs = jobs_of[k.name]
            gpus = sum(j.nodes * j.gpus_per_node * j.tasks for j in jobs)
            gpu_h = sum(j.nodes * j.gpus_per_node * j.tasks
                        * (j.time_limit_s or k.default_time_limit_s) for j in jobs) / 3600.0
            gangs = sum(j.tasks for j in jobs if j.nodes >= 2)
        else:
            t = tallies[k.name]
            gpus, gpu_h, gangs = t.gpus, gpu_seconds(k, t) / 3600.0, t.gang_tasks
        out.append(PoolNow(
            pool=k.name,
            nodes_up=count.total() - count[NodeState.POWERED_DOWN],
            nodes_busy=count[NodeState.ALLOCATED],
            nodes_booting=count[NodeState.BOOTING],
            nodes_held=count[NodeState.RESERVED] + held[k.name],
            nodes_idle=count[NodeState.IDLE],
            pending_gpus=gpus, pending_gpu_hours=gpu_h, pending_gangs=gangs))
    return out


OnStart = Callable[[str, int, float], None]  # pool, nodes, seconds waited
EndedJobs = Callable[[], list[QueueJob]]  # SlurmClient.ended_jobs


class Ledger:
    def __init__(self, cfg: Config, store: ReconcileStore, on_start: OnStart | None = None,
                 ended_jobs: EndedJobs | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.on_start = on_start
        self.ended_jobs = ended_jobs
        self.by_partition = {p.partition: p for p in cfg.pools}
        self.running: set[str] | None = None  # loaded from the store on the first pass
        # node -> (submitted, started), Unix s, of the jobs seen starting this pass: a
        # launch's time to run ends at its node's first job (launch_phases.py)
        self.started_on: dict[str, tuple[float, float]] = {}
        self.ended_seen: set[str] = set()  # ended jobs already looked at (Slurm still lists)
        self.last_active: set[str] = set()  # the queue's job ids last pass
        self.read: int | None = None  # the QueueRead last pass's were read from
        self.gone_unseen = False  # a job left the queue unseen running since the last read
        self.last_ended_read = datetime.min.replace(tzinfo=UTC)
        self.last_sample: datetime | None = None
        self.last_prune: datetime | None = None

    def _row(self, j: QueueJob, now: datetime) -> JobRow | None:
        """A job seen started, charged to the pool whose nodes it runs on (a spot job that
        fell back to on-demand is on-demand's: before, its first partition's, so a report
        showed spot busier than provisioned and on-demand idle); to its first partition's
        pool when Slurm gives no nodes."""
        nodes = expand_cached(j.nodelist) if j.nodelist else ()
        pool = self.cfg.pool_of(nodes[0]) if nodes else None
        if pool is None:
            pool = next((self.by_partition[p] for p in j.partitions if p in self.by_partition),
                        None)
        if pool is None:
            return None
        started = slurm_time(j.start_time) or now.timestamp()
        submitted = min(slurm_time(j.submit_time) or started, started)
        return JobRow(job_id=j.job_id, pool=pool.name, user_name=j.user,
                      num_nodes=j.num_nodes, gpus_per_node=j.gpus_per_node or pool.gpus_per_node,
                      submitted_at=datetime.fromtimestamp(submitted, UTC),
                      started_at=datetime.fromtimestamp(started, UTC),
                      time_limit_s=j.time_limit_s)

    def _started_on(self, j: QueueJob, row: JobRow) -> None:
        began = (row.submitted_at.timestamp(), row.started_at.timestamp())
        for n in expand_cached(j.nodelist) if j.nodelist else ():
            self.started_on[n] = began

    def _missed(self, now: datetime) -> list[JobRow]:
        """Jobs that ran entirely between two passes, from Slurm's memory of ended jobs."""
        if self.ended_jobs is None:
            return []
        try:
            ended = self.ended_jobs()
        except SlurmError as e:  # the next minute's read catches up (MinJobAge permitting)
            log.warning("ended jobs not read: %s", e)
            return []
        assert self.running is not None
        rows = []
        for j in ended:
            if j.job_id in self.ended_seen or j.job_id in self.running \
                    or j.state == "CANCELLED":
                continue
            row = self._row(j, now)
            stop = slurm_time(j.end_time)
            if row is not None and stop is not None:
                row.ended_at = max(datetime.fromtimestamp(stop, UTC), row.started_at)
                rows.append(row)
                self._started_on(j, row)
        self.ended_seen = {j.job_id for j in ended}
        return rows

    def observe(self, snap: Snapshot, jobs: Sequence[QueueJob], now: datetime) -> None:
        """Record the jobs started and ended since last pass, and a sample once a minute
        (each pool's capacity and demand: `pools_now`, worked out then).
        Works from the read's change alone (QueueRead: the records parsed afresh and those
        let go) when it follows the read seen last pass, so a pass's cost follows what
        changed (issue 44); else from a walk of every record."""
        if self.running is None:
            self.running = self.store.running_job_ids()
        running = self.running
        candidates: Sequence[QueueJob]
        told = jobs if (isinstance(jobs, QueueRead) and jobs.since is not None
                        and jobs.since == self.read) else None
        self.read = None  # (until this pass is in the store: one cut short, walked again)
        if told is not None:
            # a job gone: a record let go whose job printed no new one
            came = set(map(itemgetter(0), told.changed))
            gone = set(map(itemgetter(0), told.dropped)) - came
            seen, candidates = self.last_active, told.changed
            seen -= gone
            seen |= came
            ended = running & gone
        else:
            seen = set(map(itemgetter(0), jobs))  # (job ids; every job: in C)
            gone = self.last_active - seen
            candidates, ended = jobs, running - seen
        starts = []
        self.started_on = {}
        # (the running jobs picked out in C: a queue is mostly pending jobs)
        for j in compress(candidates, map(eq, map(itemgetter(9), candidates),
                                          repeat("RUNNING"))):
            if j[0] in running:
                continue
            row = self._row(j, now)
            if row is not None:
                starts.append(row)
                self._started_on(j, row)
        self.store.end_jobs(ended, now)
        running -= ended
        running |= {r.job_id for r in starts}
        self.gone_unseen |= bool(gone - ended)
        self.last_active = seen
        sample = self.last_sample is None or \
            (now - self.last_sample).total_seconds() >= SAMPLE_EVERY_S
        missed: list[JobRow] = []
        if sample or (self.gone_unseen and (now - self.last_ended_read).total_seconds()
                      >= ENDED_READ_MIN_S):
            missed = self._missed(now)
            self.gone_unseen, self.last_ended_read = False, now
        # the store skips jobs it has (a restarted daemon reads Slurm's ended jobs again)
        new = self.store.add_job_starts(starts + missed)
        if self.on_start is not None:
            for r in new:
                self.on_start(r.pool, r.num_nodes,
                              (r.started_at - r.submitted_at).total_seconds())
        if sample:
            current = pools_now(snap)
            self.last_sample = now
            self.store.add_samples([SampleRow(
                at=now, pool=p.pool, nodes_up=p.nodes_up, nodes_busy=p.nodes_busy,
                nodes_booting=p.nodes_booting, nodes_held=p.nodes_held,
                pending_gpus=p.pending_gpus, pending_gpu_hours=p.pending_gpu_hours,
                pending_gangs=p.pending_gangs) for p in current])
        if self.last_prune is None or now - self.last_prune >= timedelta(hours=1):
            self.last_prune = now
            self.store.prune_samples(now - KEEP_SAMPLES)
        self.read = jobs.serial if isinstance(jobs, QueueRead) else None
