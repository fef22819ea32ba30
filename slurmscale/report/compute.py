"""The report's numbers, computed from the store alone (so a cron job on any host with the
store can make it): instances for provisioned capacity and cost, the jobs table for busy time
and queue waits, events, gangs, preemptions and holds for everything else.

Conventions, so anyone can recompute a number: time is clipped to the window; a GPU-hour is
one GPU for one hour of an instance's life (launch to terminate, or to the window's end);
busy GPU-hours are the running jobs' nodes x GPUs per node x run time; idle = provisioned -
busy (never below zero); percentiles are nearest-rank over the jobs that started in the
window; a job's wait is its first start minus its submission (boot time included, as its
user saw it).

Paid capacity (capacity reservations, Capacity Blocks): paid = its instance count x the part
of the window inside its own (an ODCR's starts at its StartDate and has no end); used =
node-hours instances ran in it (by the reservation id EC2 gave them); idle = paid - used:
capacity bought and not run on, the number block buyers watch.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from pydantic import BaseModel

from slurmscale.audit import Kind
from slurmscale.config import CapacityType, Config
from slurmscale.lifecycles import GraceState, InstanceState
from slurmscale.report.quantiles import percentile
from slurmscale.report.time_to_run import TimeToRun, summarize
from slurmscale.store.rows import (
    NOT_PREEMPTED,
    CapacityReservationRow,
    GraceRow,
    InstancePeriodRow,
    InstanceRow,
    JobRow,
    ReplacementRow,
    utc,
)

if TYPE_CHECKING:
    from slurmscale.store.repo import Store  # (a type: the caller opens the store)

SIZE_BUCKETS = (("1 node", 1, 1), ("2-7 nodes", 2, 7), ("8+ nodes", 8, 10**9))
SCALE_KINDS = (Kind.LAUNCHED, Kind.RELEASED, Kind.TARGET_RAISED, Kind.TARGET_LOWERED,
               Kind.SCALE_DOWN, Kind.BUFFER_WARMED)
ANOMALY_KINDS = (Kind.LEAK_TERMINATED, Kind.NODE_WITHOUT_INSTANCE, Kind.RESUME_FAILED,
                 Kind.UNTRACKED_INSTANCE, Kind.LAUNCH_DEFERRED, Kind.TERMINATE_FAILED,
                 Kind.SLURM_READ_FAILED, Kind.SPOOL_REJECTED, Kind.SPOOL_UNWRITABLE,
                 Kind.EVENT_DROPPED, Kind.NODE_ADDRESS_RESET)
FALLBACK_KINDS = (Kind.CAPACITY_UNAVAILABLE, Kind.JOB_PARTITION_REWRITTEN, Kind.JOB_STEERED)
# a job slurmscale requeued: off a node going away, and off a block pool at its window's close
REQUEUE_KINDS = (Kind.JOB_REQUEUED, Kind.BLOCK_JOB_REQUEUED)


class PoolUsage(BaseModel):
    pool: str
    capacity_type: str
    instances: int
    node_hours: float
    gpu_hours_provisioned: float
    gpu_hours_busy: float
    gpu_hours_idle: float
    est_cost_usd: float | None  # None: some instance type has no price configured


class Wait(BaseModel):
    size: str
    jobs: int
    p50_s: float | None
    p95_s: float | None
    max_s: float | None


class CapacityError(BaseModel):
    pool: str
    code: str
    gangs: int


class HoldSummary(BaseModel):
    name: str
    pool: str
    job_id: str
    needed: int
    state: str
    idle_gpu_hours: float


class Anomaly(BaseModel):
    at: str
    kind: str
    message: str


class PaidUsage(BaseModel):
    id: str
    pool: str
    kind: str  # default (an ODCR) | capacity-block
    instance_type: str
    state: str
    total: int
    available: int
    start: str | None
    end: str | None
    paid_node_hours: float
    used_node_hours: float
    idle_node_hours: float
    utilization: float | None


class GraceTotals(BaseModel):
    """The jobs one pool signalled before a requeue in the window (its `grace_signal`), by
    what warned: how many were signalled, left their node within the grace (saved and
    ended, or requeued themselves), were requeued at its end, or are in it still."""

    pool: str
    cause: str  # interrupted | reclaimed | block-end | unhealthy (a scheduled event)
    signalled: int
    left_in_grace: int
    requeued: int
    in_grace: int
    p50_grace_s: float | None  # signal -> left or requeued (median, over those ended)


class WarmUsage(BaseModel):
    """One pool's warm pool in the window: how many of its instances were stopped in it,
    for how many instance-hours (billed for their EBS volumes, not compute), at the pool's
    `warm_pool.stopped_usd_per_hour` when given."""

    pool: str
    instances: int
    stopped_hours: float
    est_volume_cost_usd: float | None  # None: no stopped_usd_per_hour configured


class Replacements(BaseModel):
    """Unhealthy nodes one pool lost to one cause in the window."""

    pool: str
    cause: str
    replaced: int
    left_for_admin: int  # replaced too often: left drained
    jobs_requeued: int
    # detection -> the pool's next instance launched after the replacement (median; None:
    # none launched yet): the capacity back, on whichever node the next job needed
    p50_to_fresh_s: float | None
    # GPUs x (detection -> the bad instance terminated)
    lost_gpu_hours: float


class Report(BaseModel):
    cluster: str
    since: str
    until: str
    pools: list[PoolUsage]
    totals: PoolUsage
    waits: list[Wait]
    gang_time_to_start: Wait
    preemptions: int
    requeues: int
    launches: int
    launch_failures: int
    capacity_errors: list[CapacityError]
    fallbacks: dict[str, int]
    reservations: list[HoldSummary]  # holds alive in the window; idle cost over their life
    reservation_idle_gpu_hours: float
    scale_actions: dict[str, int]
    anomalies: dict[str, int]
    recent_anomalies: list[Anomaly]
    unpriced: list[str]  # instance type/capacity type pairs without a price
    paid_capacity: list[PaidUsage] = []
    replacements: list[Replacements] = []
    graces: list[GraceTotals] = []
    # each launch's phases, per pool and kind (launches answered in the window)
    time_to_run: list[TimeToRun] = []
    # stopped instances kept for the next resumes (pools with a warm_pool)
    warm_pools: list[WarmUsage] = []


def overlap_h(start: datetime, end: datetime | None, since: datetime, until: datetime) -> float:
    a, b = max(start, since), min(end or until, until)
    return max(0.0, (b - a).total_seconds() / 3600)


def paid_usage(row: CapacityReservationRow, instances: list[InstanceRow], since: datetime,
               until: datetime) -> PaidUsage:
    start, end = utc(row.start_at), utc(row.end_at)
    a = max(start, since) if start else since
    b = min(end, until) if end else until
    paid = used = 0.0
    if b > a:
        paid = row.total * (b - a).total_seconds() / 3600
        used = min(paid, sum(overlap_h(utc(i.launched_at), utc(i.terminated_at), a, b)
                             for i in instances))
    return PaidUsage(id=row.id, pool=row.pool, kind=row.kind, instance_type=row.instance_type,
                     state=row.state, total=row.total, available=row.available,
                     start=start.isoformat(timespec="seconds") if start else None,
                     end=end.isoformat(timespec="seconds") if end else None,
                     paid_node_hours=round(paid, 2), used_node_hours=round(used, 2),
                     idle_node_hours=round(paid - used, 2),
                     utilization=round(used / paid, 3) if paid else None)


def paid_now(store: Store, now: datetime) -> list[tuple[PaidUsage, str]]:
    """Each capacity reservation as the daemon last read it, with its period: a block since
    its start (to its end), an ODCR over the last 24 hours."""
    out = []
    for row in store.capacity_reservations():
        if row.kind == "capacity-block":
            since, until, period = utc(row.start_at) or now, min(now, utc(row.end_at) or now), \
                "since its start"
        else:
            since, until, period = now - timedelta(hours=24), now, "last 24h"
        out.append((paid_usage(row, store.reserved_instances(row.id, since), since, until),
                    period))
    return out


def _wait(size: str, waits: list[float]) -> Wait:
    return Wait(size=size, jobs=len(waits), p50_s=percentile(waits, 50),
                p95_s=percentile(waits, 95), max_s=max(waits) if waits else None)


def _cost(cfg: Config, inst: InstanceRow, hours: float, unpriced: set[str]) -> float | None:
    # EC2's lifecycle is "spot" or, for on-demand, "on-demand"/"normal"/absent
    ctype = (CapacityType.SPOT if inst.lifecycle == "spot"
             else CapacityType.CAPACITY_BLOCK if inst.lifecycle == "capacity-block"
             else CapacityType.ON_DEMAND)
    price = cfg.prices.get(inst.instance_type, {}).get(ctype)
    if price is None:
        unpriced.add(f"{inst.instance_type}/{ctype.value}")
        return None
    return hours * price


def _usage(cfg: Config, pool: str, ctype: str, insts: list[InstanceRow], jobs: list[JobRow],
           since: datetime, until: datetime, unpriced: set[str]) -> PoolUsage:
    gpn = {p.name: p.gpus_per_node for p in cfg.pools}
    node_h = gpu_h = 0.0
    cost: float | None = 0.0
    for i in insts:
        h = overlap_h(utc(i.launched_at), utc(i.terminated_at), since, until)
        node_h += h
        gpu_h += h * gpn.get(i.pool, 0)
        c = _cost(cfg, i, h, unpriced)
        cost = None if c is None or cost is None else cost + c
    busy = sum(overlap_h(utc(j.started_at), utc(j.ended_at), since, until)
               * j.num_nodes * j.gpus_per_node for j in jobs)
    return PoolUsage(pool=pool, capacity_type=ctype, instances=len({i.instance_id for i in insts}),
                     node_hours=round(node_h, 4), gpu_hours_provisioned=round(gpu_h, 4),
                     gpu_hours_busy=round(busy, 4),
                     gpu_hours_idle=round(max(0.0, gpu_h - busy), 4),
                     est_cost_usd=None if cost is None else round(cost, 2))


def graces(store: Store, since: datetime, until: datetime) -> list[GraceTotals]:
    """Per pool and cause, the graces begun in the window (a gang's job counted once per
    signal, not once per node)."""
    by: dict[tuple[str, str], dict[str, GraceRow]] = {}
    for g in store.graces(open_only=False):
        if since <= utc(g.signalled_at) < until:
            by.setdefault((g.pool, g.cause), {}).setdefault(g.job_id, g)
    out = []
    for (pool, cause), jobs in sorted(by.items()):
        rows = list(jobs.values())
        took = [(utc(g.ended_at) - utc(g.signalled_at)).total_seconds() for g in rows
                if g.ended_at is not None]
        out.append(GraceTotals(
            pool=pool, cause=cause, signalled=len(rows),
            left_in_grace=sum(g.state == GraceState.ENDED.value for g in rows),
            requeued=sum(g.state == GraceState.REQUEUED.value for g in rows),
            in_grace=sum(g.state == GraceState.SIGNALLED.value for g in rows),
            p50_grace_s=percentile(took, 50)))
    return out


def replacements(store: Store, insts: list[InstanceRow], since: datetime,
                 until: datetime) -> list[Replacements]:
    """Per pool and cause: how many, the time from detection to the pool's next instance,
    and the GPU-hours from detection to the bad instance's end."""
    rows = [r for r in store.replacements(since=since.timestamp())
            if utc(r.at) < until]
    launches: dict[str, list[datetime]] = {}
    ended = {}
    for i in insts:
        launches.setdefault(i.pool, []).append(utc(i.launched_at))
        ended[i.instance_id] = i.terminated_at
    out = []
    for (pool, cause), group in sorted(_group(rows).items()):
        done = [r for r in group if not r.left]
        fresh, lost = [], 0.0
        for r in done:
            seen = utc(r.detected_at)
            nxt = [t for t in launches.get(r.pool, []) if t > utc(r.at)]
            if nxt:
                fresh.append((min(nxt) - seen).total_seconds())
            end = ended.get(r.instance_id)
            stop = utc(end) if end is not None else until
            lost += r.gpus * max(0.0, (stop - seen).total_seconds()) / 3600
        out.append(Replacements(
            pool=pool, cause=cause, replaced=len(done), left_for_admin=len(group) - len(done),
            jobs_requeued=sum(r.jobs_requeued for r in done),
            p50_to_fresh_s=percentile(fresh, 50), lost_gpu_hours=round(lost, 4)))
    return out


