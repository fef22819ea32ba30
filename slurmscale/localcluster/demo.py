"""The local demo: a real Slurm with cloud nodes, the moto EC2 server, the slurmscale daemon,
and a workload of one 4-node gang job and three single-node jobs that visibly get their
nodes, run, and are scaled down.

    python -m slurmscale.localcluster.demo [--keep] [--max-idle S] [--boot-delay S]
                                           [--slurm-root DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from slurmscale.hostlists import expand
from slurmscale.localcluster.cluster import ClusterError, LocalCluster
from slurmscale.localcluster.joins import Join, describe, joins
from slurmscale.localcluster.options import ClusterOptions
from slurmscale.localcluster.procs import stop_on_sigterm


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _snapshot(c: LocalCluster, jobs: dict[int, str]) -> str:
    states = ", ".join(f"{name}={c.job_state(j) or '?'}" for j, name in jobs.items())
    inst = len(c.cluster_instances())
    sinfo = c.slurm("sinfo", "-h", "-o", "%P %t %D %N").strip().replace("\n", " | ")
    return f"jobs: {states}\n           instances running: {inst}   sinfo: {sinfo}"


def where_the_time_went(c: LocalCluster, job: int, submitted: float, seen_running: float,
                        boots: list[Join]) -> list[str]:
    """The gang's wait, cut where each part hands over: Slurm calling ResumeProgram (its
    request in the daemon's audit log), the daemon's launch (CreateFleet answered), the
    instances booting (this cluster's boot delay stands in for EC2's), the nodes joining
    (slurmd registered), and Slurm starting the job once they had (its next periodic check of
    powered-up nodes: slurmctld's background loop, up to about 30 s; a job whose nodes are
    all up leaves CONFIGURING only then). Slurm's StartTime, where it is later than the
    registrations, is when it did; else the poll that saw it RUNNING."""
    nodes = set(expand(c.job(job).get("NodeList", "")))
    events = c.events()

    def first(kind: str) -> float | None:
        ats = [datetime.fromisoformat(e["at"]).timestamp() for e in events
               if e["kind"] == kind and e.get("node") and nodes & set(expand(e["node"]))]
        return min(ats) if ats else None
    requested, launched = first("request_received"), first("launched")
    mine = [j for j in boots if j.node in nodes]
    booting = min((j.booting for j in mine if j.booting), default=None)
    joined = max((j.registered for j in mine if j.registered), default=None)
    start = c.job(job).get("StartTime", "")
    started = seen_running
    if start and joined and (t := datetime.fromisoformat(start).timestamp()) >= joined:
        started = t
    steps = [("Slurm calls ResumeProgram (its request recorded)", requested),
             ("slurmscale launches the gang (CreateFleet answered)", launched),
             ("the instances boot (the cluster's boot delay)", booting),
             ("the nodes join (slurmd registered)", joined),
             ("Slurm starts the job (its periodic check of powered-up nodes)", started)]
    out, last = [], submitted
    for what, at in steps:
        if at is None:
            out.append(f"{what}: not seen")
            continue
        out.append(f"{what}: +{at - last:.1f}s")
        last = at
    out.append(f"total: {last - submitted:.1f}s (event times are whole seconds)")
    return out


def _until_completed(c: LocalCluster, jobs: dict[int, str], t0: float,
                     deadline: float) -> dict[int, float] | None:
    """Each job's start, seconds after `t0` (the gang's sbatch) as this poll sees it (up to
    5 s late), once every job completed; None: not by `deadline`."""
    started: dict[int, float] = {}
    while time.monotonic() < deadline:
        for j in jobs:
            if j not in started and c.job_state(j) in ("RUNNING", "COMPLETED"):
                started[j] = time.monotonic() - t0
                _say(f"{jobs[j]} (job {j}) started {started[j]:.0f}s after sbatch")
        if all(c.job_state(j) == "COMPLETED" for j in jobs):
            return started
        _say(_snapshot(c, jobs))
        time.sleep(5)
    return None


def time_to_run_table(report: str) -> str:
    """The report's "Time to run" table alone."""
    lines = report.splitlines()
    first = next((k for k, line in enumerate(lines) if line.startswith("Time to run")), None)
    if first is None:
        return "           (no launch measured yet)"
    rest = lines[first + 1:]
    end = next((k for k, line in enumerate(rest) if not line.startswith(" ")), len(rest))
    return "\n".join(lines[first:first + 1 + end])


