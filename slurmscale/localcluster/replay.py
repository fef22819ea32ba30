"""Replay a job trace on the local cluster (real slurmctld and slurmd, the moto EC2 server, the
slurmscale daemon) and print the same JSON as `slurmscale simulate` for the `slurmscale`
policy, so the simulator can be checked against real Slurm.

    python -m slurmscale.localcluster.replay --trace T --time-scale S [--max-nodes N]
        [--boot-time B] [--gpus-per-node G] [--time-limit-factor F | --no-time-limits]
        [--no-accumulate] [--sim-trace OUT] [--slurm-root DIR] [--json]

N, B and G mean exactly what they mean to `simulate` (B in trace seconds). Everything that is
a time runs S times faster: submit times, run times (`sleep`), the boot delay, the policy's
and the holds' time knobs, the daemon's pass (the simulator's 60 s), Slurm's backfill interval
(the simulator's 30 s, at least Slurm's minimum of 1 s). Slurm's own clocks do not scale:
backfill's whole seconds, slurmctld's once-a-second loop that serves the main scheduler, its
batch_sched_delay; `simulate_args` hands them to the simulator S times longer. Waits are
measured from the real submission to the moment the job is seen RUNNING, and scaled back to
trace seconds.

Slurm keeps time limits in whole minutes, so a job's limit is rounded up to a minute of real
time; `--sim-trace OUT` writes the trace with those limits, and the JSON's `simulate_args` is
the rest of the `slurmscale simulate` command that models exactly the Slurm this ran on. The
local Slurm has no slurmdbd, and without it Slurm ignores the age and fair-share weights (its
log says so): priority is the job size factor alone, and the simulator is told the same.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurmscale.config import PoolPolicy
from slurmscale.localcluster.cluster import ClusterError, LocalCluster
from slurmscale.localcluster.options import ClusterOptions, PoolSpec
from slurmscale.localcluster.procs import stop_on_sigterm
from slurmscale.policy.limit_use import Learning
from slurmscale.policy.observe import slurm_time
from slurmscale.policy.reservations import ReservationKnobs
from slurmscale.sim.engine import SimCloud, SimResult
from slurmscale.sim.report import metrics
from slurmscale.sim.slurm_model import YEAR_S, SlurmModel
from slurmscale.sim.trace import TraceError, TraceJob, load_trace
from slurmscale.store.repo import Store
from slurmscale.store.rows import utc

POLL_S = 0.2  # how often the replay looks at the queue: the resolution of a measured start
POLICY = "slurmscale"
# what `simulate` needs besides N, B, G and the --sim-trace to model the Slurm replayed on
SIM_ARGS = ("--policy", POLICY, "--slurm-param", "PriorityWeightAge=0",
            "--slurm-param", "PriorityWeightFairshare=0")


@dataclass
class Replayed:
    job: TraceJob
    limit_min: int | None  # Slurm's time limit in whole minutes; None: UNLIMITED
    job_id: int = 0
    submitted: float = 0.0  # monotonic
    started: float | None = None
    ended: float | None = None


def scaled_policy(scale: float) -> dict[str, Any]:
    """The pool policy's defaults with every time (and GPU-hours of queue) divided by S."""
    out: dict[str, Any] = {}
    for name, f in PoolPolicy.model_fields.items():
        if name.endswith("_s") or name == "queue_gpu_hours":
            out[name] = float(f.default) / scale
    return out


def scaled_holds(scale: float) -> dict[str, Any]:
    k, how = ReservationKnobs(), Learning()
    # (limit_use: auto learns a share of limits, which scaling leaves alone; its window
    # and how often it is learned again are times)
    return {"accumulate_after_s": k.accumulate_after_s / scale,
            "max_hold_s": k.max_hold_s / scale,
            "end_margin_s": k.end_margin_s / scale,
            "hold_budget_gpu_hours": k.hold_budget_gpu_hours / scale,
            "limit_use_auto": {"window_days": how.window_s / 86400 / scale,
                               "every_s": max(1.0, how.every_s / scale)}}