def _group(rows: list[ReplacementRow]) -> dict[tuple[str, str], list[ReplacementRow]]:
    out: dict[tuple[str, str], list[ReplacementRow]] = {}
    for r in rows:
        out.setdefault((r.pool, r.cause), []).append(r)
    return out


def _runs(periods: list[InstancePeriodRow]) -> list[InstanceRow]:
    """A warm pool instance's earlier runs, as rows of their own (its row holds its current
    or last run): node hours and cost like any."""
    return [InstanceRow(instance_id=p.instance_id, node="", pool=p.pool, gang_id="",
                        instance_type=p.instance_type, lifecycle=p.lifecycle,
                        launch_template_version="", state=InstanceState.TERMINATED,
                        launched_at=utc(p.since), terminated_at=utc(p.until))
            for p in periods if p.state == InstanceState.RUNNING]


def warm_usage(cfg: Config, periods: list[InstancePeriodRow], since: datetime,
               until: datetime) -> list[WarmUsage]:
    """Per pool, the stopped instance-hours in [since, until) (`InstancePeriodRow`s)."""
    out = []
    for pool in sorted({p.pool for p in periods if p.state == InstanceState.WARM}):
        stops = [p for p in periods if p.pool == pool and p.state == InstanceState.WARM]
        hours = sum(overlap_h(utc(p.since), utc(p.until), since, until) for p in stops)
        wp = cfg.pool(pool).warm_pool if pool in {x.name for x in cfg.pools} else None
        price = wp.stopped_usd_per_hour if wp is not None else None
        out.append(WarmUsage(pool=pool, instances=len({p.instance_id for p in stops}),
                             stopped_hours=round(hours, 4),
                             est_volume_cost_usd=None if price is None
                             else round(hours * price, 2)))
    return out


