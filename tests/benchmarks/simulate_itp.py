"""Benchmark: simulator speed on the 14-day ITP window (5,922 jobs + carry-in), per policy,
as a ratio to the `static` policy (no scaling decisions) measured in the same run.

    .venv/bin/python -m tests.benchmarks.simulate_itp [MAX_NODES]

Target from the issue: under 30 s per policy on a 2-core machine.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from slurmscale.policy.model import PoolKnobs
from slurmscale.sim.engine import SimCloud, SpotModel, simulate
from slurmscale.sim.policies import POLICY_NAMES, builtin_policy
from slurmscale.sim.trace import load_trace

D = Path(__file__).resolve().parents[1] / "data" / "traces"


def main() -> None:
    max_nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 80
    jobs = sorted(load_trace(D / "itp_cluster04_14d.csv")
                  + load_trace(D / "itp_cluster04_14d_carryin.csv", carry_in=True),
                  key=lambda j: (j.submit_s, j.job_id))
    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=max_nodes)
    times = {}
    for name in ("static", *[p for p in POLICY_NAMES if p != "static"]):
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
        print(f"  {name:<20} {t:6.2f} s  {t / base:5.2f}x static")


if __name__ == "__main__":
    main()