def hold_margin(scale: float) -> float:
    """The --hold-end-margin (trace s) that gives the simulator's holds the Slurm reservation
    this replay's daemon made: max_hold_s + margin, scaled, rounded to Slurm's whole minutes."""
    k = ReservationKnobs()
    real = 60 * max(1, round((k.max_hold_s + k.end_margin_s) / scale / 60))
    return real * scale - k.max_hold_s


def bf_interval_s(model: SlurmModel, scale: float) -> int:
    """The real Slurm's bf_interval: the model's, S times faster, but whole seconds, >= 1."""
    return max(1, round(model.bf_interval / scale))


def timing_args(model: SlurmModel, scale: float) -> list[str]:
    """What `simulate` needs to see this Slurm's own clocks, which do not scale with S, in
    trace seconds: the power-up check (every 30 s), backfill's interval (at least Slurm's
    1 s, 200 trace s at 200x), and the main scheduler's (slurmctld's 1 s loop, and
    batch_sched_delay left at Slurm's default: the model's defaults are these). Without
    the last the simulator starts a job the moment its nodes free, and real Slurm at 200x up
    to 200 trace s later, per start in a chain."""
    return ["--slurm-param", f"power_up_check={model.power_up_check * scale:g}",
            "--slurm-param", f"bf_interval={bf_interval_s(model, scale) * scale:g}",
            "--slurm-param", f"sched_tick={model.sched_tick * scale:g}",
            "--slurm-param", f"batch_sched_delay={model.batch_sched_delay * scale:g}"]


def slurm_conf_lines(model: SlurmModel, scale: float) -> list[str]:
    """The simulator's Slurm model, written for a Slurm running S times faster."""
    max_age_min = max(1, round(model.priority_max_age / scale / 60))
    return [
        f"SchedulerParameters=bf_interval={bf_interval_s(model, scale)},"
        "bf_resolution=1,"
        f"bf_window={max(1, math.ceil(model.bf_window / scale / 60))},"
        f"bf_max_job_test={model.bf_max_job_test}",
        # Slurm ignores the age and fair-share weights without slurmdbd (slurmctld says so
        # in its log): the simulator is given the same (SIM_ARGS)
        "PriorityWeightAge=0",
        f"PriorityWeightJobSize={int(model.priority_weight_job_size)}",
        "PriorityWeightFairshare=0",
        f"PriorityMaxAge={max_age_min}",
        "PriorityCalcPeriod=1",
        "SlurmdParameters=config_overrides",
    ]


def limits(jobs: list[TraceJob], model: SlurmModel, scale: float) -> list[int | None]:
    """Each job's limit in whole real minutes (as Slurm keeps it), None for UNLIMITED."""
    out: list[int | None] = []
    for j in jobs:
        lim = model.limit(j.duration_s, j.time_limit_s)
        out.append(None if lim >= YEAR_S else max(1, math.ceil(lim / scale / 60)))
    return out


def write_sim_trace(path: Path, jobs: list[TraceJob], mins: list[int | None],
                    scale: float) -> None:
    """The trace as this replay gave it to Slurm: limits as Slurm kept them, in trace s."""
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["job_id", "submit_s", "duration_s", "gpus", "nodes", "time_limit_s"])
        for j, m in zip(jobs, mins, strict=True):
            w.writerow([j.job_id, f"{j.submit_s:g}", f"{j.duration_s:g}", j.gpus, j.nodes,
                        "" if m is None else f"{m * 60 * scale:g}"])


def _queue(c: LocalCluster) -> dict[int, str]:
    out = c.slurm("squeue", "-h", "-a", "-t", "all", "-o", "%i %T", check=False)
    states: dict[int, str] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            states[int(parts[0])] = parts[1]
    return states


