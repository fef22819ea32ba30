"""Holds on vs off over a sweep of pool caps, on both shipped traces (issue 16's measured rule).

    .venv/bin/python -m tests.benchmarks.hold_sweep [--trace itp|kalos] [--caps 60,70,...]
                                                   [--jobs N] [--json OUT] [-- SIMULATE ARGS]

Each cell is a whole `slurmscale simulate --json` process (the `slurmscale` policy, the Slurm
model), run with `--accumulate` and with `--no-accumulate`, several at once. Prints one
markdown table per trace (the one in docs/policy.md) and checks the rule the holds must meet
at every cap: gang wait p95 with holds <= without, all-job wait p95 <= 1.1x without. Arguments
after `--` go to every `simulate` (e.g. `--max-hold 3600`). Exit status 1 if a cap breaks the
rule, so the table cannot be quoted without its verdict.

ITP's mean demand is 60 eight-GPU nodes (481 GPUs), so its caps run from contended (60) to
barely contended (90). Kalos's mean demand is 39 nodes but its gangs are of 64 to 128 nodes:
at 128 nodes it is hardly contended at all, so its caps run from 64 (each 64-node gang takes
the whole pool) to 128; at a cap below a job's node count the job is left out of the trace
(Slurm refuses it at submission: larger than the partition), said under the table.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

D = Path(__file__).resolve().parents[1] / "data" / "traces"
TRACES = {
    "itp": (("--trace", str(D / "itp_cluster04_14d.csv"),
             "--carry-in", str(D / "itp_cluster04_14d_carryin.csv")), (60, 65, 70, 80, 90)),
    "kalos": (("--trace", str(D / "kalos_llm_gang_14d.csv")), (64, 80, 96, 112, 128)),
}
GANG_P95_MAX = 1.0  # with holds / without, at every cap
ALL_P95_MAX = 1.1


def fitting(path: Path, cap: int, into: Path) -> tuple[Path, int]:
    """The trace without its jobs of more than `cap` nodes (the path itself if none), and how
    many were left out."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    keep = [r for r in rows if int(r["nodes"]) <= cap]
    if len(keep) == len(rows):
        return path, 0
    out = into / f"{path.stem}-max{cap}.csv"
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(keep)
    return out, len(rows) - len(keep)


def run(trace: str, cap: int, holds: bool, extra: tuple[str, ...], tmp: Path
        ) -> dict[str, float]:
    args = list(TRACES[trace][0])
    args[1], left_out = fitting(Path(args[1]), cap, tmp)
    out = subprocess.run(
        [sys.executable, "-m", "slurmscale", "simulate", *map(str, args), "--policy",
         "slurmscale",
         "--max-nodes", str(cap), "--accumulate" if holds else "--no-accumulate", "--json",
         *extra], check=True, capture_output=True, text=True)
    return {**json.loads(out.stdout)["policies"]["slurmscale"], "left_out": left_out}


def _s(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}"


def table(trace: str, rows: dict[tuple[int, bool], dict[str, float]]) -> tuple[str, bool]:
    """The markdown table and whether every cap meets the rule."""
    lines = [f"**{trace}**", "",
             "| cap (nodes) | holds | gang p50 (s) | gang p95 (s) | all p50 (s) | all p95 (s) "
             "| holds made | hold idle GPU-h | idle GPU-h | rule |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    ok_all = True
    for cap in sorted({c for c, _ in rows}):
        off, on = rows[(cap, False)], rows[(cap, True)]
        gang_ok = (on["gang_wait_p95_s"] or 0) <= GANG_P95_MAX * (off["gang_wait_p95_s"] or 0)
        all_ok = (on["wait_p95_s"] or 0) <= ALL_P95_MAX * max(1.0, off["wait_p95_s"] or 0)
        ok_all &= gang_ok and all_ok
        for holds, r in ((False, off), (True, on)):
            verdict = ("" if not holds else "ok" if gang_ok and all_ok else
                       "**broken**: " + ", ".join(
                           w for w, bad in (("gang p95", not gang_ok), ("all p95", not all_ok))
                           if bad))
            lines.append(
                f"| {cap} | {'on' if holds else 'off'} | {_s(r['gang_wait_p50_s'])} | "
                f"{_s(r['gang_wait_p95_s'])} | {_s(r['wait_p50_s'])} | {_s(r['wait_p95_s'])} | "
                f"{r['reservations_created']} | {r['reservation_idle_gpu_hours']:,.0f} | "
                f"{r['idle_gpu_hours']:,.0f} | {verdict} |")
    left = {c: r["left_out"] for (c, _), r in rows.items() if r["left_out"]}
    if left:
        lines += ["", "Left out (more nodes than the cap): " + ", ".join(
            f"{n} job(s) at {c}" for c, n in sorted(left.items())) + "."]
    return "\n".join(lines), ok_all


def main() -> None:
    argv = sys.argv[1:]
    extra: tuple[str, ...] = ()
    if "--" in argv:
        extra = tuple(argv[argv.index("--") + 1:])
        argv = argv[:argv.index("--")]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", choices=sorted(TRACES), action="append")
    ap.add_argument("--caps", help="comma-separated caps (one trace only)")
    ap.add_argument("--jobs", type=int, default=2, help="simulations at once")
    ap.add_argument("--json", type=Path, help="write every cell's figures here")
    a = ap.parse_args(argv)
    traces = a.trace or sorted(TRACES)
    if a.caps and len(traces) != 1:
        ap.error("--caps needs exactly one --trace")
    cells = [(t, cap, holds) for t in traces
             for cap in ([int(c) for c in a.caps.split(",")] if a.caps else TRACES[t][1])
             for holds in (False, True)]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(a.jobs) as pool:
        got = dict(zip(cells, pool.map(lambda c: run(*c, extra, Path(tmp)), cells),
                       strict=True))
    ok = True
    for t in traces:
        text, good = table(t, {(c, h): r for (tt, c, h), r in got.items() if tt == t})
        ok &= good
        print(text + "\n")
    if a.json:
        a.json.write_text(json.dumps([{"trace": t, "cap": c, "holds": h, **r}
                                      for (t, c, h), r in got.items()], indent=1))
    print("rule met at every cap" if ok else "RULE BROKEN at some cap (see the rule column)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
