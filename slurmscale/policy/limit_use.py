"""What share of its time limit a job here really runs, learned from the jobs that ended.

The hold rule (policy/reservations.py, `hold_verdict`) takes a hold only where the nodes it
drains should free within `max_hold_s`, and reckons when they free as this share of their
running jobs' remaining limits. At 1.0 (limits run out) and limits looser than run times, as
on every real cluster, almost no hold passes that test; a share the admin guesses is a share
nobody checks. So by default (`reservations.limit_use: auto`) it is learned per pool (one
pool is one Slurm partition) from the jobs the daemon recorded: run time over time limit, a
stated quantile of the jobs that ended within a stated window, clamped to a floor and a
ceiling, and the fixed value until enough jobs are seen. The median by default: half the
jobs here have ended by that share of their limit, so a hold's nodes are reckoned free when
the typical job would free them, not the longest.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

# "auto" before enough jobs were seen (and the old default): the limits run out
UNLEARNED = 1.0


@dataclass(frozen=True)
class Learning:
    """How `limit_use: auto` is learned (the config's reservations.limit_use_auto)."""

    quantile: float = 0.5
    window_s: float = 14 * 86400.0
    min_jobs: int = 50
    floor: float = 0.1
    ceiling: float = 1.0
    # learned again this often (a window of days moves little in ten minutes; the read is
    # one indexed query)
    every_s: float = 600.0


@dataclass(frozen=True)
class LimitUse:
    """The share used for one pool, and what it rests on."""

    value: float
    jobs: int  # the ended jobs with a time limit it was learned from (0: none counted)
    source: Literal["learned", "unlearned", "fixed"]

    def describe(self) -> str:
        match self.source:
            case "learned":
                return f"{self.value:.2f} learned from {self.jobs} job(s)"
            case "unlearned":
                return f"{self.value:g} until enough jobs are seen ({self.jobs} so far)"
            case _:
                return f"{self.value:g} (set in the config)"


def _unit(x: float) -> float:
    return min(1.0, max(0.0, x))


def quantile(values: list[float], q: float, clamp: Callable[[float], float] = float,
             presorted: bool = False) -> float:
    """The `q` quantile of `values` (not empty) by linear interpolation between order
    statistics (numpy's default), so that a median of two is their mean; with `clamp` (a
    non-decreasing map) that of the clamped values: only the two order statistics used are
    clamped, as sorting the rest gives the same order (the daemon learns over every job
    that ended in the window). `presorted`: `values` are in order already (Shares keeps
    them so)."""
    xs = values if presorted else sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    a, b = clamp(xs[lo]), clamp(xs[hi])
    return a + (b - a) * (pos - lo)


def learn(shares: list[float], how: Learning, presorted: bool = False) -> LimitUse:
    """The share from `shares` (each ended job's run time over its time limit; `presorted`:
    in order already)."""
    if len(shares) < how.min_jobs or not shares:
        return LimitUse(UNLEARNED, len(shares), "unlearned")
    v = quantile(shares, how.quantile, _unit, presorted)
    return LimitUse(min(how.ceiling, max(how.floor, v)), len(shares), "learned")


def fixed(setting: float, pools: Iterable[str]) -> dict[str, LimitUse]:
    """Each pool's share where the admin fixed one (`reservations.limit_use` a number)."""
    return {p: LimitUse(float(setting), 0, "fixed") for p in pools}


class Shares:
    """The shares of the jobs that ended within the window, kept between reads: the daemon
    learns again every ten minutes over a window of days, so each read adds only the jobs
    that ended since the last (`add` ignores one it has) and `drop_before` lets go of those
    the window has passed. A job without a time limit is not counted."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._by_end: list[tuple[float, str, str, float]] = []  # heap: end, job, pool, share
        self._pools: dict[str, list[float]] = {}  # pool -> its shares, sorted

    def add(self, job_id: str, ended_s: float, pool: str, run_s: float,
            limit_s: float) -> None:
        if job_id in self._seen or limit_s <= 0:
            return
        share = run_s / limit_s
        self._seen.add(job_id)
        heapq.heappush(self._by_end, (ended_s, job_id, pool, share))
        bisect.insort(self._pools.setdefault(pool, []), share)

    def drop_before(self, since: float) -> None:
        """Forget the jobs that ended before `since` (the window's start)."""
        while self._by_end and self._by_end[0][0] < since:
            _, job_id, pool, share = heapq.heappop(self._by_end)
            self._seen.discard(job_id)
            shares = self._pools[pool]
            del shares[bisect.bisect_left(shares, share)]

    def learned(self, pools: Iterable[str], how: Learning) -> dict[str, LimitUse]:
        return {p: learn(self._pools.get(p, []), how, presorted=True) for p in pools}

    def add_all(self, runs: Iterable[tuple[str, float, str, float, float]]) -> None:
        """`add` each of `runs` (job, end, pool, run time, limit), those it has passed over
        without a call (a read re-reads the last day's: most of them it has)."""
        seen, add = self._seen, self.add
        for run in runs:
            if run[0] not in seen:
                add(*run)
