"""How long each node of the local cluster took to join Slurm, read from what the parts
themselves wrote: the node bootstrap's console lines (log/boot-<instance>.out: booting, its
node tag seen, checks passed and slurmd started) and slurmctld's log ("Node X now responding":
registered). The demo prints it; the join benchmark times it against CreateFleet's answer."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from slurmscale.node_init import PREFIX

_LINE = re.compile(re.escape(PREFIX) + r"(\S+) (.*)")
_NODE = re.compile(r"^(i-[0-9a-f]+) \(.*\) is node (\S+):")
_RESPONDING = re.compile(r"^\[(\S+)\] Node (\S+) now responding")


@dataclass
class Join:
    instance_id: str
    node: str = ""
    booting: float | None = None  # Unix seconds: the bootstrap started (power-on)
    tag_seen: float | None = None  # its node tag read from metadata
    slurmd_started: float | None = None  # checks passed, slurmd exec'd
    registered: float | None = None  # slurmctld heard from that slurmd (first time after)


def _bootstrap(path: Path) -> Join:
    j = Join(path.stem.removeprefix("boot-"))
    for line in path.read_text(errors="replace").splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        at, msg = datetime.fromisoformat(m.group(1)).timestamp(), m.group(2)
        if msg == "booting":
            j.booting = at
        elif (n := _NODE.match(msg)) is not None:
            j.node, j.tag_seen = n.group(2), at
        elif msg.startswith("checks passed"):
            j.slurmd_started = at
    return j


def joins(log_dir: Path) -> list[Join]:
    """Every instance that booted, oldest first, with its node's registration after it."""
    out = sorted((_bootstrap(p) for p in log_dir.glob("boot-i-*.out")),
                 key=lambda j: j.booting or 0.0)
    registered: dict[str, list[float]] = {}
    ctld = log_dir / "slurmctld.log"
    if ctld.exists():
        for line in ctld.read_text(errors="replace").splitlines():
            m = _RESPONDING.match(line)
            if m:  # slurmctld writes local time without a zone
                registered.setdefault(m.group(2), []).append(
                    datetime.fromisoformat(m.group(1)).timestamp())
    for j in out:
        if j.slurmd_started is not None:
            later = [t for t in registered.get(j.node, []) if t >= j.slurmd_started - 0.001]
            j.registered = min(later) if later else None
    return out


def describe(j: Join) -> str:
    def rel(t: float | None) -> str:
        return "-" if t is None or j.booting is None else f"+{t - j.booting:.2f}s"
    return (f"{j.node or '?':<8} {j.instance_id}: tag seen {rel(j.tag_seen)}, bootstrap done "
            f"{rel(j.slurmd_started)}, slurmd registered {rel(j.registered)}")
