"""How the simulated Slurm orders and starts jobs: Slurm's own rules, written down once.

Two models, chosen with `simulate --slurm-model`:
- `slurm` (default): what sched/backfill with priority/multifactor does.
  * Priority (PriorityType=priority/multifactor): a weighted sum of factors in [0, 1] -
    age (time eligible, capped at PriorityMaxAge), job size (the mean of its share of the
    cluster's nodes and CPUs, as Slurm computes it; PriorityFavorSmall inverts it) and
    fair-share (classic: 2^(-usage/shares), usage
    decayed with PriorityDecayHalfLife, every user seen an equal share). A trace's
    `priority` column is an admin-set priority: it replaces the sum for that job. Priorities
    are recomputed every PriorityCalcPeriod; a new job gets its own at submission.
  * Main scheduler (event-triggered, as Slurm's: an event queues a run that slurmctld's
    background loop serves at its next wake-up, once a second, and no sooner than
    batch_sched_delay after its last run): jobs in priority order; once a job cannot start
    in a partition, no lower-priority job starts in that partition.
  * Backfill (every bf_interval): jobs in priority order, at most bf_max_job_test of them; a
    job that can start now without touching resources planned for a higher-priority job
    starts; one that cannot gets resources planned at its earliest start, found from the
    running jobs' TIME LIMITS (not their real run times, which Slurm does not know), within
    bf_window. Powered-down nodes a job may power up count as free, as in Slurm.
- `greedy` (the model before issue 15, kept to compare): jobs in submit order, any job that
  fits starts, no time limits, a job starts the moment its last node is up.
- In the slurm model a job on nodes that power up starts at slurmctld's next periodic check
  (every 30 s) after its last node is up, as Slurm does; the nodes are its from the
  allocation on.

Time limits: a trace's `time_limit_s` column, else `time_limit_factor` x the run time (users
over-estimate: factor 3 is the default), or none (`--no-time-limits`: Slurm with infinite
limits, seen by backfill as a year, which is what Slurm uses for INFINITE). A job whose limit is
shorter than its run time is killed at the limit (TIMEOUT), as Slurm does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum

YEAR_S = 365 * 86400.0  # what Slurm's backfill takes an INFINITE time limit to be


class SchedulerKind(StrEnum):
    SLURM = "slurm"
    GREEDY = "greedy"


@dataclass(frozen=True)
class SlurmModel:
    """The Slurm settings the model honours, named as in slurm.conf (times in seconds)."""

    kind: SchedulerKind = SchedulerKind.SLURM
    bf_interval: float = 30.0
    bf_window: float = 86400.0  # slurm.conf gives minutes (1440); here seconds
    bf_max_job_test: int = 500
    priority_weight_age: float = 1000.0
    priority_weight_job_size: float = 1000.0
    priority_weight_fairshare: float = 10000.0
    priority_max_age: float = 7 * 86400.0
    priority_decay_half_life: float = 7 * 86400.0
    priority_calc_period: float = 300.0
    priority_favor_small: bool = False
    time_limit_factor: float = 3.0
    time_limits: bool = True
    # slurmctld finishes a job's configuration (its powered-up nodes have all registered) in a
    # periodic check every 30 s (PERIODIC_TIMEOUT, 22.05 and 24.11 alike): the job starts at
    # the first check after its last node is up. The phase is where the checks fall (a replay
    # reads it from slurmctld's log).
    power_up_check: float = 30.0
    power_up_check_phase: float = 0.0
    # An event (a submission, a job's end, a node up, an update) does not run the main
    # scheduler there and then: it queues a request that slurmctld's background loop, waking
    # once a second, serves when batch_sched_delay (SchedulerParameters, default 3 s) has
    # passed since the loop's last run (slurmctld's controller.c; seen on 22.05). A second is
    # nothing to a trace at 1x, but a replay at 200x sees it as 200 trace seconds per start.
    sched_tick: float = 1.0
    batch_sched_delay: float = 3.0

    def main_run(self, now: float, last_run: float) -> float:
        """When the main scheduler serves a request queued at `now`, its last run at
        `last_run`: the background loop's first wake-up at or after both `now` and
        `last_run + batch_sched_delay`."""
        due = max(now, last_run + self.batch_sched_delay)
        if self.sched_tick <= 0:
            return due
        return math.ceil(due / self.sched_tick - 1e-9) * self.sched_tick

    def configured(self, ready: float) -> float:
        """When a job whose last node is up at `ready` starts."""
        if self.power_up_check <= 0:
            return ready
        k = math.ceil((ready - self.power_up_check_phase) / self.power_up_check)
        return self.power_up_check_phase + k * self.power_up_check

    def limit(self, duration_s: float, trace_limit_s: float | None) -> float:
        """A job's time limit as backfill sees it."""
        if trace_limit_s is not None:
            return trace_limit_s
        if not self.time_limits:
            return YEAR_S
        return max(60.0, self.time_limit_factor * duration_s)


