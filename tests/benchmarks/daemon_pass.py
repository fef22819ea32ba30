"""Benchmark: a whole daemon pass (Reconciler.tick: the spool, interruptions, the node read,
the sweep, health, blocks, upkeep, the capacity pass with its job and reservation reads) on a
real Slurm 22.05 holding JOBS pending jobs and NODES CLOUD nodes in 10 pools, against the
Slurm commands' own time in the same passes (every `scontrol`/`squeue`/`sprio` the pass runs,
timed where it runs). EC2 is an in-memory fake: this measures slurmscale's cost over Slurm's.

    sudo .venv/bin/python -m tests.benchmarks.daemon_pass [JOBS] [NODES] [PASSES]

Target from issue 17: a pass <= 2x its Slurm commands. Jobs are submitted held (nothing
runs, the queue stays put); the first pass is left out (start-up, cold caches).
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from slurmscale.config_file import load_config
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.gc_tuning import tune_gc
from slurmscale.localcluster.cluster import LocalCluster
from slurmscale.localcluster.options import ClusterOptions, PoolSpec
from slurmscale.slurm.cli_backend import SlurmCLI
from slurmscale.store.repo import Store
from tests.support.fakes import FakeCloud

POOLS = 10
T = TypeVar("T")


class TimedSlurm(SlurmCLI):
    """SlurmCLI adding up the wall time of the commands it runs. A command the pass parses
    as it streams (squeue) has no time of its own there: it is noted, and `bare` runs it
    again after the pass, read whole and unparsed, for its time."""

    spent = 0.0
    calls = 0
    streamed: list[tuple[str, ...]] = []

    def run(self, tool: str, *args: str, timeout: float | None = None) -> str:
        t0 = time.perf_counter()
        try:
            return super().run(tool, *args, timeout=timeout)
        finally:
            TimedSlurm.spent += time.perf_counter() - t0
            TimedSlurm.calls += 1

    def run_parsed(self, parse: Callable[[Iterable[str]], T], tool: str, *args: str) -> T:
        TimedSlurm.streamed.append((tool, *args))
        TimedSlurm.calls += 1
        return super().run_parsed(parse, tool, *args)

    def bare(self) -> float:
        """The streamed commands of the pass, each run again alone: their wall time."""
        t0 = time.perf_counter()
        for cmd in TimedSlurm.streamed:
            SlurmCLI.run(self, *cmd)
        return time.perf_counter() - t0


def main() -> None:
    n_jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 30_000
    n_nodes = int(sys.argv[2]) if len(sys.argv) > 2 else 5_000
    passes = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    if os.geteuid() != 0 or shutil.which("slurmctld") is None:
        sys.exit("needs root and slurmctld (run scripts/setup.sh first)")
    per = n_nodes // POOLS
    root = Path(tempfile.mkdtemp(prefix="ss-bench-"))
    c = LocalCluster(root, ClusterOptions(
        pools=[PoolSpec(f"p{i}", f"p{i}-", per, capacity_type="on-demand")
               for i in range(POOLS)], start_daemon=False,
        slurm_conf_extra=[f"MaxJobCount={n_jobs * 2}", "SchedulerParameters=defer"]))
    c.start()
    try:
        t0 = time.monotonic()

        def submit(i: int) -> None:
            c.slurm("sbatch", "-H", "-p", f"p{i % POOLS}", "-N", str(1 + i % 4),
                    "--gres=gpu:8", "-t", "4:00:00", "-J", f"b{i}", "--wrap", "true",
                    timeout=120)

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(submit, range(n_jobs)))
        print(f"submitted {n_jobs:,} held jobs to {n_nodes:,} nodes in "
              f"{time.monotonic() - t0:.0f}s")
        cfg = load_config(c.cfg_path)
        store = Store(cfg.store_url)
        store.upgrade()
        r = Reconciler(cfg, store, TimedSlurm(cfg.slurm, remember=True), FakeCloud())
        tune_gc()  # as the daemon does once started
        walls, slurm, calls = [], [], []
        profile = os.environ.get("SLURMSCALE_BENCH_PROFILE")  # a file: profile the last pass
        for i in range(passes):
            if profile and i == passes - 1:
                import cProfile

                cProfile.runctx("r.tick()", globals(), {"r": r}, profile)
                break
            TimedSlurm.spent, TimedSlurm.calls, TimedSlurm.streamed = 0.0, 0, []
            t = time.perf_counter()
            r.tick()
            wall = time.perf_counter() - t
            streamed = r.slurm.inner.bare()  # type: ignore[attr-defined]
            if i:
                walls.append(wall)
                slurm.append(TimedSlurm.spent + streamed)
                calls.append(TimedSlurm.calls)
        store.close()
        gc.collect()
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
    w, s = statistics.median(walls), statistics.median(slurm)
    print(f"daemon pass at {n_jobs:,} pending jobs, {n_nodes:,} nodes, {POOLS} pools (Slurm "
          f"22.05, median of {len(walls)} passes after the first)")
    print(f"  Slurm commands   {s * 1000:7.0f} ms  ({statistics.median(calls):.0f} commands)")
    print(f"  whole pass       {w * 1000:7.0f} ms  = {w / s:.2f}x the commands  "
          f"{'OK' if w <= 2 * s else 'OVER'} (target <= 2x)")


if __name__ == "__main__":
    main()