def replay(c: LocalCluster, runs: list[Replayed], scale: float, gpus_per_node: int,
           deadline_s: float) -> tuple[float, float]:
    """Submit each job at its time, watch them start and end; returns when it started
    (monotonic, and wall clock)."""
    t0, wall0 = time.monotonic(), time.time()
    pending = list(runs)
    live: dict[int, Replayed] = {}
    while pending or live:
        now = time.monotonic()
        if now - t0 > deadline_s:
            raise TimeoutError(f"{len(live)} job(s) still queued or running and "
                               f"{len(pending)} unsubmitted after {deadline_s:.0f}s")
        while pending and pending[0].job.submit_s / scale <= now - t0:
            r = pending.pop(0)
            j = r.job
            gpn = j.gpus_per_node(gpus_per_node)
            limit = "UNLIMITED" if r.limit_min is None else str(r.limit_min)
            r.job_id = c.sbatch("-N", str(j.nodes), f"--gres=gpu:{gpn}", "-p", "gpu",
                                "--ntasks-per-node=1", f"--cpus-per-task={gpn}",
                                "-J", j.job_id[:40], f"--time={limit}", "-o", "/dev/null",
                                "--wrap", f"sleep {j.duration_s / scale:.3f}")
            r.submitted = time.monotonic()
            live[r.job_id] = r
        states = _queue(c)
        seen = time.monotonic()
        for jid, r in list(live.items()):
            st = states.get(jid, "COMPLETED")  # gone from the queue: over
            if r.started is None and st not in ("PENDING", "CONFIGURING"):
                r.started = seen
            if st in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                      "BOOT_FAIL", "OUT_OF_MEMORY", "PREEMPTED"):
                r.ended = seen
                del live[jid]
        nxt = pending[0].job.submit_s / scale - (time.monotonic() - t0) if pending else POLL_S
        time.sleep(max(0.01, min(POLL_S, nxt)))
    return t0, wall0


CONFIGURED = re.compile(r"^\[(\S+)\] job_time_limit: Configuration for JobId=\d+ complete")


def power_up_phase(slurmctld_log: Path, wall0: float, period: float = 30.0) -> float | None:
    """Where slurmctld's periodic configuration check falls, in real seconds after `wall0`
    modulo its period, read from its log (local-time stamps); None if no job powered up."""
    try:
        text = slurmctld_log.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        m = CONFIGURED.match(line)
        if m:
            at = slurm_time(m.group(1))
            if at is not None:
                return (at - wall0) % period
    return None


def result(c: LocalCluster, runs: list[Replayed], scale: float, gpus_per_node: int,
           t0: float) -> SimResult:
    """What happened, in the simulator's terms and trace seconds."""
    r = SimResult(POLICY, gpus_per_node=gpus_per_node)
    r.jobs = len(runs)
    for x in runs:
        if x.started is None:
            continue
        r.jobs_completed += 1
        wait = max(0.0, (x.started - x.submitted) * scale)
        r.waits.append(wait)
        if x.job.nodes >= 2:
            r.gang_waits.append(wait)
            r.gang_starts.append(((x.started - t0) * scale, x.job.job_id))
        r.busy_gpu_s += x.job.duration_s * x.job.gpus_per_node(gpus_per_node) * x.job.nodes
    assert c.cfg is not None
    store = Store(c.cfg.store_url)
    try:
        rows = store.instances(limit=1_000_000)
    finally:
        store.close()
    now = datetime.now(UTC)
    for i in rows:  # still up at the end: counted to now
        end = utc(i.terminated_at) or now
        r.node_on_s += (end - utc(i.launched_at)).total_seconds() * scale
    r.on_gpu_s = r.node_on_s * gpus_per_node
    r.node_launches = len(rows)
    r.scale_up_actions = len({i.gang_id for i in rows})
    r.reservations_created = sum(1 for e in c.events() if e["kind"] == "reservation_create")
    r.end_s = (time.monotonic() - t0) * scale
    return r


