"""Benchmark: simulator speed on the 14-day ITP window (5,922 jobs + carry-in), per policy,
as a ratio to the `static` policy (no scaling decisions) measured in the same run, and the
Slurm model's time as a ratio to the greedy model's on the same policy.

    .venv/bin/python -m tests.benchmarks.simulate_itp [MAX_NODES]

Targets: under 30 s per policy on a 2-core machine (issue 3); the Slurm model at most 2x the
greedy model per policy (issue 15).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from slurmscale.policy.model import PoolKnobs
from slurmscale.sim.engine import SimCloud, SpotModel, simulate
from slurmscale.sim.policies import POLICY_NAMES, builtin_policy
from slurmscale.sim.slurm_model import SchedulerKind, SlurmModel
from slurmscale.sim.trace import load_trace

D = Path(__file__).resolve().parents[1] / "data" / "traces"


def main() -> None:
    max_nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 80
    jobs = sorted(load_trace(D / "itp_cluster04_14d.csv")
                  + load_trace(D / "itp_cluster04_14d_carryin.csv", carry_in=True),
                  key=lambda j: (j.submit_s, j.job_id))
    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=max_nodes)
    times = {}
    greedy = {}
    for name in ("static", *[p for p in POLICY_NAMES if p != "static"]):
        t0 = time.perf_counter()
        simulate(jobs, builtin_policy(name, knobs), SimCloud(),
                 slurm=SlurmModel(SchedulerKind.GREEDY))
        greedy[name] = time.perf_counter() - t0
        t0 = time.perf_counter()
        simulate(jobs, builtin_policy(name, knobs), SimCloud())
        times[name] = time.perf_counter() - t0
    # the spot model: an on-demand fallback pool as large again, interruptions, a storm,
    # the 20 % buffer
    spot = SpotModel(on_demand_nodes=max_nodes, buffer=0.2, interruption_rate=0.002,
                     storm_at_s=604800.0, storm_fraction=0.5)
    t0 = time.perf_counter()
    simulate(jobs, builtin_policy("slurmscale", knobs), SimCloud(spot_price_per_node_hour=40.0),
             spot)
    times["slurmscale+spot"] = time.perf_counter() - t0
    base = times["static"]
    print(f"ITP 14 d, {len(jobs)} jobs, max {max_nodes} nodes")
    for name, t in times.items():
        vs = f"  {t / greedy[name]:5.2f}x greedy ({greedy[name]:.2f} s)" if name in greedy else ""
        print(f"  {name:<20} {t:6.2f} s  {t / base:5.2f}x static{vs}")


if __name__ == "__main__":
    main()
