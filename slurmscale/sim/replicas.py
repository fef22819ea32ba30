"""Figures that survive perturbation: one simulation is chaotic (a second's change of one
boot moves which node a gang gets, and from there every start after), so a comparison made
from one run each cannot tell an effect from a butterfly. `simulate --replicas K --jitter S`
runs K copies of the trace, each job's submit time moved later by up to S seconds (seeded:
replica r draws from seed + r), every policy on every copy, and reports each figure's median
and range over the copies; ratios between policies (to the oracle) are taken within each copy
and then summarised. Copies run in parallel processes, one per core.
"""

from __future__ import annotations

import os
import random
import statistics
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from typing import Any

from slurmscale.policy.model import PoolKnobs
from slurmscale.policy.reservations import ReservationKnobs
from slurmscale.sim.engine import (
    FailureModel,
    PaidCapacity,
    SimCloud,
    SimResult,
    SpotModel,
    simulate,
)
from slurmscale.sim.policies import builtin_policy
from slurmscale.sim.report import against_oracle, metrics
from slurmscale.sim.slurm_model import SlurmModel
from slurmscale.sim.trace import TraceJob

Figures = dict[str, dict[str, Any]]  # policy -> its figures (sim/report.py's metrics)


@dataclass(frozen=True)
class Settings:
    """What every policy's run is given: built once from `simulate`'s options (plain frozen
    values, so a copy can be handed to another process)."""

    policies: tuple[str, ...]
    knobs: PoolKnobs
    holds: ReservationKnobs | None
    cloud: SimCloud
    spot: SpotModel | None = None
    paid: PaidCapacity | None = None
    model: SlurmModel | None = None
    failures: FailureModel | None = None


def jittered(jobs: list[TraceJob], jitter_s: float, seed: int) -> list[TraceJob]:
    """The trace with each job submitted later by up to `jitter_s` (uniform, seeded); jobs
    running when the trace starts (carry-in) stay where they are."""
    if jitter_s <= 0:
        return jobs
    rng = random.Random(seed)
    moved = [j if j.carry_in else replace(j, submit_s=j.submit_s + rng.uniform(0, jitter_s))
             for j in jobs]
    return sorted(moved, key=lambda j: (j.submit_s, j.job_id))


def run_all(jobs: list[TraceJob], s: Settings, keep: list[SimResult] | None = None,
            progress: Callable[[str], Callable[[float], None]] | None = None) -> Figures:
    """Every policy on one copy of the trace; with the oracle among them (and no spot or paid
    capacity), each one's ratios to it. `keep`: where to put the runs themselves (a plot);
    `progress`: a policy's name -> what its run tells the simulated time."""
    out = {}
    for name in s.policies:
        r = simulate(jobs, builtin_policy(name, s.knobs, s.holds), s.cloud, s.spot, s.paid,
                     s.model, s.failures, progress(name) if progress else None)
        out[r.policy] = metrics(r, s.cloud)
        if keep is not None:
            keep.append(r)
    if s.spot is None and s.paid is None:  # (the oracle's offline figures are on-demand)
        against_oracle(out)
    return out


def _one(args: tuple[list[TraceJob], Settings, float, int]) -> Figures:
    jobs, s, jitter_s, seed = args
    return run_all(jittered(jobs, jitter_s, seed), s)


def run_replicas(jobs: list[TraceJob], s: Settings, k: int, jitter_s: float,
                 seed: int, done: Callable[[int], None] | None = None) -> list[Figures]:
    """K copies (replica r jittered with seed + r), in parallel processes, in seed order;
    `done`: told how many have ended, as each does."""
    work = [(jobs, s, jitter_s, seed + r) for r in range(k)]
    workers = min(k, os.cpu_count() or 1)
    out: list[Figures] = []
    if workers <= 1:
        for w in work:
            out.append(_one(w))
            if done is not None:
                done(len(out))
        return out
    with ProcessPoolExecutor(workers) as pool:
        futures = [pool.submit(_one, w) for w in work]
        for n, _ in enumerate(as_completed(futures), 1):
            if done is not None:
                done(n)
        return [f.result() for f in futures]


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def numeric(replica: Figures) -> dict[str, dict[str, float]]:
    """One replica's numeric figures per policy (no lists, no empty waits)."""
    return {name: {k: v for k, v in figs.items() if _is_number(v)}
            for name, figs in replica.items()}


def summarise(replicas: list[Figures]) -> dict[str, dict[str, dict[str, float]]]:
    """Per policy, each numeric figure's median, min and max over the replicas (a figure with
    no value in some replica, e.g. a wait with no gang, over those that have one)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name in replicas[0]:
        figs: dict[str, dict[str, float]] = {}
        for key, first in replicas[0][name].items():
            if isinstance(first, list):
                continue
            xs = [r[name][key] for r in replicas if _is_number(r[name].get(key))]
            if xs:
                figs[key] = {"median": round(statistics.median(xs), 3), "min": min(xs),
                             "max": max(xs)}
        out[name] = figs
    return out
