"""Benchmark: a daemon pass as a real queue changes between passes, the queue's view kept
from pass to pass (the daemon's: the squeue parse's line memo and `QueueView`) against the
same pass from a fresh view (a rebuild: what `plan --live` and a daemon's first pass do),
alternated pass by pass so the machine's load touches both alike; medians.

The queue: 50,000 pending and 3,000 running jobs on 5,000 nodes in 10 pools (canned Slurm
output in 22.05's formats, tests/benchmarks/canned_slurm.py). Between two passes the clock
moves 30 s and a share of the queue changes the ways a queue does: of every 20 changed
jobs, 6 get a new priority, 3 a new backfill estimate, 3 are new submits, 2 are cancelled,
3 start (on a node from the cluster) and 3 running ones end; sprio follows. Mixes:

- 1 %, 10 %, 50 % of the pending jobs changed;
- after a PriorityCalcPeriod: every pending job's priority moved, and 1 % changed as above;
- the first pass: a fresh view and an empty line memo (a daemon just started), against a
  rebuild of the same queue.

Two levels: the observe layer (squeue's lines parsed, the QueueState read: slurmscale's own
work per pass, no command run; rebuilt by a fresh view) and the capacity pass's whole work
but its effects (`current_plan` through the real SlurmCLI on the canned commands, a SQLite
store; then the ledger's accounts of the pass; rebuilt by a view that forgets all but what
a rebuild cannot know - each gang's earliest backfill plan, the arrival log - so that a
gang whose plan slipped has sprio read in both, as a daemon does). Last, the memory the
kept view and line memo hold between passes, per job in the queue (tracemalloc).

    .venv/bin/python -m tests.benchmarks.pass_mix [PENDING] [NODES] [PASSES]

Targets (issue 66): each kept shortcut beats the rebuild on every mix; a pass after a
PriorityCalcPeriod costs no more than a rebuild (within TOLERANCE).
"""

from __future__ import annotations

import gc
import random
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import yaml

from slurmscale.config import Config
from slurmscale.config_file import load_config
from slurmscale.daemon.passes.capacity import current_plan
from slurmscale.daemon.passes.ledger import Ledger
from slurmscale.daemon.queue.queue_view import QueueView
from slurmscale.gc_tuning import tune_gc
from slurmscale.model import SlurmNode
from slurmscale.slurm.cli_backend import SlurmCLI, _parse_nodes
from slurmscale.slurm.kv import SQUEUE_FIELDS, LineMemo, parse_squeue_fixed
from slurmscale.store.repo import Store
from tests.benchmarks import canned_slurm

# squeue's fields as the canned lines print them (slurm/kv.SQUEUE_FIELDS; StartTime is a
# running job's start and a pending job's backfill estimate)
FIELD = {name: i for i, name in enumerate(SQUEUE_FIELDS)}
ID, SUBMIT, REASON, PRIORITY, STATE = (FIELD[f] for f in (
    "JobID", "SubmitTime", "Reason", "PriorityLong", "State"))
END, NODES, START, ARRAY_ID = (FIELD[f] for f in ("EndTime", "NodeList", "StartTime",
                                                  "ArrayJobID"))
# of every 20 changed jobs
KINDS = ["priority"] * 6 + ["estimate"] * 3 + ["submit"] * 3 + ["cancel"] * 2 \
    + ["start"] * 3 + ["end"] * 3
STEP_S = 30.0
# "no more than a rebuild": within 5 %, as far as the medians of the same pass move from one
# run of this benchmark to the next on a 2-core machine
TOLERANCE = 1.05