def build_report(cfg: Config, store: Store, since: datetime, until: datetime) -> Report:
    periods = store.instance_periods(since, until)
    insts = store.instances_between(since, until) + _runs(periods)
    jobs = store.jobs(since, until)
    unpriced: set[str] = set()
    pools = [_usage(cfg, p.name, p.capacity_type.value,
                    [i for i in insts if i.pool == p.name],
                    [j for j in jobs if j.pool == p.name], since, until, unpriced)
             for p in cfg.pools]
    costs = [p.est_cost_usd for p in pools]
    totals = PoolUsage(
        pool="all", capacity_type="all", instances=sum(p.instances for p in pools),
        node_hours=round(sum(p.node_hours for p in pools), 4),
        gpu_hours_provisioned=round(sum(p.gpu_hours_provisioned for p in pools), 4),
        gpu_hours_busy=round(sum(p.gpu_hours_busy for p in pools), 4),
        gpu_hours_idle=round(sum(p.gpu_hours_idle for p in pools), 4),
        est_cost_usd=None if any(c is None for c in costs) else round(sum(
            c for c in costs if c is not None), 2))

    started = [j for j in jobs if since <= utc(j.started_at) < until]
    wait_of = {j.job_id: (utc(j.started_at) - utc(j.submitted_at)).total_seconds()
               for j in started}
    waits = [_wait(name, [wait_of[j.job_id] for j in started if lo <= j.num_nodes <= hi])
             for name, lo, hi in SIZE_BUCKETS]
    gang = _wait("gangs (2+ nodes)", [wait_of[j.job_id] for j in started if j.num_nodes >= 2])

    kinds = Counter(store.event_counts(since, until))
    gangs = store.gangs_between(since, until)
    errors = Counter((g.pool, g.error_code or "unknown") for g in gangs if g.status == "failed")
    holds = [h for h in store.holds() if h.created_s < until.timestamp()
             and (h.released_s is None or h.released_s >= since.timestamp())]
    anomalies = store.events(since, 20, until=until, kinds=ANOMALY_KINDS)
    return Report(
        time_to_run=summarize(r for r in store.launch_phases(since_s=since.timestamp())
                              if r.answered_s is not None
                              and r.answered_s < until.timestamp()),
        cluster=cfg.cluster_name, since=since.isoformat(timespec="seconds"),
        until=until.isoformat(timespec="seconds"), pools=pools, totals=totals, waits=waits,
        gang_time_to_start=gang,
        preemptions=sum(1 for p in store.preemptions(since=since.timestamp())
                        if utc(p.at) < until
                        and p.cause not in NOT_PREEMPTED),
        requeues=sum(kinds[k] for k in REQUEUE_KINDS),
        launches=sum(1 for g in gangs if g.status == "launched"),
        launch_failures=sum(1 for g in gangs if g.status == "failed"),
        capacity_errors=[CapacityError(pool=p, code=c, gangs=n)
                         for (p, c), n in sorted(errors.items())],
        fallbacks={k: kinds[k] for k in FALLBACK_KINDS},
        reservations=[HoldSummary(name=h.name, pool=h.pool, job_id=h.job_id, needed=h.needed,
                                  state=h.state, idle_gpu_hours=round(h.spent_gpu_s / 3600, 4))
                      for h in holds],
        reservation_idle_gpu_hours=round(sum(h.spent_gpu_s for h in holds) / 3600, 4),
        scale_actions={k: kinds[k] for k in SCALE_KINDS},
        anomalies={k: kinds[k] for k in ANOMALY_KINDS},
        recent_anomalies=[Anomaly(at=utc(e.at).isoformat(timespec="seconds"),
                                  kind=e.kind, message=e.message) for e in anomalies],
        unpriced=sorted(unpriced),
        paid_capacity=[paid_usage(r, store.reserved_instances(r.id, since), since, until)
                       for r in store.capacity_reservations()],
        replacements=replacements(store, insts, since, until),
        graces=graces(store, since, until), warm_pools=warm_usage(cfg, periods, since, until))


def nodes_up_steps(instances: Sequence[InstanceRow], start: datetime, end: datetime
                   ) -> dict[str, tuple[list[float], list[float]]]:
    """Per pool, its nodes up as a step function over [start, end): (times, count from each
    on), from the instances' own launch and termination times, not the minute samples, so a
    burst of any length shows: the count at `start`, then one step per launch or end."""
    t0, t1 = start.timestamp(), end.timestamp()
    moves: dict[str, list[tuple[float, int]]] = {}
    for i in instances:
        up = utc(i.launched_at).timestamp()
        down = utc(i.terminated_at).timestamp() if i.terminated_at is not None else math.inf
        if up >= t1 or down < t0:
            continue
        moves.setdefault(i.pool, []).extend([(max(up, t0), 1), (down, -1)])
    out: dict[str, tuple[list[float], list[float]]] = {}
    for pool, ms in moves.items():
        ms.sort()
        times, values, n = [t0], [0.0], 0
        for t, d in ms:
            n += d
            if t >= t1:
                break
            if t == times[-1]:
                values[-1] = float(n)
            else:
                times.append(t)
                values.append(float(n))
        out[pool] = (times, values)
    return out
