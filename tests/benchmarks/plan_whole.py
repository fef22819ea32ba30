"""Benchmark: the WHOLE `slurmscale plan --json` process (start-up, imports, config, store,
every Slurm read and its parse, the snapshot, the decision, the JSON) at 50,000 pending and
3,000 running jobs on 5,000 nodes in 10 pools, Slurm's output canned on the config's bin_dir
(tests/benchmarks/canned_slurm.py), fresh processes, medians. In the same run, as baselines:
a bare `python -c pass`, and the canned Slurm commands themselves run as `plan` runs them
(what no slurmscale could avoid).

    .venv/bin/python -m tests.benchmarks.plan_whole [PENDING] [NODES] [RUNS]

Target from issue 17: under 1 s wall.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.benchmarks import canned_slurm
from tests.benchmarks.canned_slurm import install


def timed(cmd: list[str], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    n_pending = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    n_nodes = int(sys.argv[2]) if len(sys.argv) > 2 else 5_000
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    root = Path(tempfile.mkdtemp(prefix="ss-bench-"))
    try:
        bin_dir = install(root, n_pending, 3_000, n_nodes, time.time())
        cfg = root / "c.yaml"
        cfg.write_text(yaml.safe_dump(canned_slurm.config(root, bin_dir, n_nodes)))
        cli = [sys.executable, "-m", "slurmscale", "--config", str(cfg)]
        subprocess.run([*cli, "db", "upgrade"], check=True, stdout=subprocess.DEVNULL)
        plan = [*cli, "plan", "--json"]
        out = json.loads(subprocess.run(plan, check=True, capture_output=True).stdout)
        pending = sum(p["pending_jobs"] for p in out["pools"].values())
        # the reads plan makes, as plain commands in one shell
        reads = ["sh", "-c", f"{bin_dir}/scontrol show node -o >/dev/null; "
                 f"{bin_dir}/squeue >/dev/null; {bin_dir}/scontrol show res -o >/dev/null; "
                 f"{bin_dir}/sprio >/dev/null; {bin_dir}/scontrol show config >/dev/null"]
        base, slurm, whole = (statistics.median(timed(c, runs))
                              for c in ([sys.executable, "-c", "pass"], reads, plan))
        print(f"plan --json: {n_pending:,} pending + 3,000 running jobs, {n_nodes:,} nodes, "
              f"{canned_slurm.POOLS} pools ({pending:,} pending tasks counted, "
              f"{len(out['actions'])} actions, {len(out['gangs'])} gangs); medians of {runs}")
        print(f"  python -c pass                {base * 1000:7.0f} ms")
        print(f"  the canned Slurm reads        {slurm * 1000:7.0f} ms")
        print(f"  slurmscale plan --json        {whole * 1000:7.0f} ms  "
              f"{'OK' if whole < 1.0 else 'OVER'} (target < 1 s)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