@dataclass
class Queue:
    """The canned cluster's queue and sprio as text, moved on pass by pass."""

    lines: list[str]
    sprio: dict[str, str]  # job id -> its sprio line
    nodes: list[str]  # node names a started job may get
    now: float
    next_id: int = 900_000
    lines_read: list[str] = field(default_factory=list)  # as squeue prints them

    def step(self, share: float, rng: random.Random, recalc: bool = False) -> None:
        """The queue one pass later: `share` of the pending jobs changed as KINDS says;
        `recalc`: a PriorityCalcPeriod moved every pending job's priority too."""
        self.now += STEP_S
        pending = [i for i, ln in enumerate(self.lines) if "|PENDING|" in ln]
        running = [i for i, ln in enumerate(self.lines) if "|RUNNING|" in ln]
        gone: set[int] = set()
        added: list[str] = []
        for k in range(int(len(pending) * share)):
            kind = KINDS[k % len(KINDS)]
            i = rng.choice(running if kind == "end" else pending)
            if i in gone:
                continue
            f = self.lines[i].split("|")
            match kind:
                case "priority":
                    f[PRIORITY] = str(rng.randrange(1, 100_000))
                case "estimate":
                    f[START] = canned_slurm._iso(self.now + rng.uniform(60, 86400))
                case "submit":
                    self.next_id += 1
                    g = list(f)
                    g[ID] = g[ARRAY_ID] = str(self.next_id)
                    g[SUBMIT] = canned_slurm._iso(self.now)
                    g[PRIORITY] = str(rng.randrange(1, 100_000))
                    added.append("|".join(g))
                    continue
                case "cancel" | "end":
                    gone.add(i)
                    continue
                case "start":
                    f[STATE], f[REASON] = "RUNNING", "None"
                    f[NODES], f[START] = rng.choice(self.nodes), canned_slurm._iso(self.now)
                    f[END] = canned_slurm._iso(self.now + 3600)
            self.lines[i] = "|".join(f)
        if recalc:
            for i in pending:
                if i not in gone and "|PENDING|" in self.lines[i]:
                    f = self.lines[i].split("|")
                    f[PRIORITY] = str(int(f[PRIORITY]) + rng.randrange(1, 50))
                    self.lines[i] = "|".join(f)
        self.lines = [ln for i, ln in enumerate(self.lines) if i not in gone] + added
        self.sprio = {}
        for ln in self.lines:
            f = ln.split("|")
            if f[STATE] == "PENDING":
                self.sprio[f[ID]] = (f"{f[ID]}|{f[1]}|{f[PRIORITY]}|{rng.randrange(1000)}|"
                                     f"{rng.randrange(10000)}|{rng.randrange(100)}|0|0|\n")

    def write(self, root: Path) -> None:
        (root / "jobs.txt").write_text("\n".join(self.lines) + "\n")
        (root / "sprio.txt").write_text("".join(self.sprio.values()))


@dataclass
class Kept:
    """What a daemon keeps between passes, per level."""

    memo: LineMemo
    view: QueueView
    slurm: SlurmCLI
    plan_view: QueueView
    ledger: Ledger


def timed(fn: Callable[..., object], *args: object) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


class Bench:
    def __init__(self, root: Path, cfg: Config, nodes: list[SlurmNode], q: Queue) -> None:
        self.root, self.cfg, self.nodes, self.q = root, cfg, nodes, q
        self.store = Store(cfg.store_url)
        self.store.upgrade()
        # (each level's own job accounts, kept from pass to pass as the daemon keeps them)
        self.books = [Store(f"sqlite:///{root}/{n}.db") for n in ("kept", "rebuilt")]
        for book in self.books:
            book.upgrade()
        self.rebuilt_ledger = Ledger(cfg, self.books[1])
        # the whole pass rebuilt: a view that forgets every job's and node's view before each
        # pass, keeping only what a rebuild cannot know (each gang's earliest backfill plan,
        # the arrival log): a plan that slipped has sprio read in both
        self.rebuilt_view = QueueView()

    def observe(self, memo: LineMemo | None, view: QueueView | None) -> None:
        jobs = parse_squeue_fixed(self.q.lines_read, memo)
        (view or QueueView()).read(self.cfg, self.nodes, jobs, self.q.now, {})

    def whole(self, slurm: SlurmCLI, view: QueueView | None, ledger: Ledger) -> None:
        p = current_plan(self.cfg, slurm, self.store, self.q.now, view)
        assert p.snapshot is not None
        ledger.observe(p.snapshot, p.jobs, datetime.fromtimestamp(self.q.now, UTC))

    def rebuilt(self) -> None:
        self.rebuilt_view.forget()
        self.whole(SlurmCLI(self.cfg.slurm), self.rebuilt_view, self.rebuilt_ledger)

    def started(self) -> Kept:
        """A daemon's kept state after its first pass."""
        k = Kept(LineMemo(), QueueView(), SlurmCLI(self.cfg.slurm, remember=True),
                 QueueView(), Ledger(self.cfg, self.books[0]))
        self.observe(k.memo, k.view)
        self.whole(k.slurm, k.plan_view, k.ledger)
        return k

    def mix(self, k: Kept, share: float, recalc: bool, passes: int, rng: random.Random
            ) -> tuple[list[float], ...]:
        out: tuple[list[float], ...] = ([], [], [], [])
        for _ in range(passes):
            self.q.step(share, rng, recalc)
            self.q.write(self.root)
            self.q.lines_read = (self.root / "jobs.txt").read_text().splitlines(keepends=True)
            for series, fn, args in (
                    (out[0], self.observe, (k.memo, k.view)),
                    (out[1], self.observe, (None, None)),
                    (out[2], self.whole, (k.slurm, k.plan_view, k.ledger)),
                    (out[3], self.rebuilt, ())):
                series.append(timed(fn, *args))
        return out

    def close(self) -> None:
        for s in (self.store, *self.books):
            s.close()


