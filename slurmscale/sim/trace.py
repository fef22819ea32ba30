"""Job traces: `job_id,submit_s,duration_s,gpus,nodes` (extra columns ignored)."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path


class TraceError(ValueError):
    pass


@dataclass(frozen=True)
class TraceJob:
    job_id: str
    submit_s: float
    duration_s: float
    gpus: int
    nodes: int
    carry_in: bool = False

    def gpus_per_node(self, node_gpus: int) -> int:
        return node_gpus if self.nodes > 1 else min(self.gpus, node_gpus)


REQUIRED = ("job_id", "submit_s", "duration_s", "gpus", "nodes")


def load_trace(path: str | Path, carry_in: bool = False) -> list[TraceJob]:
    p = Path(path)
    try:
        f = p.open(newline="")
    except OSError as e:
        raise TraceError(f"cannot read trace {p}: {e.strerror}") from None
    jobs: list[TraceJob] = []
    with f:
        reader = csv.DictReader(f)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"trace {p} lacks column(s) {missing}; needs {list(REQUIRED)}")
        for i, row in enumerate(reader, start=2):
            try:
                submit = float(row["submit_s"])
                duration = float(row["duration_s"])
                gpus = int(row["gpus"])
                nodes = int(row["nodes"]) if row["nodes"] else max(1, math.ceil(gpus / 8))
            except (TypeError, ValueError):
                raise TraceError(f"trace {p} line {i}: bad number in {dict(row)}") from None
            if duration < 0 or gpus < 0 or nodes < 1:
                raise TraceError(f"trace {p} line {i}: negative duration/gpus or nodes < 1")
            if carry_in:
                # Still running at the window start: it occupies capacity from t=0 for the rest
                # of its run, and its queueing happened before the window.
                remaining = submit + duration
                if remaining <= 0:
                    continue
                jobs.append(TraceJob(row["job_id"], 0.0, remaining, gpus, nodes, True))
            else:
                jobs.append(TraceJob(row["job_id"], submit, duration, gpus, nodes))
    jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    return jobs
