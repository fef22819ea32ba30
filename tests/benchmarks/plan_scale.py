"""Benchmark: one policy decision (`decide` and `plan_holds`: what `slurmscale plan` and every
daemon pass run) on a synthetic snapshot of 50,000 pending jobs and 5,000 nodes, against a
baseline measured in the same run: sorting those jobs by priority once, the least any planner
must do.

    .venv/bin/python -m tests.benchmarks.plan_scale [JOBS] [NODES]

Target from the issue: under 1 s. The snapshot is seeded, so every run plans the same state.
"""

from __future__ import annotations

import random
import sys
import time

from slurmscale.policy.decide import decide
from slurmscale.policy.model import (
    Mode,
    NodeState,
    NodeView,
    PendingJob,
    PoolKnobs,
    PoolMemory,
    Snapshot,
)
from slurmscale.policy.reservations import GangJob, ReservationKnobs, plan_holds

POOLS = 10


def snapshot(n_jobs: int, n_nodes: int, seed: int = 7) -> Snapshot:
    rng = random.Random(seed)
    now = 1_000_000.0
    per_pool = n_nodes // POOLS
    pools = tuple(PoolKnobs(name=f"p{i}", gpus_per_node=8, max_nodes=per_pool,
                            mode=Mode.GOVERNED if i % 2 else Mode.IMMEDIATE)
                  for i in range(POOLS))
    states = [NodeState.ALLOCATED] * 6 + [NodeState.IDLE] * 2 + [NodeState.POWERED_DOWN,
                                                                 NodeState.BOOTING]
    nodes = []
    for p in pools:
        for i in range(1, per_pool + 1):
            st = rng.choice(states)
            nodes.append(NodeView(f"{p.name}-{i}", p.name, st,
                                  now - rng.uniform(0, 1200) if st is NodeState.IDLE else None,
                                  held=st is NodeState.POWERED_DOWN and rng.random() < 0.5))
    jobs = tuple(PendingJob(
        job_id=str(100_000 + j), pool=f"p{rng.randrange(POOLS)}",
        nodes=rng.choice([1] * 20 + [2, 4, 8, 16, 64]), gpus_per_node=8,
        time_limit_s=rng.choice([None, 3600.0, 4 * 3600.0, 86400.0]),
        submit_s=now - rng.uniform(0, 86400), priority=rng.randrange(1, 100_000),
        actionable=rng.random() < 0.9) for j in range(n_jobs))
    arrivals = tuple(sorted((j.submit_s, j.pool, j.nodes) for j in jobs))
    memory = {p.name: PoolMemory(per_pool // 2) for p in pools}
    return Snapshot(now, pools, tuple(nodes), jobs, memory, arrivals)


def best_of(n: int, fn) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    n_jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    n_nodes = int(sys.argv[2]) if len(sys.argv) > 2 else 5_000
    snap = snapshot(n_jobs, n_nodes)
    plan = decide(snap)
    base = best_of(5, lambda: sorted(snap.jobs, key=lambda j: (-j.priority, j.submit_s)))
    t = best_of(5, lambda: decide(snap))
    gangs = tuple(GangJob(j.job_id, j.pool, j.nodes, j.gpus_per_node, j.submit_s, j.priority,
                          "u") for j in snap.jobs if j.nodes >= 2)
    knobs = ReservationKnobs()
    gpus = {p.name: p.gpus_per_node for p in snap.pools}
    maxn = {p.name: p.max_nodes for p in snap.pools}
    t_holds = best_of(5, lambda: plan_holds(knobs, gpus, maxn, snap.nodes, gangs, (),
                                            frozenset(), snap.now))
    small = snapshot(n_jobs // 10, n_nodes // 10)
    t_small = best_of(5, lambda: decide(small))
    print(f"decide: {n_jobs:,} pending jobs, {n_nodes:,} nodes, {POOLS} pools "
          f"({len(plan.actions)} actions planned)")
    print(f"  baseline (sort jobs by priority) {base * 1000:8.1f} ms")
    print(f"  decide                           {t * 1000:8.1f} ms  {t / base:5.1f}x baseline"
          f"  {'OK' if t < 1.0 else 'OVER'} (target < 1 s)")
    print(f"  + reservations (plan_holds, {len(gangs):,} gangs) {t_holds * 1000:6.1f} ms  "
          f"whole plan {(t + t_holds) * 1000:.1f} ms  "
          f"{'OK' if t + t_holds < 1.0 else 'OVER'} (target < 1 s)")
    print(f"  decide at 1/10 the size          {t_small * 1000:8.1f} ms  "
          f"(x{t / t_small:.1f} for 10x the state)")


if __name__ == "__main__":
    main()
