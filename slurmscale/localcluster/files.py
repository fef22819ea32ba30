"""What the local cluster writes and runs beside its processes: its slurmscale.yaml, the head
of its slurm.conf, the instances' nvidia-smi, and the end of a terminated instance's job
steps (cluster.py starts and stops the processes)."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from typing import Any, Protocol

from slurmscale.localcluster.options import ClusterOptions


class Cluster(Protocol):
    """What these files are written from: the local cluster (cluster.LocalCluster) as it
    stands once its ports, munge, moto and VPC are up."""

    root: Path
    o: ClusterOptions
    name: str
    conf: Path
    chroot: Path | None
    moto_url: str
    events_queue_url: str | None
    lt_name: str
    subnet: str
    ctld_port: int
    munge_socket: Path

    @property
    def prefix(self) -> list[str]: ...

    def metrics_port(self) -> int: ...


def slurmscale_yaml(c: Cluster) -> dict[str, Any]:
    """The local cluster's slurmscale.yaml: everything under its directory, EC2 at moto (or
    through a test's proxy), the pools as the options give them."""
    r = c.root
    return {
        "cluster_name": c.name,
        "aws": {"region": "us-east-1",
                "endpoint_url": (c.o.daemon_ec2_endpoint(c.moto_url)
                                 if c.o.daemon_ec2_endpoint else c.moto_url),
                "max_attempts": c.o.aws_max_attempts,
                **({"interruption_queue_url": c.events_queue_url}
                   if c.events_queue_url else {}),
                "sqs_endpoint_url": c.moto_url,
                # (the stack's zone: Route 53 straight to moto, not through a test's
                # EC2 proxy)
                **({"route53_endpoint_url": c.moto_url} if c.o.aws_stack else {}),
                **c.o.aws},
        "store_url": c.o.store_url or f"sqlite:///{r / 'slurmscale' / 'state.db'}",
        "socket_path": str(r / "run" / "slurmscale.sock"),
        "spool_dir": str(r / "slurmscale" / "spool"),
        "log_file": str(r / "log" / "slurmscale-daemon.log"),
        "hook_log_file": str(r / "log" / "slurmscale-hooks.log"),
        "hooks_dir": str(r / "hooks"),
        "node_address": "loopback",
        "slurm": {"bin_dir": "/usr/bin", "command_prefix": c.prefix,
                  "conf": str(c.conf), "configless": c.o.configless},
        "daemon": {"tick_seconds": c.o.tick_seconds,
                   "batch_window_seconds": c.o.batch_window, **c.o.daemon},
        "power_saving": {"suspend_time": c.o.suspend_time, "suspend_timeout": 30,
                         "resume_timeout": c.o.resume_timeout},
        "reservations": {"max_hold_s": c.o.suspend_time - 1, **c.o.reservations},
        "capacity": dict(c.o.capacity),
        **({"metrics": {"address": "127.0.0.1", "port": c.metrics_port()}}
           if c.o.metrics else {}),
        **c.o.extra_config,
        "pools": [{
            "name": p.name, "partition": p.name, "node_prefix": p.prefix,
            "max_nodes": p.max_nodes, "gpus_per_node": p.gpus, "cpus_per_node": p.cpus,
            # (this machine's memory, not the type's: the node line takes what it gets)
            "real_memory_mb": 1024,
            "instance_types": [p.instance_type], "capacity_type": p.capacity_type,
            "launch_template": {"name": c.lt_name,
                                "version": p.launch_template_version},
            "subnets": [c.subnet],
            "boot_time_s": max(10.0, c.o.boot_delay * 5),  # slurmd up in boot_delay
            "policy": {"min_idle_s": c.o.min_idle, "max_idle_s": c.o.max_idle,
                       **p.policy},
            **({"fallback_pool": p.fallback_pool} if p.fallback_pool else {}),
            **({"spot": p.spot} if p.spot else {}),
            **p.extra,
        } for p in c.o.pools],
    }


def slurm_conf_head(c: Cluster) -> str:
    """slurm.conf's own lines, before the Include of slurmscale's: everything on loopback,
    under the cluster's directory."""
    r = c.root
    host = socket.gethostname().split(".")[0]
    cred = f",cred_expire={c.o.cred_expire}" if c.o.cred_expire else ""
    return f"""\
# Local slurmscale cluster {c.name} (generated; everything on loopback)
ClusterName={c.name}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={c.ctld_port}
AuthType=auth/munge
AuthInfo=socket={c.munge_socket}{cred}
CredType=cred/munge
SlurmUser={c.o.slurm_user}
SlurmdUser=root
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}/%n
SlurmctldPidFile={r / 'run'}/slurmctld.pid
SlurmdPidFile={r / 'run'}/slurmd-%n.pid
SlurmctldLogFile={r / 'log'}/slurmctld.log
SlurmdLogFile={r / 'log'}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
PriorityType=priority/multifactor
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
{"" if c.chroot else "CommunicationParameters=NoAddrCache"}
KillWait=5
MinJobAge=600
SlurmdTimeout={c.o.slurmd_timeout}
"""


def write_nvidia_smi(root: Path) -> Path:
    """The instances' nvidia-smi: as many GPUs as the booting instance's hardware has
    (SLURMSCALE_LOCAL_GPUS, its pool's); a test breaks a GPU for a node's next N boots by
    writing N to gpu/broken-<node> (each boot that sees it counts it down)."""
    path = root / "bin" / "nvidia-smi"
    path.parent.mkdir(exist_ok=True)
    broken = root / "gpu" / "broken-"
    path.write_text(f"""#!/bin/sh
n=${{SLURMSCALE_LOCAL_GPUS:-8}}
f="{broken}$SLURMSCALE_NODE"
if [ -s "$f" ] && [ "$(cat "$f")" -gt 0 ]; then
  echo $(( $(cat "$f") - 1 )) > "$f"; n=$((n - 1))
fi
i=0
while [ $i -lt $n ]; do echo "GPU $i: Local GPU (UUID: GPU-local-$i)"; i=$((i + 1)); done
""")
    path.chmod(0o755)
    return path


def kill_job_steps(root: Path, node: str) -> None:
    """A terminated instance takes its jobs' processes with it; here they would outlive
    the stopped slurmd (slurmstepd runs in its own session). They are found by the node's
    slurmd log, which every step this node's slurmd started holds open, and killed."""
    log_path = str(root / "log" / f"slurmd-{node}.log")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if not (proc / "cmdline").read_bytes().startswith(b"slurmstepd"):
                continue
            if any(os.readlink(fd) == log_path for fd in (proc / "fd").iterdir()):
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:
            continue  # gone meanwhile