def held_per_job(bench: Bench, n_jobs: int) -> float:
    """Bytes the kept view and line memo hold between passes, per job in the queue."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    memo, view = LineMemo(), QueueView()
    bench.observe(memo, view)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del memo, view
    return held / n_jobs


def main() -> None:
    n_pending = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    n_nodes = int(sys.argv[2]) if len(sys.argv) > 2 else 5_000
    passes = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    rng = random.Random(11)
    root = Path(tempfile.mkdtemp(prefix="ss-bench-"))
    rows: list[tuple[str, float, float, float, float]] = []
    try:
        now = time.time()
        bin_dir = canned_slurm.install(root, n_pending, 3_000, n_nodes, now)
        (root / "c.yaml").write_text(yaml.safe_dump(canned_slurm.config(root, bin_dir,
                                                                         n_nodes)))
        cfg = load_config(root / "c.yaml")
        lines = (root / "jobs.txt").read_text().splitlines()
        nodes = _parse_nodes((root / "nodes.txt").read_text().splitlines(keepends=True))
        q = Queue(lines, {}, [n.name for n in nodes], now)
        q.lines_read = (root / "jobs.txt").read_text().splitlines(keepends=True)
        bench = Bench(root, cfg, nodes, q)
        tune_gc()  # as the daemon does once started
        first: list[float] = []
        rebuilt: list[float] = []
        for _ in range(passes):  # the first pass: a daemon just started, then a rebuild
            q.now += 1.0  # (the ledger's samples: one a second)
            first.append(timed(bench.started))
            rebuilt.append(timed(bench.rebuilt) + timed(bench.observe, None, None))
        rows.append(("the first pass (a fresh view)", statistics.median(rebuilt),
                     statistics.median(first), 0.0, 0.0))
        q.now += 1.0
        kept = bench.started()
        for label, share, recalc in (("1 % changed", 0.01, False),
                                     ("10 % changed", 0.10, False),
                                     ("50 % changed", 0.50, False),
                                     ("PriorityCalcPeriod + 1 %", 0.01, True)):
            obs_k, obs_r, whole_k, whole_r = bench.mix(kept, share, recalc, passes, rng)
            rows.append((label, statistics.median(obs_r), statistics.median(obs_k),
                         statistics.median(whole_r), statistics.median(whole_k)))
        per_job = held_per_job(bench, len(q.lines))
        bench.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"a pass at {n_pending:,} pending + 3,000 running jobs, {n_nodes:,} nodes, the "
          f"clock {STEP_S:.0f} s on; kept view against a rebuild, medians of {passes}")
    print(f"  {'':<30} {'observe layer':>34}   {'whole pass but its effects':>34}")
    for label, obs_r, obs_k, whole_r, whole_k in rows:
        if not whole_r:  # (the first pass: the daemon's first, observe and whole together)
            print(f"  {label:<30} rebuilt {obs_r * 1000:6.0f} ms  first {obs_k * 1000:6.0f} "
                  f"ms  {obs_k / obs_r:.2f}x")
            continue
        ok = whole_k <= TOLERANCE * whole_r and obs_k <= TOLERANCE * obs_r
        print(f"  {label:<30} {obs_r * 1000:6.0f} -> {obs_k * 1000:5.0f} ms {obs_k / obs_r:5.2f}x"
              f"   {whole_r * 1000:6.0f} -> {whole_k * 1000:5.0f} ms {whole_k / whole_r:5.2f}x  "
              f"{'OK' if ok else 'OVER'}")
    print(f"  held between passes (view + line memo): {per_job:,.0f} bytes per job")


if __name__ == "__main__":
    main()
