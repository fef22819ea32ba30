"""Benchmark: one observe pass (the daemon's per-tick queue read: fixed-field `squeue` + parse
+ snapshot) at 30,000 pending jobs on a real local Slurm, against `squeue --json` + json.load
on the same queue, measured in the same run; then the priority read (`sprio`, fixed fields +
parse) on the same 30,000 jobs made eligible (released, their nodes drained: sprio lists no
held job), next to the squeue read again.

    sudo .venv/bin/python -m tests.benchmarks.observe_queue [JOBS]

Needs root and Debian's slurmctld/munge (scripts/setup.sh). Jobs are submitted held, so
nothing runs and the queue stays put while it is read. Each read runs in a fresh process so
its peak memory is its own: the Slurm command's peak RSS and the Python heap peak of the parse.
Targets: under 0.5 s and 100 MB (issue 7); the observe pass (squeue parsed as it prints,
then the snapshot) within 1.3x of the bare fixed-field squeue read whole, each timed in its
own fresh processes, the two alternated so the machine's load touches both alike (issue 17).
sprio lists released jobs as slurmctld's priority calculation reaches them: the benchmark
waits until it lists every one (or says how many it measured).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from slurmscale.localcluster.cluster import LocalCluster
from slurmscale.localcluster.options import ClusterOptions, PoolSpec
from slurmscale.slurm.kv import SQUEUE_FORMAT

REPEAT = 5


def worker(kind: str, cfg_path: str, mode: str) -> None:
    """One read in this fresh process. mode "time": wall seconds (and how much of it is the
    Slurm command); mode "mem": the same read under tracemalloc (which slows Python several
    times over, so it is never timed) for the Python heap peak, plus the command's peak RSS."""
    from slurmscale.config_file import load_config
    from slurmscale.daemon.queue.queue_view import build_snapshot
    from slurmscale.gc_tuning import tune_gc
    from slurmscale.slurm.cli_backend import SlurmCLI
    from slurmscale.slurm.kv import SPRIO_FORMAT, parse_sprio, parse_squeue_fixed

    tune_gc()  # as the daemon does once started
    cfg = load_config(cfg_path)
    cli = SlurmCLI(cfg.slurm)
    if mode == "mem":
        tracemalloc.start()
    t0 = time.perf_counter()
    squeue = ("squeue", "-h", "-t", "PD,CF,R", "-S", "i", "-O", SQUEUE_FORMAT)
    if kind == "bare":  # the baseline: the command alone, its output read whole
        n = len(cli.run(*squeue).splitlines())
        t_cmd = t_parse = time.perf_counter() - t0
    elif kind == "text":  # the daemon's read: parsed as squeue prints it
        jobs = cli.run_parsed(parse_squeue_fixed, *squeue)
        t_cmd = t_parse = time.perf_counter() - t0
        snap = build_snapshot(cfg, [], jobs, time.time())
        n = len(snap.jobs)
    elif kind == "sprio":
        out = cli.run("sprio", "-h", "-o", SPRIO_FORMAT)
        t_cmd = time.perf_counter() - t0
        n = len({p.job_id for p in parse_sprio(out)})
        t_parse = time.perf_counter() - t0
    else:
        out = cli.run("squeue", "--json")
        t_cmd = time.perf_counter() - t0
        data = json.loads(out)
        # 22.05 ignores -t with --json and lists finished jobs too: filter here
        n = sum(1 for j in data["jobs"] if "PENDING" in str(j.get("job_state")))
        t_parse = time.perf_counter() - t0
    wall = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] if mode == "mem" else 0
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"s": wall, "cmd_s": t_cmd, "parse_s": t_parse, "cmd_mb": child_kb / 1024,
                      "py_mb": peak / 2**20, "jobs": n}))


def _run(kind: str, cfg_path: Path, mode: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-m", "tests.benchmarks.observe_queue", "--worker",
                          kind, str(cfg_path), mode], capture_output=True, text=True,
                         check=True, timeout=600)
    return dict(json.loads(out.stdout))


