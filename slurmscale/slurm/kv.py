"""Parsers for Slurm's text output: `scontrol show ... -o` lines and fixed-field squeue."""

from __future__ import annotations

import re

from slurmscale.model import QueueJob

# A key starts a token: start of line or whitespace, then CamelCase (maybe with / or :) and "=".
_KEY = re.compile(r"(?:^|\s)([A-Z][A-Za-z0-9_/:.]*)=")


def parse_oneliner(line: str) -> dict[str, str]:
    """Split one `scontrol show X -o` line into its Key=Value pairs (values may hold spaces)."""
    out: dict[str, str] = {}
    matches = list(_KEY.finditer(line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


SQUEUE_FIELDS = (
    "JobID", "Partition", "NumNodes", "tres-per-node", "tres-per-job", "TimeLimit",
    "SubmitTime", "Reason", "PriorityLong", "UserName", "State",
)
SQUEUE_FORMAT = ",".join(f"{f}:|" for f in SQUEUE_FIELDS)

_GPU = re.compile(r"gres[:/]gpu(?::[A-Za-z0-9_.-]+)?:(\d+)")


def gpus_from_tres(text: str) -> int:
    """`gres:gpu:8` (22.05), `gres/gpu:h100:8` (23.11+) -> 8; nothing -> 0."""
    m = _GPU.search(text or "")
    return int(m.group(1)) if m else 0


def parse_time_limit(text: str) -> int | None:
    """Slurm's [D-]HH:MM:SS / MM:SS / MM -> seconds; UNLIMITED / NOT_SET -> None."""
    t = text.strip()
    if not t or t.upper() in {"UNLIMITED", "NOT_SET", "INFINITE", "N/A"}:
        return None
    days = 0
    if "-" in t:
        d, t = t.split("-", 1)
        days = int(d)
    parts = [int(p) for p in t.split(":")]
    if len(parts) == 1:
        h, m, s = 0, parts[0], 0
    elif len(parts) == 2:
        h, m, s = 0, parts[0], parts[1]
    else:
        h, m, s = parts[-3], parts[-2], parts[-1]
    return ((days * 24 + h) * 60 + m) * 60 + s


def parse_squeue_fixed(text: str) -> list[QueueJob]:
    """Parse `squeue -h -O <SQUEUE_FORMAT>` output (one job per line, fields ending in '|')."""
    jobs: list[QueueJob] = []
    n = len(SQUEUE_FIELDS)
    for line in text.splitlines():
        if not line.strip():
            continue
        f = [x.strip() for x in line.split("|")]
        if len(f) < n:
            raise ValueError(f"squeue line has {len(f)} fields, expected {n}: {line!r}")
        jobs.append(QueueJob(
            job_id=f[0],
            partitions=tuple(p for p in f[1].split(",") if p),
            num_nodes=int(f[2]) if f[2].isdigit() else 1,
            gpus_per_node=gpus_from_tres(f[3]) or 0,
            time_limit_s=parse_time_limit(f[5]),
            submit_time=f[6],
            reason=f[7],
            priority=int(f[8]) if f[8].lstrip("-").isdigit() else 0,
            user=f[9],
            state=f[10],
        ))
    return jobs