def options(nodes: int, gpus: int, boot_s: float, scale: float, slurm_root: str,
            model: SlurmModel, holds: bool = True) -> ClusterOptions:
    policy = scaled_policy(scale)
    tick = max(0.5, SimCloud().tick_s / scale)
    return ClusterOptions(
        # one CPU per GPU (declared: slurmd may run on fewer cores), so Slurm's job size
        # factor, the mean of node and CPU shares, is the simulator's
        pools=[PoolSpec("gpu", "gpu-", nodes, gpus=gpus, cpus=gpus, capacity_type="on-demand",
                        policy=policy)],
        boot_delay=boot_s / scale, min_idle=policy["min_idle_s"],
        max_idle=policy["max_idle_s"],
        # Slurm's backstop only: slurmscale releases idle nodes itself
        suspend_time=max(30, math.ceil(3 * policy["max_idle_s"]),
                         math.ceil(2 * scaled_holds(scale)["max_hold_s"])),
        tick_seconds=tick, batch_window=min(0.5, tick), slurm_root=slurm_root,
        slurm_conf_extra=slurm_conf_lines(model, scale),
        reservations={**scaled_holds(scale), "enabled": holds}, resume_timeout=600)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m slurmscale.localcluster.replay",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--time-scale", type=float, required=True, metavar="S")
    ap.add_argument("--max-nodes", type=int, default=8)
    ap.add_argument("--boot-time", type=float, default=300.0)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--time-limit-factor", type=float, default=3.0)
    ap.add_argument("--no-time-limits", action="store_true")
    ap.add_argument("--no-accumulate", action="store_true",
                    help="no holds (reservations accumulating nodes for gangs)")
    ap.add_argument("--sim-trace", default=None, metavar="OUT")
    ap.add_argument("--slurm-root", default="/")
    ap.add_argument("--deadline", type=float, default=3600.0, help="real seconds")
    ap.add_argument("--keep", action="store_true", help="keep the cluster's directory")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    for name, v, lo in (("--time-scale", a.time_scale, 1.0), ("--max-nodes", a.max_nodes, 1),
                        ("--gpus-per-node", a.gpus_per_node, 1), ("--boot-time", a.boot_time, 0),
                        ("--time-limit-factor", a.time_limit_factor, 1.0)):
        if not (math.isfinite(v) and v >= lo) or (name == "--max-nodes" and v > 64):
            print(f"replay: {name} {v!r} must be a number >= {lo:g}"
                  + (" and <= 64 (one slurmd each)" if name == "--max-nodes" else ""),
                  file=sys.stderr)
            return 2
    try:
        jobs = load_trace(a.trace)
    except TraceError as e:
        print(f"replay: {e}", file=sys.stderr)
        return 2
    too_big = [j.job_id for j in jobs if j.nodes > a.max_nodes]
    if too_big:
        print(f"replay: job {too_big[0]} needs more than --max-nodes {a.max_nodes} nodes",
              file=sys.stderr)
        return 2
    model = SlurmModel(time_limits=not a.no_time_limits, time_limit_factor=a.time_limit_factor)
    mins = limits(jobs, model, a.time_scale)
    if a.sim_trace:
        write_sim_trace(Path(a.sim_trace), jobs, mins, a.time_scale)
    runs = [Replayed(j, m) for j, m in zip(jobs, mins, strict=True)]
    root = Path(tempfile.mkdtemp(prefix="slurmscale-replay-"))
    c = LocalCluster(root, options(a.max_nodes, a.gpus_per_node, a.boot_time, a.time_scale,
                                   a.slurm_root, model, holds=not a.no_accumulate))
    stop_on_sigterm()
    try:
        try:
            c.start()
        except ClusterError as e:
            print(f"replay: {e}", file=sys.stderr)
            return 2
        t0, wall0 = replay(c, runs, a.time_scale, a.gpus_per_node, a.deadline)
        r = result(c, runs, a.time_scale, a.gpus_per_node, t0)
        phase = power_up_phase(root / "log" / "slurmctld.log", wall0, model.power_up_check)
    finally:
        c.stop()
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    out = {"trace": a.trace, "slurm_model": "real", "time_scale": a.time_scale,
           "simulate_args": [*SIM_ARGS, "--max-nodes", str(a.max_nodes), "--boot-time",
                             f"{a.boot_time:g}", "--gpus-per-node", str(a.gpus_per_node),
                             *timing_args(model, a.time_scale),
                             "--hold-end-margin", f"{hold_margin(a.time_scale):g}",
                             *(["--no-accumulate"] if a.no_accumulate else []),
                             "--slurm-param",
                             f"power_up_check_phase={(phase or 0.0) * a.time_scale:.0f}"]
           + (["--trace", a.sim_trace] if a.sim_trace else []),
           "policies": {POLICY: metrics(r, SimCloud(boot_s=a.boot_time))}}
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        m = out["policies"][POLICY]
        print(" ".join(f"{k}={m[k]}" for k in ("jobs_completed", "wait_p50_s", "wait_p95_s",
                                               "gang_wait_p50_s", "gang_wait_p95_s",
                                               "idle_gpu_hours", "node_launches")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
