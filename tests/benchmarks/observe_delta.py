"""Benchmark: a pass over a queue of 50,000 pending and 3,000 running jobs on 5,000 nodes of
which 1 % of the jobs changed since the last pass (a new priority: slurmctld's periodic
recalculation, or a job that moved), observed incrementally (the squeue parse's line memo
and the daemon's QueueView kept from pass to pass, as the daemon keeps them) against the
same pass rebuilt from scratch (no memo and no view: what every pass did before issue 44,
and what a one-shot command such as `plan --live` does), alternated pass by pass so the
machine's load touches both alike; medians.

Two levels, the same queue:
- the observe layer: squeue's lines parsed, the policy's snapshot and the hold planner's
  gang list built (slurmscale's own work per pass, no command run);
- the capacity pass's whole work but its effects (`current_plan`: the canned Slurm reads
  of `tests/benchmarks/canned_slurm.py` through the real SlurmCLI, a SQLite store, the
  snapshot, `decide` and the hold planner; then the ledger's accounts of the pass: jobs
  started and ended, each pool's capacity and demand), where the reads still cost what
  the queue's length makes them cost.

    .venv/bin/python -m tests.benchmarks.observe_delta [PENDING] [NODES] [PASSES]

Target from issue 44: the incremental pass under 0.3x the full rebuild.
"""

from __future__ import annotations

import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import yaml

from slurmscale.config_file import load_config
from slurmscale.daemon.capacity import current_plan
from slurmscale.daemon.ledger import Ledger
from slurmscale.daemon.queue_view import QueueView
from slurmscale.gc_tuning import tune_gc
from slurmscale.slurm.cli_backend import SlurmCLI, _parse_nodes
from slurmscale.slurm.kv import LineMemo, parse_squeue_fixed
from slurmscale.store.repo import Store
from tests.benchmarks import canned_slurm

CHANGED = 0.01


def changed(lines: list[str], rng: random.Random) -> list[str]:
    """The queue one pass later: 1 % of the pending jobs with a new priority."""
    out = list(lines)
    pending = [i for i, ln in enumerate(out) if "|PENDING|" in ln]
    for i in rng.sample(pending, int(len(out) * CHANGED)):
        f = out[i].split("|")
        f[7] = str(int(f[7]) + 1)
        out[i] = "|".join(f)
    return out


def timed(fn: Callable[..., object], *args: object) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def main() -> None:
    n_pending = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    n_nodes = int(sys.argv[2]) if len(sys.argv) > 2 else 5_000
    passes = int(sys.argv[3]) if len(sys.argv) > 3 else 9
    rng = random.Random(11)
    root = Path(tempfile.mkdtemp(prefix="ss-bench-"))
    try:
        now = time.time()
        at = datetime.fromtimestamp(now, UTC)
        bin_dir = canned_slurm.install(root, n_pending, 3_000, n_nodes, now)
        (root / "c.yaml").write_text(yaml.safe_dump(canned_slurm.config(root, bin_dir,
                                                                         n_nodes)))
        cfg = load_config(root / "c.yaml")
        store = Store(cfg.store_url)
        store.upgrade()
        lines = (root / "jobs.txt").read_text().splitlines(keepends=True)
        nodes = _parse_nodes((root / "nodes.txt").read_text().splitlines(keepends=True))
        tune_gc()  # as the daemon does once started

        def observe(memo: LineMemo | None, view: QueueView | None, text: list[str]) -> None:
            jobs = parse_squeue_fixed(text, memo)
            (view or QueueView()).read(cfg, nodes, jobs, now, {})

        def whole(slurm: SlurmCLI, view: QueueView | None, ledger: Ledger) -> None:
            p = current_plan(cfg, slurm, store, now, view)
            assert p.snapshot is not None
            ledger.observe(p.snapshot, p.jobs, at)

        kept_memo, kept_view = LineMemo(), QueueView()
        kept_slurm, kept_plan_view = SlurmCLI(cfg.slurm, remember=True), QueueView()
        # (each its own job accounts, in a store of its own, kept from pass to pass as the
        # daemon keeps them)
        books = [Store(f"sqlite:///{root}/{name}.db") for name in ("kept", "rebuilt")]
        for book in books:
            book.upgrade()
        kept_ledger, rebuilt_ledger = Ledger(cfg, books[0]), Ledger(cfg, books[1])
        observe(kept_memo, kept_view, lines)  # the pass before: the view's first fill
        whole(kept_slurm, kept_plan_view, kept_ledger)
        whole(SlurmCLI(cfg.slurm), None, rebuilt_ledger)
        obs_full, obs_inc, plan_full, plan_inc = [], [], [], []
        for _ in range(passes):
            lines = changed(lines, rng)
            (root / "jobs.txt").write_text("".join(lines))
            obs_inc.append(timed(observe, kept_memo, kept_view, lines))
            obs_full.append(timed(observe, None, None, lines))
            plan_inc.append(timed(whole, kept_slurm, kept_plan_view, kept_ledger))
            plan_full.append(timed(whole, SlurmCLI(cfg.slurm), None, rebuilt_ledger))
        for book in (store, *books):
            book.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"a pass at {n_pending:,} pending + 3,000 running jobs, {n_nodes:,} nodes, "
          f"{CHANGED:.0%} of the jobs changed since the last; medians of {passes}")
    for label, full, inc in (("observe (parse, snapshot, gangs)", obs_full, obs_inc),
                             ("whole pass (reads, decisions, ledger)", plan_full, plan_inc)):
        f, i = statistics.median(full), statistics.median(inc)
        print(f"  {label:<38} rebuilt {f * 1000:6.0f} ms  incremental {i * 1000:6.0f} ms  "
              f"{i / f:.2f}x  {'OK' if i < 0.3 * f else 'OVER'} (target < 0.3x)")


if __name__ == "__main__":
    main()