# slurm.conf-style names accepted by `simulate --slurm-param NAME=VALUE`
PARAMS: dict[str, str] = {
    "bf_interval": "bf_interval",
    "bf_window": "bf_window",
    "bf_max_job_test": "bf_max_job_test",
    "PriorityWeightAge": "priority_weight_age",
    "PriorityWeightJobSize": "priority_weight_job_size",
    "PriorityWeightFairshare": "priority_weight_fairshare",
    "PriorityMaxAge": "priority_max_age",
    "PriorityDecayHalfLife": "priority_decay_half_life",
    "PriorityCalcPeriod": "priority_calc_period",
    "PriorityFavorSmall": "priority_favor_small",
    "power_up_check": "power_up_check",
    "power_up_check_phase": "power_up_check_phase",
    "sched_tick": "sched_tick",
    "batch_sched_delay": "batch_sched_delay",
}


def parse_params(model: SlurmModel, args: tuple[str, ...]) -> SlurmModel:
    """`NAME=VALUE` pairs onto a model; ValueError names the bad pair."""
    changes: dict[str, object] = {}
    for arg in args:
        name, sep, value = arg.partition("=")
        attr = PARAMS.get(name)
        if not sep or attr is None:
            raise ValueError(f"{arg!r}: expected NAME=VALUE with NAME one of "
                             f"{', '.join(PARAMS)}")
        if attr == "priority_favor_small":
            if value.lower() not in ("yes", "no"):
                raise ValueError(f"{arg!r}: PriorityFavorSmall is YES or NO")
            changes[attr] = value.lower() == "yes"
            continue
        try:
            number = int(value) if attr == "bf_max_job_test" else float(value)
        except ValueError:
            raise ValueError(f"{arg!r}: {value!r} is not a number") from None
        if not math.isfinite(number) or number < (1 if attr.startswith("bf_") else 0):
            raise ValueError(f"{arg!r}: must be a finite number"
                             + (" >= 1" if attr.startswith("bf_") else " >= 0"))
        changes[attr] = number
    return replace(model, **changes)  # type: ignore[arg-type]


@dataclass
class FairShare:
    """Classic fair-share: each user seen has an equal share; usage (GPU-seconds) decays with
    the half-life. factor = 2^(-(usage share) / (share))."""

    half_life_s: float
    usage: dict[str, float] = field(default_factory=dict)
    at: float = 0.0
    # each user's factor while the usage stands (a priority calculation asks for every
    # pending job's, each a sum over every user)
    _factors: dict[str, float] = field(default_factory=dict, repr=False, compare=False)

    def see(self, user: str) -> None:
        if user not in self.usage:
            self.usage[user] = 0.0
            self._factors.clear()

    def accrue(self, now: float, running: dict[str, float]) -> None:
        """Decay everything to `now`, then add what ran since: `running` is GPUs per user."""
        dt = now - self.at
        if dt <= 0:
            return
        if self.half_life_s > 0:
            keep = 0.5 ** (dt / self.half_life_s)
            for u in self.usage:
                self.usage[u] *= keep
        for u, gpus in running.items():
            self.usage[u] = self.usage.get(u, 0.0) + gpus * dt
        self.at = now
        self._factors.clear()

    def factor(self, user: str) -> float:
        f = self._factors.get(user)
        if f is None:
            total = sum(self.usage.values())
            if total <= 0 or not self.usage:
                f = 1.0
            else:
                shares = 1.0 / len(self.usage)
                f = 2.0 ** (-(self.usage.get(user, 0.0) / total) / shares)
            self._factors[user] = f
        return f


def factors(m: SlurmModel, age_s: float, size: float, fairshare: float
            ) -> tuple[float, float, float]:
    """priority/multifactor's weighted factors as `sprio` prints them: age, job size,
    fair-share (QOS, partition and TRES weights are 0 here); `size` from size_share()."""
    age = min(1.0, max(0.0, age_s) / m.priority_max_age) if m.priority_max_age > 0 else 1.0
    if m.priority_favor_small:
        size = 1.0 - size
    return (m.priority_weight_age * age, m.priority_weight_job_size * size,
            m.priority_weight_fairshare * fairshare)


