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


def quantile(values: list[float], q: float, clamp: Callable[[float], float] = float) -> float:
    """The `q` quantile of `values` (not empty) by linear interpolation between order
    statistics (numpy's default), so that a median of two is their mean; with `clamp` (a
    non-decreasing map) that of the clamped values: only the two order statistics used are
    clamped, as sorting the rest gives the same order (the daemon learns over every job
    that ended in the window)."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    a, b = clamp(xs[lo]), clamp(xs[hi])
    return a + (b - a) * (pos - lo)


def learn(shares: list[float], how: Learning) -> LimitUse:
    """The share from `shares` (each ended job's run time over its time limit)."""
    if len(shares) < how.min_jobs or not shares:
        return LimitUse(UNLEARNED, len(shares), "unlearned")
    v = quantile(shares, how.quantile, _unit)
    return LimitUse(min(how.ceiling, max(how.floor, v)), len(shares), "learned")


def per_pool(setting: float | Literal["auto"], pools: Iterable[str],
             runs: Iterable[tuple[str, float, float]], how: Learning) -> dict[str, LimitUse]:
    """Each pool's share: `setting` where the admin fixed one, else learned from `runs`
    ((pool, run seconds, time limit seconds) of the jobs that ended within the window)."""
    names = list(pools)
    if setting != "auto":
        return {p: LimitUse(float(setting), 0, "fixed") for p in names}
    shares: dict[str, list[float]] = {p: [] for p in names}
    for pool, run_s, limit_s in runs:
        if pool in shares and limit_s > 0:
            shares[pool].append(run_s / limit_s)
    return {p: learn(s, how) for p, s in shares.items()}
