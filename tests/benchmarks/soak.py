"""Benchmark: the daemon's memory over a long run. The local cluster (real Slurm 22.05, moto,
the daemon with metrics, nodes joining through the node bootstrap) under a steady job stream
(1-4 node jobs of 5-30 s, one every few seconds, seeded), for MINUTES (default 30). Samples the
daemon's RSS (/proc/PID/status VmRSS) and its pass time (the metrics' tick histogram) every
30 s, then prints per 10-minute window the RSS at its end and the mean pass time, and the RSS
slope after the first 5 minutes (warm-up) by least squares. Goal: under 1 MiB per 10 minutes.

    sudo .venv/bin/python -m tests.benchmarks.soak [MINUTES]
"""

from __future__ import annotations

import random
import re
import sys
import tempfile
import time
from pathlib import Path

from slurmscale.localcluster.cluster import LocalCluster
from slurmscale.localcluster.options import ClusterOptions, PoolSpec
from tests.benchmarks.scratch import done_with

SAMPLE_S = 30.0
WARM_S = 300.0


def rss_mib(pid: int) -> float:
    m = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(m[1]) / 1024 if m else float("nan")


def tick_totals(metrics: str) -> tuple[float, float]:
    """(sum of pass seconds, passes) from the Prometheus text."""
    total = re.search(r"^slurmscale_tick_duration_seconds_sum (\S+)$", metrics, re.M)
    count = re.search(r"^slurmscale_tick_duration_seconds_count (\S+)$", metrics, re.M)
    return (float(total[1]) if total else 0.0, float(count[1]) if count else 0.0)


def labelled(metrics: str, name: str, label: str) -> dict[str, float]:
    """{label value: value} of one labelled counter in the Prometheus text."""
    return {m[1]: float(m[2]) for m in re.finditer(
        rf'^{name}{{{label}="([^"]+)"}} (\S+)$', metrics, re.M)}


def split(metrics: str) -> dict[str, float]:
    """Seconds so far by phase of the pass and by what it waited on ('wait:Slurm')."""
    out = labelled(metrics, "slurmscale_pass_phase_seconds_total", "phase")
    out.update({f"wait:{k}": v for k, v in labelled(
        metrics, "slurmscale_pass_wait_seconds_total", "on").items()})
    return out


def slope_per_10min(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    return 0.0 if var == 0 else sum((t - mx) * (v - my) for t, v in points) / var * 600


def print_split(samples: list[tuple[float, float, float, float]],
                splits: list[dict[str, float]]) -> None:
    """Mean ms per pass of each phase and wait, in the first and the last 10-minute window:
    what grows with history shows here."""
    if len(samples) < 4:
        return
    half = max(2, min(len(samples) // 2, int(600 // SAMPLE_S)))
    windows = [(0, half - 1), (len(samples) - half, len(samples) - 1)]
    means = []
    for a, b in windows:
        passes = samples[b][3] - samples[a][3]
        means.append({k: (v - splits[a].get(k, 0.0)) / passes * 1000 if passes else 0.0
                      for k, v in splits[b].items()})
    print(f"  ms per pass       first {samples[half - 1][0] / 60:.0f} min   last "
          f"{(samples[-1][0] - samples[-half][0]) / 60:.0f} min")
    for k in sorted(means[1], key=lambda k: -means[1][k]):
        print(f"  {k:<18} {means[0].get(k, 0.0):9.1f}   {means[1][k]:9.1f}")


def main() -> int:
    minutes = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    rng = random.Random(7)
    root = Path(tempfile.mkdtemp(prefix="ss-bench-soak-"))
    c = LocalCluster(root, ClusterOptions(pools=[PoolSpec("gpu-spot", "spot-", 8)],
                                          tick_seconds=5.0, metrics=True, min_idle=5.0,
                                          max_idle=20.0, suspend_time=120))
    samples: list[tuple[float, float, float, float]] = []  # (t, rss, tick sum, tick count)
    splits: list[dict[str, float]] = []  # where the time went so far, beside each sample
    jobs = 0
    try:
        c.start()
        pid = c.procs.procs["daemon"].pid
        t0 = time.monotonic()
        next_sample = t0
        while time.monotonic() - t0 < minutes * 60:
            n = rng.choice((1, 1, 1, 2, 2, 4))
            c.sbatch("-N", str(n), "--gres=gpu:8", "-p", "gpu-spot", "--wrap",
                     f"sleep {rng.randint(5, 30)}")
            jobs += 1
            until = time.monotonic() + rng.uniform(2, 8)
            while time.monotonic() < until:
                if time.monotonic() >= next_sample:
                    text = c.scrape()
                    s, k = tick_totals(text)
                    samples.append((time.monotonic() - t0, rss_mib(pid), s, k))
                    splits.append(split(text))
                    next_sample += SAMPLE_S
                time.sleep(0.5)
        print(f"{jobs} jobs in {minutes:g} min; daemon RSS and pass time:")
        print("  window     RSS at end   passes   mean pass")
        for w in range(int(minutes // 10) + (1 if minutes % 10 else 0)):
            inside = [x for x in samples if w * 600 <= x[0] < (w + 1) * 600]
            if len(inside) < 2:
                continue
            passes = inside[-1][3] - inside[0][3]
            mean = (inside[-1][2] - inside[0][2]) / passes if passes else float("nan")
            print(f"  {w * 10:>3}-{(w + 1) * 10:<3} min  {inside[-1][1]:8.1f} MiB  {passes:7.0f}"
                  f"   {mean * 1000:7.1f} ms")
        print_split(samples, splits)
        warm = [(t, r) for t, r, _, _ in samples if t >= WARM_S]
        if len(warm) >= 3:
            slope = slope_per_10min(warm)
            print(f"RSS slope after warm-up: {slope:+.2f} MiB per 10 minutes "
                  f"(goal: under 1)")
            return 0 if slope < 1.0 else 1
        print("too short to measure a slope (needs more than 5 minutes)")
        return 0
    finally:
        c.stop()
        done_with(root)


if __name__ == "__main__":
    sys.exit(main())
