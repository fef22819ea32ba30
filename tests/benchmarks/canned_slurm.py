"""Canned Slurm at scale: a bin_dir whose squeue, sprio and scontrol print, in Slurm 22.05's
own formats (lines taken from a real slurmctld, names and numbers varied), the state of a
large GPU cluster - for benchmarks of whole slurmscale processes (`plan`, a daemon pass)
where a real slurmctld holding 50,000 jobs would take longer to fill than to measure.

Writing commands (`scontrol update`, `create reservation`, ...) succeed and are logged.
The state is seeded: every run reads the same cluster.
"""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path
from typing import Any

from slurmscale.slurm.kv import SQUEUE_FIELDS
from tests.unit.conftest import base_config

POOLS = 10

# `scontrol show node -o` for one node, as 22.05 prints it (a powered-down CLOUD node)
NODE = ("NodeName={name} CoresPerSocket=1  CPUAlloc={cpus_alloc} CPUEfctv=96 CPUTot=96 "
        "CPULoad=N/A AvailableFeatures={feat},p5.48xlarge ActiveFeatures={feat},p5.48xlarge "
        "Gres=gpu:8 NodeAddr={addr} NodeHostName={addr} Port=6818  RealMemory=1 AllocMem=0 "
        "FreeMem=N/A Sockets=2 Boards=1 State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 "
        "Owner=N/A MCS_label=N/A Partitions={part}  BootTime=None SlurmdStartTime=None "
        "LastBusyTime={busy} CfgTRES=cpu=96,mem=1M,billing=96,gres/gpu=8 AllocTRES={tres} "
        "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
        "ExtSensorsTemp=n/s{reason}")

STATES = (["ALLOCATED+CLOUD"] * 6 + ["IDLE+CLOUD"] * 2 + ["IDLE+CLOUD+POWERED_DOWN"]
          + ["ALLOCATED+CLOUD+POWERING_UP"])

SHOW_CONFIG = """Configuration data as of 2026-11-30T12:00:00
PriorityMaxAge          = 7-00:00:00
PriorityType            = priority/multifactor
PriorityWeightAge       = 1000
PriorityWeightAssoc     = 0
PriorityWeightFairShare = 10000
PriorityWeightJobSize   = 100
PriorityWeightPartition = 0
PriorityWeightQOS       = 0
PriorityWeightTRES      = (null)
"""


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S")


def cluster_text(n_pending: int, n_running: int, n_nodes: int, now: float,
                 seed: int = 7) -> dict[str, str]:
    """What each read prints: nodes, jobs (squeue -O), sprio, reservations, config."""
    rng = random.Random(seed)
    per_pool = n_nodes // POOLS
    node_lines, allocated = [], []
    for p in range(POOLS):
        feat = "spot" if p % 2 == 0 else "on-demand"
        for i in range(1, per_pool + 1):
            name, state = f"p{p}-{i}", rng.choice(STATES)
            busy = _iso(now - rng.uniform(0, 1200)) if state.startswith("IDLE+CLOUD") \
                and "POWERED" not in state else "Unknown"
            alloc = state.startswith("ALLOCATED")
            if alloc:
                allocated.append((p, name))
            node_lines.append(NODE.format(
                name=name, feat=feat, addr="127.0.0.1" if "POWERED" not in state else name,
                state=state, part=f"gpu-p{p}", busy=busy,
                cpus_alloc=96 if alloc else 0,
                tres="cpu=96,mem=1M,gres/gpu=8" if alloc else "",
                reason=" Reason=nhc: GPU 3 Xid 79 [root@2026-11-30T11:00:00]"
                if rng.random() < 0.002 else ""))
    job_lines = []
    for j in range(n_pending):
        p = rng.randrange(POOLS)
        nodes = rng.choice([1] * 20 + [2, 4, 8, 16, 64])
        submit = now - rng.uniform(0, 86400)
        job_lines.append("|".join([
            str(100_000 + j), f"gpu-p{p}", str(nodes), "gres:gpu:8",
            rng.choice(["1:00:00", "4:00:00", "1-00:00:00", "UNLIMITED"]), _iso(submit),
            rng.choice(["Resources", "Priority", "PartitionNodeLimit"]),
            str(rng.randrange(1, 100_000)), f"user{rng.randrange(200)}", "PENDING",
            f"proj{rng.randrange(30)}", "(null)", _iso(now + 86400), "(null)",
            _iso(now + rng.uniform(60, 86400)) if rng.random() < 0.3 else "N/A",
            str(100_000 + j),  # (a job that is no array is its own ArrayJobID)
            "0-99%10" if rng.random() < 0.02 else "N/A"]) + "|")
    for r in range(min(n_running, len(allocated))):
        p, name = allocated[r]
        start = now - rng.uniform(0, 36000)
        job_lines.append("|".join([
            str(50_000 + r), f"gpu-p{p}", "1", "gres:gpu:8", "1-00:00:00",
            _iso(start - 60), "None", str(rng.randrange(1, 100_000)),
            f"user{rng.randrange(200)}", "RUNNING", f"proj{rng.randrange(30)}", "(null)",
            _iso(start + 86400), name, _iso(start), str(50_000 + r), "N/A"]) + "|")
    assert len(job_lines[0].split("|")) == len(SQUEUE_FIELDS) + 1
    sprio = "".join(f"{100_000 + j}|gpu-p{j % POOLS}|{rng.randrange(1, 100_000)}|"
                    f"{rng.randrange(1000)}|{rng.randrange(10000)}|{rng.randrange(100)}|0|0|\n"
                    for j in range(n_pending))
    return {"nodes": "\n".join(node_lines) + "\n", "jobs": "\n".join(job_lines) + "\n",
            "sprio": sprio, "res": "No reservations in the system\n", "config": SHOW_CONFIG}


SCONTROL = """#!/bin/sh
d={d}
case "$1 $2" in
  "show node") exec cat "$d/nodes.txt" ;;
  "show res"|"show reservation"|"show reservations") exec cat "$d/res.txt" ;;
  "show config") exec cat "$d/config.txt" ;;
esac
echo "$@" >> "$d/writes.log"
"""


def install(root: Path, n_pending: int, n_running: int, n_nodes: int, now: float) -> Path:
    """A bin_dir under `root` printing that cluster; returns it."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in cluster_text(n_pending, n_running, n_nodes, now).items():
        (root / f"{name}.txt").write_text(text)
    (bin_dir / "scontrol").write_text(SCONTROL.format(d=root))
    (bin_dir / "squeue").write_text(f'#!/bin/sh\nexec cat "{root}/jobs.txt"\n')
    (bin_dir / "sprio").write_text(f'#!/bin/sh\nexec cat "{root}/sprio.txt"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def config(root: Path, bin_dir: Path, n_nodes: int) -> dict[str, Any]:
    """A slurmscale config of POOLS pools over that cluster's nodes (governed and immediate
    alternately), its store and spool under `root`."""
    per_pool = n_nodes // POOLS
    template = base_config()["pools"][0]
    pools = [{**template, "name": f"p{p}", "partition": f"gpu-p{p}", "node_prefix": f"p{p}-",
              "max_nodes": per_pool, "policy": {"mode": "governed" if p % 2 else "immediate"}}
             for p in range(POOLS)]
    return base_config(pools=pools, slurm={"bin_dir": str(bin_dir)},
                       store_url=f"sqlite:///{root / 'state.db'}",
                       spool_dir=str(root / "spool"), socket_path=str(root / "s.sock"),
                       hook_log_file=str(root / "hooks.log"), log_file=str(root / "d.log"))
