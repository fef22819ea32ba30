"""Holds on vs off over a sweep of pool caps, on both shipped traces (issue 33's rule).

    .venv/bin/python -m tests.benchmarks.hold_sweep [--trace itp|kalos] [--caps 60,70,...]
        [--replicas K] [--jitter S] [--jobs N] [--json OUT] [--cache DIR] [-- SIMULATE ARGS]

Each cell is a whole `slurmscale simulate --json --replicas K` process (the `slurmscale`
policy, the Slurm model; K copies with submit times jittered, seeded alike for on and off),
run with `--accumulate` and with `--no-accumulate`. Prints one markdown table per trace (the
one in docs/policy.md: each figure's median over the replicas) and checks the rule on the
median of the per-replica ratios holds on / off: where gangs starve (gang wait p50 without
holds above 10 boots), gang p50 <= 0.7x, gang p95 <= 1.05x, all-job p95 <= 1.1x; at every
other cap no figure (gang and all-job p50 and p95, idle GPU-hours) above 1.05x. Arguments
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
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

D = Path(__file__).resolve().parents[1] / "data" / "traces"
TRACES = {
    "itp": (("--trace", str(D / "itp_cluster04_14d.csv"),
             "--carry-in", str(D / "itp_cluster04_14d_carryin.csv")), (60, 65, 70, 80, 90)),
    "kalos": (("--trace", str(D / "kalos_llm_gang_14d.csv")), (64, 80, 96, 112, 128)),
}
BOOT_S = 300.0  # simulate's default boot time: "starving" is a gang p50 over 10 boots
# Issue 33's rule, on the medians over replicas of the per-replica ratios holds on / off:
STARVING = {"gang_wait_p50_s": 0.7, "gang_wait_p95_s": 1.05, "wait_p95_s": 1.1}
ELSEWHERE = {k: 1.05 for k in ("gang_wait_p50_s", "gang_wait_p95_s", "wait_p50_s",
                               "wait_p95_s", "idle_gpu_hours")}
NAMES = {"gang_wait_p50_s": "gang p50", "gang_wait_p95_s": "gang p95", "wait_p50_s": "all p50",
         "wait_p95_s": "all p95", "idle_gpu_hours": "idle"}


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


def run(trace: str, cap: int, holds: bool, extra: tuple[str, ...], replicas: int,
        jitter: float, tmp: Path, cache: Path | None = None) -> dict[str, Any]:
    """One cell: its figures replica by replica (`each`, seed order) and their medians.
    `cache`: a directory keeping each cell's figures as it ends, read instead of running the
    cell again with the same settings (a sweep is tens of minutes: one cut short is not
    lost)."""
    key = f"{trace}-{cap}-{'on' if holds else 'off'}-k{replicas}-j{jitter:g}-{' '.join(extra)}"
    kept = cache / (key.replace("/", "_") + ".json") if cache is not None else None
    if kept is not None and kept.exists():
        cell: dict[str, Any] = json.loads(kept.read_text())
        return cell
    cell = _run(trace, cap, holds, extra, replicas, jitter, tmp)
    if kept is not None:
        kept.write_text(json.dumps(cell))
    return cell


def _run(trace: str, cap: int, holds: bool, extra: tuple[str, ...], replicas: int,
         jitter: float, tmp: Path) -> dict[str, Any]:
    args = list(TRACES[trace][0])
    args[1], left_out = fitting(Path(args[1]), cap, tmp)
    copies = ("--replicas", str(replicas), "--jitter", f"{jitter:g}") if replicas > 1 else ()
    out = subprocess.run(
        [sys.executable, "-m", "slurmscale", "simulate", *map(str, args), "--policy",
         "slurmscale",
         "--max-nodes", str(cap), "--accumulate" if holds else "--no-accumulate", "--json",
         *copies, *extra], check=True, capture_output=True, text=True)
    got = json.loads(out.stdout)
    if replicas > 1:
        each = [r["slurmscale"] for r in got["each"]]
        median = {k: v["median"] for k, v in got["policies"]["slurmscale"].items()}
    else:
        each = [got["policies"]["slurmscale"]]
        median = each[0]
    return {**median, "each": each, "left_out": left_out}


def ratios(on: dict[str, Any], off: dict[str, Any]) -> dict[str, tuple[float, float, float]]:
    """Per figure of the rule, holds on / off replica by replica (same seeds): median, min,
    max. A figure that is 0 without holds is taken as 1 s (or GPU-hour)."""
    out = {}
    for key in ELSEWHERE:
        xs = [(a.get(key) or 0.0) / max(1.0, b.get(key) or 0.0)
              for a, b in zip(on["each"], off["each"], strict=True)]
        out[key] = (statistics.median(xs), min(xs), max(xs))
    return out


def boot_s(extra: tuple[str, ...]) -> float:
    """The boot time the cells ran with: `--boot-time` among the arguments for `simulate`,
    else its default (the rule's "starving" is counted in boots)."""
    value = BOOT_S
    for i, arg in enumerate(extra):
        if arg == "--boot-time" and i + 1 < len(extra):
            value = float(extra[i + 1])
        elif arg.startswith("--boot-time="):
            value = float(arg.split("=", 1)[1])
    return value


def verdict(off: dict[str, Any], r: dict[str, tuple[float, float, float]],
            boot: float = BOOT_S) -> tuple[bool, str, bool]:
    """Whether the cap meets the rule, what breaks it, and whether gangs starve there (gang
    p50 without holds above 10 boots of `boot` s)."""
    starving = (off["gang_wait_p50_s"] or 0.0) > 10 * boot
    rule = STARVING if starving else ELSEWHERE
    bad = [f"{NAMES[k]} {r[k][0]:.2f}x > {limit:g}x" for k, limit in rule.items()
           if r[k][0] > limit]
    return not bad, ", ".join(bad), starving


def _s(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}"


def table(trace: str, rows: dict[tuple[int, bool], dict[str, Any]], boot: float = BOOT_S
          ) -> tuple[str, bool]:
    """The markdown table and whether every cap meets the rule."""
    lines = [f"**{trace}**", "",
             "| cap (nodes) | holds | gang p50 (s) | gang p95 (s) | all p50 (s) | all p95 (s) "
             "| holds made | hold idle GPU-h | idle GPU-h | on/off: gang p50, gang p95, "
             "all p95 | rule |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    ok_all = True
    for cap in sorted({c for c, _ in rows}):
        off, on = rows[(cap, False)], rows[(cap, True)]
        r = ratios(on, off)
        ok, why, starving = verdict(off, r, boot)
        ok_all &= ok
        for holds, f in ((False, off), (True, on)):
            ratio = "" if not holds else ", ".join(
                f"{r[k][0]:.2f} ({r[k][1]:.2f}–{r[k][2]:.2f})"
                for k in ("gang_wait_p50_s", "gang_wait_p95_s", "wait_p95_s"))
            rule = ("" if not holds else
                    ("starving: " if starving else "") + ("ok" if ok else f"**broken**: {why}"))
            lines.append(
                f"| {cap} | {'on' if holds else 'off'} | {_s(f['gang_wait_p50_s'])} | "
                f"{_s(f['gang_wait_p95_s'])} | {_s(f['wait_p50_s'])} | {_s(f['wait_p95_s'])} | "
                f"{f['reservations_created']:g} | {f['reservation_idle_gpu_hours']:,.0f} | "
                f"{f['idle_gpu_hours']:,.0f} | {ratio} | {rule} |")
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
    ap.add_argument("--jobs", type=int, default=1,
                    help="cells at once (each runs its replicas in parallel processes)")
    ap.add_argument("--replicas", type=int, default=5, help="copies per cell (jittered)")
    ap.add_argument("--jitter", type=float, default=60.0, help="seconds, as simulate's")
    ap.add_argument("--json", type=Path, help="write every cell's figures here")
    ap.add_argument("--cache", type=Path,
                    help="keep each cell's figures here as it ends; reuse them on a rerun")
    a = ap.parse_args(argv)
    traces = a.trace or sorted(TRACES)
    if a.caps and len(traces) != 1:
        ap.error("--caps needs exactly one --trace")
    if a.cache is not None:
        a.cache.mkdir(parents=True, exist_ok=True)
    cells = [(t, cap, holds) for t in traces
             for cap in ([int(c) for c in a.caps.split(",")] if a.caps else TRACES[t][1])
             for holds in (False, True)]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(a.jobs) as pool:
        got = dict(zip(cells, pool.map(
            lambda c: run(*c, extra, a.replicas, a.jitter, Path(tmp), a.cache), cells),
            strict=True))
    ok = True
    for t in traces:
        text, good = table(t, {(c, h): r for (tt, c, h), r in got.items() if tt == t},
                           boot_s(extra))
        ok &= good
        print(text + "\n")
    if a.json:
        a.json.write_text(json.dumps([{"trace": t, "cap": c, "holds": h, **r}
                                      for (t, c, h), r in got.items()], indent=1))
    print("rule met at every cap" if ok else "RULE BROKEN at some cap (see the rule column)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