def _print_joins(c: LocalCluster, gang: int, submitted_at: float,
                 started: dict[int, float]) -> None:
    """How each instance joined Slurm, and where the gang's seconds went."""
    _say("how each instance joined Slurm (its bootstrap: node tag from instance "
         "metadata, GPU check, slurmd; times from power-on):")
    seen = joins(c.root / "log")
    for join in seen:
        print(f"           {describe(join)}")
    if not seen:
        print(f"           (no bootstrap output in {c.root / 'log'}/boot-i-*.out)")
    _say("where the gang's seconds went, sbatch to RUNNING:")
    for line in where_the_time_went(c, gang, submitted_at, submitted_at + started[gang],
                                    seen):
        print(f"           {line}")


def run(args: argparse.Namespace) -> int:
    root = Path(tempfile.mkdtemp(prefix="slurmscale-demo-"))
    opts = ClusterOptions(boot_delay=args.boot_delay, min_idle=args.max_idle / 2,
                          max_idle=args.max_idle,
                          suspend_time=max(30, int(args.max_idle * 3)),  # Slurm's backstop
                          slurm_root=args.slurm_root)
    c = LocalCluster(root, opts)
    _say(f"starting munge, slurmctld, moto EC2 server and the slurmscale daemon in {root}")
    stop_on_sigterm()
    try:
        c.start()
    except ClusterError as e:
        print(f"demo: {e}", file=sys.stderr)
        shutil.rmtree(root, ignore_errors=True)
        return 2
    ok = False
    try:
        _say(f"cluster {c.name}: {c.slurm('scontrol', '--version').strip()}; "
             f"EC2 = moto at {c.moto_url}")
        print(c.slurm("sinfo"))
        gpu = "--gres=gpu:8"
        submitted_at = time.time()  # (Unix s: the events' and the joins' clock)
        jobs = {c.sbatch("-N", "4", gpu, "-p", "gpu-spot", "-J", "gang4",
                         "--wrap", "srun hostname; sleep 10"): "gang-4-nodes"}
        for i in range(3):
            jobs[c.sbatch("-N", "1", gpu, "-p", "gpu-spot", "-J", f"single{i}",
                          "--wrap", "sleep 5")] = f"single-{i}"
        _say(f"submitted {len(jobs)} jobs: one 4-node gang (32 GPUs) and three 1-node jobs")
        t0 = time.monotonic() - (time.time() - submitted_at)  # (the gang's sbatch)
        deadline = t0 + 300
        started = _until_completed(c, jobs, t0, deadline)
        if started is None:
            _say("jobs did not complete in time")
            return 1
        _print_joins(c, next(iter(jobs)), submitted_at, started)
        _say("each launch's time to run, as `slurmscale report` keeps it for any cluster:")
        print(time_to_run_table(c.cli("report", "--since", "1h").stdout))
        _say("all jobs COMPLETED; slurmscale's policy powers the idle nodes down within "
             f"{args.max_idle:g}s (Slurm then runs the suspend hook)")
        print(c.cli("plan").stdout)
        while time.monotonic() < deadline + 300 and c.cluster_instances():
            _say(_snapshot(c, jobs))
            time.sleep(5)
        left = len(c.cluster_instances())
        _say(f"instances still running: {left}")
        print("\nslurmscale's audit log (slurmscale events):")
        print(c.cli("events").stdout)
        print(c.cli("status").stdout)
        ok = left == 0
        _say("demo " + ("finished: every job ran, every instance was terminated"
                        if ok else "FAILED: instances left running"))
        if args.keep:
            _say(f"--keep: cluster left running; SLURM_CONF={c.conf}; Ctrl-C to stop")
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        c.stop()
        if ok and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            _say(f"logs kept in {root / 'log'}")
    return 0 if ok else 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep", action="store_true", help="leave the cluster up afterwards")
    p.add_argument("--max-idle", type=float, default=15.0,
                   help="seconds an idle node is kept at most (the pools' policy.max_idle_s)")
    p.add_argument("--boot-delay", type=float, default=5.0)
    p.add_argument("--slurm-root", default="/",
                   help="run the Slurm of this tree through chroot, e.g. the Slurm 24.11 "
                        "tree scripts/setup-slurm-chroot.sh builds")
    sys.exit(run(p.parse_args()))


if __name__ == "__main__":
    main()
