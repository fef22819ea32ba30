"""Benchmark: CreateFleet's answer -> each node registered with slurmctld, on the local
cluster (real Slurm 22.05, moto behind the recording EC2 proxy, the daemon, instances booting
through the node bootstrap against the loopback metadata emulator), split into
- tagged: the daemon's CreateTags for the node answered;
- tag seen: the bootstrap read its node tag from instance metadata;
- bootstrap done: checks passed (the GPU check's nvidia-smi), slurmd exec'd;
- registered: slurmctld logged the node responding;
and, per gang, registered (its last node) -> configured: slurmctld's log line "Configuration
for JobId=N complete", its periodic check of powered-up jobs (job_time_limit, every 30 s in
slurmctld's background loop): the job runs only then.
And the bootstrap's own share (its start to slurmd exec, less any wait for the tag), against
a bare `python3 -c pass` timed in the same run, alternately: the floor of any Python bootstrap.
Five 4-node gangs, each on nodes of its own; medians (min-max) over the 20 nodes.

    sudo .venv/bin/python -m tests.benchmarks.node_join [ROUNDS]

The local "instances" power on (start the bootstrap) as soon as moto has them running (boot
delay 0): on EC2 the kernel and cloud-init come first (tens of seconds), so the tag has long
been written when the bootstrap asks; here the bootstrap may have to wait for it.
"""

from __future__ import annotations

import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurmscale.localcluster.cluster import LocalCluster
from slurmscale.localcluster.joins import joins
from slurmscale.localcluster.options import ClusterOptions, PoolSpec
from slurmscale.policy.boots import TAG_BOOT_ERROR
from slurmscale.policy.observe import slurm_time
from tests.benchmarks.scratch import done_with
from tests.support.ec2_proxy import EC2Proxy

GANG = 4
CONFIGURED = re.compile(r"^\[(\S+)\] \w+: Configuration for JobId=(\d+) complete")


def _stats(xs: list[float]) -> str:
    return (f"{statistics.median(xs):6.2f} s  ({min(xs):.2f}-{max(xs):.2f})" if xs
            else "     -")


def _configured(log: Path) -> dict[int, float]:
    """Job id -> when slurmctld logged its configuration complete (Unix s)."""
    out = {}
    for line in log.read_text(errors="replace").splitlines():
        m = CONFIGURED.match(line)
        if m and (at := slurm_time(m.group(1))) is not None:
            out[int(m.group(2))] = at
    return out


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    proxy = EC2Proxy(upstream="").start()

    def via_proxy(moto_url: str) -> str:
        proxy.upstream = moto_url
        return proxy.url

    root = Path(tempfile.mkdtemp(prefix="ss-bench-join-"))
    c = LocalCluster(root, ClusterOptions(
        pools=[PoolSpec("gpu-spot", "spot-", GANG * rounds)], boot_delay=0.0,
        tick_seconds=2.0, daemon_ec2_endpoint=via_proxy))
    python_floor: list[float] = []
    phase = random.Random(43)
    try:
        c.start()
        jobs: list[int] = []
        for r in range(rounds):
            first = r * GANG + 1
            job = c.sbatch("-N", str(GANG), "--gres=gpu:8", "-p", "gpu-spot", "-w",
                           f"spot-[{first}-{first + GANG - 1}]", "--wrap", "true")
            jobs.append(job)
            c.wait_job(job, {"COMPLETED"}, 180)
            t = time.perf_counter()  # the baseline, between the rounds
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            python_floor.append(time.perf_counter() - t)
            # (the next gang at a random phase of slurmctld's 30-s check: back to back, each
            # would come the same few seconds after the check its predecessor ran at)
            time.sleep(phase.uniform(0.0, 30.0))
        fleets = [k for k in proxy.fleet_calls() if k.status == 200]
        tags = {k.params["ResourceId.1"]: k.done for k in proxy.calls
                if k.action == "CreateTags" and k.params.get("Tag.1.Key") != TAG_BOOT_ERROR}
        rows: dict[str, list[float]] = {k: [] for k in (
            "tagged", "tag seen", "bootstrap done", "registered", "bootstrap's own",
            "of which waiting for the tag")}
        for j in joins(root / "log"):
            if None in (j.booting, j.tag_seen, j.slurmd_started, j.registered):
                continue
            n = int(j.node.split("-")[1])
            answered = fleets[(n - 1) // GANG].done
            assert j.booting and j.tag_seen and j.slurmd_started and j.registered
            rows["tagged"].append(tags[j.instance_id] - answered)
            rows["tag seen"].append(j.tag_seen - answered)
            rows["bootstrap done"].append(j.slurmd_started - answered)
            rows["registered"].append(j.registered - answered)
            waited = max(0.0, tags[j.instance_id] - j.booting)
            rows["of which waiting for the tag"].append(waited)
            rows["bootstrap's own"].append(j.slurmd_started - j.booting - waited)
        print(f"CreateFleet answered -> ... ({len(rows['registered'])} nodes, {rounds} gangs "
              f"of {GANG}; median, min-max)")
        for name, xs in rows.items():
            print(f"  {name:<30} {_stats(xs)}")
        configured = _configured(root / "log" / "slurmctld.log")
        last: dict[int, float] = {}
        for j in joins(root / "log"):
            if j.registered:
                g = (int(j.node.split("-")[1]) - 1) // GANG
                last[g] = max(last.get(g, 0.0), j.registered)
        waits = [configured[jid] - last[g] for g, jid in enumerate(jobs)
                 if g in last and jid in configured]
        print(f"  {'last node registered -> job configured (per gang)':<30} {_stats(waits)}")
        floor = statistics.median(python_floor)
        own = statistics.median(rows["bootstrap's own"])
        print(f"  {'python3 -c pass (baseline)':<30} {_stats(python_floor)}")
        print(f"bootstrap's own share: {own:.2f} s = {own / floor:.1f}x a bare interpreter "
              "start (goal: under 2 s)")
        return 0 if own < 2.0 else 1
    finally:
        c.stop()
        proxy.stop()
        done_with(root)


if __name__ == "__main__":
    sys.exit(main())
