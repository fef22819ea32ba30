"""The simulator's golden runs: `slurmscale simulate --json` on the committed traces, each
compared whole with the result committed in tests/data/sim_golden.json.

    .venv/bin/python -m tests.benchmarks.sim_golden            # the quick runs (~20 s)
    .venv/bin/python -m tests.benchmarks.sim_golden --all      # and the 14-day traces (~10 min)
    .venv/bin/python -m tests.benchmarks.sim_golden --only NAME [--only NAME ...]
    .venv/bin/python -m tests.benchmarks.sim_golden --update   # write what the runs give now

Why: every speed shortcut in the daemon's passes and in the Slurm model is held to "the same
answers for less". A change that must not move a figure (a restructuring, a cache) passes
this gate unchanged; a change that means to move one updates the file in the same commit, and
the commit says why (the gate prints each figure that moved, old -> new). The quick runs run
in the unit suite (tests/unit/test_sim_golden.py); --all is one command.

Each run is a whole `simulate` process, as a user runs it, with the trace's path relative to
the repository (the `trace` field is left out of the comparison: it is only that path)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "sim_golden.json"
T = "tests/data/traces/"
SLICE = ["--trace", T + "itp_cluster04_slice40.csv"]
KALOS = ["--trace", T + "kalos_llm_gang_14d.csv", "--max-nodes", "128"]
# (80 nodes: the tables of docs/simulator.md; at simulate's default 64 the queue never drains)
ITP = ["--trace", T + "itp_cluster04_14d.csv", "--carry-in", T + "itp_cluster04_14d_carryin.csv",
       "--max-nodes", "80"]
ONE = ["--policy", "slurmscale"]

# name -> (quick, simulate's arguments): every policy, the Slurm and greedy models, holds for a
# starving gang, spot with and without graces, a storm, paid capacity (with and without
# preference, reclaimed), a Capacity Block, hardware failures
RUNS: dict[str, tuple[bool, list[str]]] = {
    "slice-every-policy": (True, SLICE),
    "slice-greedy-model": (True, [*SLICE, "--slurm-model", "greedy"]),
    # holds: INFINITE limits leave backfill no plan for a gang, so holds gather nodes for it
    "slice-holds": (True, [*SLICE, "--policy", "slurmscale", "--policy", "slurmscale-governed",
                           "--no-time-limits", "--max-nodes", "4"]),
    "slice-spot": (True, [*SLICE, "--policy", "slurmscale", "--policy",
                          "slurmscale-governed", "--interruption-rate", "0.5", "--seed", "1"]),
    "slice-spot-graces": (True, [*SLICE, *ONE, "--interruption-rate", "0.5", "--grace-signal",
                                 "30", "--checkpoint-every", "600", "--save-on-signal",
                                 "--seed", "3"]),
    "slice-spot-storm": (True, [*SLICE, *ONE, "--storm-at", "7200", "--storm-fraction", "0.5",
                                "--storm-outage", "1800", "--on-demand-buffer", "0.1"]),
    "slice-odcr": (True, [*SLICE, *ONE, "--reserved-nodes", "4"]),
    "slice-odcr-no-preference": (True, [*SLICE, *ONE, "--reserved-nodes", "4",
                                        "--reserved-preference", "none"]),
    "slice-odcr-reclaimed": (True, [*SLICE, *ONE, "--reserved-nodes", "4", "--reclaim-rate",
                                    "0.2", "--seed", "4"]),
    "slice-capacity-block": (True, [*SLICE, "--policy", "slurmscale", "--policy", "static",
                                    "--capacity-block", "600:30000:4"]),
    "slice-node-failures": (True, [*SLICE, "--policy", "slurmscale", "--policy", "static",
                                   "--node-failure-rate", "0.02", "--seed", "5"]),
    "kalos-every-policy": (False, KALOS),
    "kalos-spot-graces": (False, [*KALOS, *ONE, "--interruption-rate", "0.05",
                                  "--grace-signal", "30", "--checkpoint-every", "600",
                                  "--save-on-signal", "--seed", "2"]),
    "itp-slurmscale": (False, [*ITP, *ONE]),
    "itp-governed-spot": (False, [*ITP, "--policy", "slurmscale-governed",
                                  "--interruption-rate", "0.02", "--seed", "6"]),
    "itp-static-immediate": (False, [*ITP, "--policy", "static", "--policy", "immediate"]),
}


def run(name: str) -> dict[str, Any]:
    """One golden run's JSON, as `simulate --json` prints it, without the trace's path."""
    out = subprocess.run([sys.executable, "-m", "slurmscale", "simulate", "--json",
                          *RUNS[name][1]], cwd=REPO, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{name}: simulate exited {out.returncode}: {out.stderr[-400:]}")
    result = json.loads(out.stdout)
    result.pop("trace", None)
    return dict(result)


def moved(old: Any, new: Any, at: str = "") -> Iterator[str]:
    """Each figure that differs, as `path: old -> new` (the JSON compared whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            yield from moved(old.get(k, "(none)"), new.get(k, "(none)"), f"{at}.{k}" if at
                             else str(k))
    elif old != new:
        yield f"{at}: {json.dumps(old)} -> {json.dumps(new)}"


def load() -> dict[str, Any]:
    return dict(json.loads(GOLDEN.read_text())) if GOLDEN.exists() else {}


def check(names: list[str], golden: dict[str, Any], jobs: int = 2
          ) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Run `names` (`jobs` at a time); what each gave, and per run the figures that moved
    from `golden` (a run missing from it: every figure)."""
    with ThreadPoolExecutor(jobs) as pool:
        got = dict(zip(names, pool.map(run, names), strict=True))
    diffs = {n: list(moved(golden.get(n, {}), got[n])) for n in names}
    return got, {n: d for n, d in diffs.items() if d}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="the 14-day traces too")
    ap.add_argument("--only", action="append", choices=sorted(RUNS), help="these runs only")
    ap.add_argument("--update", action="store_true", help="write what the runs give now")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="runs at a time (default 2)")
    a = ap.parse_args()
    names = a.only or [n for n, (quick, _) in RUNS.items() if quick or a.all]
    golden = load()
    got, diffs = check(names, golden, a.jobs)
    for n in names:
        print(f"{'MOVED' if n in diffs else 'same '} {n}")
        for line in diffs.get(n, [])[:40]:
            print(f"      {line}")
    if a.update:
        golden.update(got)
        GOLDEN.write_text(json.dumps({k: golden[k] for k in sorted(golden)}, indent=1,
                                     sort_keys=True) + "\n")
        print(f"wrote {GOLDEN.relative_to(REPO)} ({len(got)} run(s))")
        return
    if diffs:
        print(f"{len(diffs)} of {len(names)} run(s) moved: if meant, run again with --update "
              "and say why in the commit")
        sys.exit(1)


if __name__ == "__main__":
    main()