def priority(m: SlurmModel, age_s: float, size: float, fairshare: float) -> float:
    """priority/multifactor's sum of the weighted factors."""
    return sum(factors(m, age_s, size, fairshare))


def size_share(nodes: int, gpus: int, cluster_nodes: int, gpus_per_node: int) -> float:
    """The job size factor as Slurm computes it: the mean of the job's share of the cluster's
    nodes and of its CPUs, a GPU job's CPUs taken in proportion to its GPUs (one CPU per GPU,
    as DefCpuPerGPU=1 gives)."""
    return min(1.0, (nodes / max(1, cluster_nodes)
                     + gpus / max(1, cluster_nodes * gpus_per_node)) / 2)


# --- backfill's plan -------------------------------------------------------------------------
class NodePlan:
    """What one node has running and planned, from the backfill cycle's `now` on, as runs of
    free GPUs (cached per GPU count: most plans touch one node, the others keep theirs)."""

    __slots__ = ("capacity", "now", "busy", "_runs")

    def __init__(self, capacity: int, now: float) -> None:
        self.capacity = capacity
        self.now = now
        self.busy: list[tuple[float, float, int]] = []  # start, end (by limit), GPUs
        self._runs: dict[int, list[tuple[float, float]]] = {}

    def add(self, start: float, end: float, gpus: int) -> None:
        self.busy.append((max(start, self.now), end, gpus))
        self._runs.clear()

    def runs(self, gpus: int) -> list[tuple[float, float]]:
        """The maximal spans [lo, hi) from now on with at least `gpus` GPUs free."""
        got = self._runs.get(gpus)
        if got is None:
            got = self._runs[gpus] = self._free_runs(gpus)
        return got

    def _free_runs(self, gpus: int) -> list[tuple[float, float]]:
        if len(self.busy) == 1:  # (most: a node running one job, nothing planned on it yet)
            s, e, g = self.busy[0]
            if e > s:
                if self.capacity - g >= gpus:
                    return [(self.now, math.inf)]
                if self.capacity < gpus:
                    return []
                return [(self.now, s), (e, math.inf)] if s > self.now else [(e, math.inf)]
        return self._sweep_runs(gpus)

    def _sweep_runs(self, gpus: int) -> list[tuple[float, float]]:
        # (a sweep over the starts and ends: GPUs in use change only there; a plan of a deep
        # queue puts tens of jobs on a node, and a sum over them at every time was the hot
        # spot of a backfill cycle)
        change: dict[float, int] = {self.now: 0}
        for s, e, g in self.busy:
            if e > s:  # (s is never before now)
                change[s] = change.get(s, 0) + g
                change[e] = change.get(e, 0) - g
        times = sorted(change)
        out: list[tuple[float, float]] = []
        used = 0
        for i, t in enumerate(times):
            used += change[t]
            if self.capacity - used < gpus:
                continue
            end = times[i + 1] if i + 1 < len(times) else math.inf
            if out and out[-1][1] == t:
                out[-1] = (out[-1][0], end)
            else:
                out.append((t, end))
        return out

    def fits_now(self, gpus: int, limit: float) -> bool:
        """Are `gpus` GPUs free from now for `limit`?"""
        r = self.runs(gpus)
        return bool(r) and r[0][0] == self.now and r[0][1] >= self.now + limit

    def windows(self, gpus: int, limit: float, horizon: float) -> list[tuple[float, float]]:
        """The start times [lo, hi] in [now, horizon] with `gpus` GPUs free for `limit`."""
        return [(lo, min(hi - limit, horizon)) for lo, hi in self.runs(gpus)
                if hi - lo >= limit and lo <= horizon]


def gang_start(windows: list[list[tuple[float, float]]], count: int
               ) -> tuple[float, list[int]] | None:
    """The earliest time at least `count` nodes can all start, and which (indexes into
    `windows`, one list of start windows per node)."""
    events = sorted((t, kind, i) for i, ws in enumerate(windows)
                    for lo, hi in ws for t, kind in ((lo, 0), (hi, 1)))
    active: dict[int, None] = {}
    for t, kind, i in events:
        if kind == 0:
            active[i] = None
            if len(active) >= count:
                return t, list(active)[:count]
        else:
            active.pop(i, None)
    return None
