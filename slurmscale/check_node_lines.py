"""`slurmscale check`: Slurm's node lines against what the pool's instance type gives.

`slurm-conf` renders each pool's CPUs, RealMemory and Gres from the config and, where the
config leaves them out, from EC2's shape of the pool's instance type. A pool moved to another
type without the lines rendered again (and slurmctld restarted) keeps the old sizes: every
node of the new type then registers with fewer CPUs or less memory than its line says,
slurmctld sets it INVALID, and each launch runs into ResumeTimeout. `check` compares what the
running slurmctld holds (`scontrol show node`: CPUTot, RealMemory, Gres) with what the render
gives now, per pool (one line naming the first node that differs and how many do)."""

from __future__ import annotations

import re

from slurmscale.check import Problem, SlurmView
from slurmscale.config import Config
from slurmscale.hostlists import expand
from slurmscale.model import InstanceShape
from slurmscale.slurmconf import node_size

_GPUS = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")


def gres_gpus(gres: str) -> int:
    """GPUs on a Gres value as scontrol prints it: "gpu:8", "gpu:h100:8(S:0-1)", "(null)"."""
    return sum(int(n) for n in _GPUS.findall(gres))


def check_node_lines(cfg: Config, view: SlurmView,
                     shapes: dict[str, InstanceShape] | str) -> list[Problem]:
    out: list[Problem] = []
    known = shapes if isinstance(shapes, dict) else {}
    for p in cfg.pools:
        cpus, mem, _ = node_size(p, known)
        want = {"CPUs": cpus, "RealMemory": mem, "GPUs": p.gpus_per_node}
        wrong: list[tuple[str, str]] = []
        for name in expand(p.node_range()):
            size = view.sizes.get(name)
            if size is None:
                continue
            have = {"CPUs": size[0], "RealMemory": size[1], "GPUs": str(gres_gpus(size[2]))}
            diff = [f"{k} {have[k]} (the pool's type gives {v})" for k, v in want.items()
                    if v is not None and have[k] != str(v)]
            if diff:
                wrong.append((name, ", ".join(diff)))
        if wrong:
            name, what = wrong[0]
            out.append(Problem("error", "node_line", f"pool {p.name}: Slurm's node line for "
                               f"{name} has {what}" + (f"; {len(wrong)} nodes differ"
                                                       if len(wrong) > 1 else "")
                               + f" ({p.instance_types[0]}): render `slurmscale slurm-conf` "
                               "again and restart slurmctld, or its nodes register short "
                               "and never join"))
    return out