def _summary(kind: str, runs: list[dict[str, float]], cfg_path: Path) -> dict[str, float]:
    """The median timed run; memory from one traced run."""
    mid = sorted(runs, key=lambda r: r["s"])[len(runs) // 2]
    mem = _run(kind, cfg_path, "mem")
    return {**mid, "cmd_mb": max(r["cmd_mb"] for r in [*runs, mem]), "py_mb": mem["py_mb"]}


def measure(kind: str, cfg_path: Path) -> dict[str, float]:
    """Median of REPEAT timed runs; memory from one traced run."""
    return _summary(kind, [_run(kind, cfg_path, "time") for _ in range(REPEAT)], cfg_path)


def measure_paired(kind: str, base: str, cfg_path: Path
                   ) -> tuple[dict[str, float], dict[str, float], float]:
    """`kind` and its baseline `base` timed in alternation (base, kind, base, kind, ...), so a
    change of the machine's load touches both alike; with the median of the per-pair
    ratios."""
    pairs = [(_run(base, cfg_path, "time"), _run(kind, cfg_path, "time"))
             for _ in range(REPEAT)]
    ratios = sorted(k["s"] / b["s"] for b, k in pairs)
    return (_summary(kind, [k for _, k in pairs], cfg_path),
            _summary(base, [b for b, _ in pairs], cfg_path), ratios[len(ratios) // 2])


def wait_for_sprio(cfg_path: Path, want: int, timeout: float = 180.0) -> int:
    """sprio lists a released job once slurmctld's priority calculation has reached it: wait
    (up to `timeout`) until it lists all `want`; returns how many it lists then."""
    deadline = time.monotonic() + timeout
    while True:
        n = int(_run("sprio", cfg_path, "time")["jobs"])
        if n >= want or time.monotonic() >= deadline:
            return n
        time.sleep(5)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    n_jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 30_000
    if os.geteuid() != 0 or shutil.which("slurmctld") is None:
        sys.exit("needs root and slurmctld (run scripts/setup.sh first)")
    root = Path(tempfile.mkdtemp(prefix="ss-bench-"))
    c = LocalCluster(root, ClusterOptions(
        pools=[PoolSpec("gpu", "g-", 4)], start_daemon=False,
        slurm_conf_extra=[f"MaxJobCount={n_jobs * 2}", "SchedulerParameters=defer"]))
    c.start()
    try:
        t0 = time.monotonic()

        def submit(i: int) -> None:
            c.slurm("sbatch", "-H", "-p", "gpu", "-N", str(1 + i % 4), "--gres=gpu:8",
                    "-t", "4:00:00", "-J", f"b{i}", "--wrap", "true", timeout=120)

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(submit, range(n_jobs)))
        print(f"submitted {n_jobs:,} held jobs in {time.monotonic() - t0:.0f}s")
        text, bare, ratio = measure_paired("text", "bare", c.cfg_path)
        js = measure("json", c.cfg_path)
        # sprio lists eligible pending jobs only: drain the nodes, then release the holds
        c.slurm("scontrol", "update", "nodename=g-[1-4]", "state=drain", "reason=benchmark")
        ids = c.slurm("squeue", "-h", "-t", "PD", "-o", "%i", timeout=120).split()
        for i in range(0, len(ids), 2000):
            c.slurm("scontrol", "release", ",".join(ids[i:i + 2000]), timeout=300)
        listed = wait_for_sprio(c.cfg_path, n_jobs)
        prio = measure("sprio", c.cfg_path)
        text_eligible = measure("text", c.cfg_path)
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
    assert bare["jobs"] == text["jobs"] == js["jobs"] == n_jobs, (bare, text, js)
    assert text_eligible["jobs"] == n_jobs, text_eligible
    print(f"observe pass at {n_jobs:,} pending jobs (Slurm 22.05, median of {REPEAT}; memory = "
          "peak RSS of the Slurm command + peak Python heap of the parse)")
    print(f"  {'the bare squeue -O fixed fields':<38} read       {bare['s']:5.2f} s")
    for name, r in (("slurmscale (squeue -O, parsed as read)", text), ("squeue --json", js)):
        print(f"  {name:<38} read+parse {r['parse_s']:5.2f} s (command {r['cmd_s']:.2f} s)"
              f"  +snapshot {r['s']:5.2f} s  {r['cmd_mb']:5.0f} MB + {r['py_mb']:4.0f} MB")
    print(f"  ratio json / slurmscale: {js['parse_s'] / text['parse_s']:.1f}x time, "
          f"{(js['cmd_mb'] + js['py_mb']) / (text['cmd_mb'] + text['py_mb']):.1f}x memory")
    ok = text["parse_s"] < 0.5 and text["cmd_mb"] + text["py_mb"] < 100
    print(f"  target (read + parse) < 0.5 s and < 100 MB: {'OK' if ok else 'OVER'}")
    print(f"  observe pass (read + parse + snapshot) / the bare squeue, timed in alternation, "
          f"median of {REPEAT} pairs: {ratio:.2f}x  "
          f"{'OK' if ratio <= 1.3 else 'OVER'} (target <= 1.3x, issue 17)")
    print(f"the same jobs eligible (released, nodes drained): sprio listed {listed:,} of "
          f"{n_jobs:,} after waiting for it" + (" (measured on those)" if listed < n_jobs
                                                else ""))
    for name, r in (("sprio -o fixed fields", prio), ("squeue -O fixed fields", text_eligible)):
        print(f"  {name:<38} read+parse {r['parse_s']:5.2f} s (command {r['cmd_s']:.2f} s)"
              f"  {r['cmd_mb']:5.0f} MB + {r['py_mb']:4.0f} MB")
    print(f"  ratio sprio / squeue: {prio['parse_s'] / text_eligible['parse_s']:.1f}x time")


if __name__ == "__main__":
    main()
