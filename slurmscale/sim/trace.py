"""Job traces: `job_id,submit_s,duration_s,gpus,nodes`, optionally `time_limit_s` (Slurm's
time limit, seconds; empty: none given), `user` (for fair-share) and `priority` (an admin-set
priority that replaces multifactor's); other columns are ignored."""

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
    time_limit_s: float | None = None
    user: str = ""
    priority: float | None = None
    # how the job saves its work, so a run cut short (interrupted, requeued, its node failed)
    # resumes from its last save instead of from the start: every `checkpoint_s` of its run
    # (None: never on its own), and at once when Slurm signals it (a pool's grace_signal)
    checkpoint_s: float | None = None
    saves_on_signal: bool = False

    def gpus_per_node(self, node_gpus: int) -> int:
        return node_gpus if self.nodes > 1 else min(self.gpus, node_gpus)


REQUIRED = ("job_id", "submit_s", "duration_s", "gpus", "nodes")
# A trace is seconds since its start: a century bounds any real one (and keeps inf, nan and
# 1e300 out: they hung the simulation for minutes).
MAX_SECONDS = 100 * 365 * 86400.0
MAX_NODES = 100_000
MAX_GPUS = 64 * MAX_NODES


def load_trace(path: str | Path, carry_in: bool = False) -> list[TraceJob]:
    p = Path(path)
    try:
        f = p.open(newline="", encoding="utf-8")
    except OSError as e:
        raise TraceError(f"cannot read trace {p}: {e.strerror}") from None
    try:
        with f:
            return _rows(p, csv.DictReader(f), carry_in)
    except UnicodeDecodeError as e:
        raise TraceError(f"trace {p} is not UTF-8 text (byte {e.start})") from None
    except csv.Error as e:
        raise TraceError(f"trace {p} is not CSV: {e}") from None


def _rows(p: Path, reader: csv.DictReader[str], carry_in: bool) -> list[TraceJob]:
    jobs: list[TraceJob] = []
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise TraceError(f"trace {p} lacks column(s) {missing}; needs {list(REQUIRED)}")
    for i, row in enumerate(reader, start=2):
        try:
            submit = float(row["submit_s"])
            duration = float(row["duration_s"])
            gpus = int(row["gpus"])
            nodes = int(row["nodes"]) if row["nodes"] else max(1, math.ceil(gpus / 8))
            limit = _optional(row.get("time_limit_s"))
            prio = _optional(row.get("priority"))
        except (TypeError, ValueError):
            raise TraceError(f"trace {p} line {i}: bad number in {dict(row)}") from None
        if not all(math.isfinite(x) and abs(x) <= MAX_SECONDS for x in (submit, duration)):
            raise TraceError(f"trace {p} line {i}: submit_s {row['submit_s']!r} and "
                             f"duration_s {row['duration_s']!r} must be finite seconds "
                             f"within {MAX_SECONDS:.0f}")
        for name, x in (("time_limit_s", limit), ("priority", prio)):
            if x is not None and not (math.isfinite(x) and 0 <= x <= MAX_SECONDS):
                raise TraceError(f"trace {p} line {i}: {name} {row[name]!r} must be a "
                                 f"finite number within 0..{MAX_SECONDS:.0f}")
        if limit is not None and limit < 1:
            raise TraceError(f"trace {p} line {i}: time_limit_s {row['time_limit_s']!r} is "
                             "under a second")
        user = (row.get("user") or "").strip()
        if len(user) > 256:
            raise TraceError(f"trace {p} line {i}: user name longer than 256 characters")
        if duration < 0 or gpus < 0 or nodes < 1:
            raise TraceError(f"trace {p} line {i}: negative duration/gpus or nodes < 1")
        if nodes > MAX_NODES or gpus > MAX_GPUS:
            raise TraceError(f"trace {p} line {i}: {nodes} nodes / {gpus} GPUs is more "
                             "than any cluster")
        if carry_in:
            # Still running at the window start: it occupies capacity from t=0 for the rest
            # of its run, and its queueing happened before the window.
            remaining = submit + duration
            if remaining <= 0:
                continue
            jobs.append(TraceJob(row["job_id"], 0.0, remaining, gpus, nodes, True,
                                 None if limit is None else max(1.0, limit + submit),
                                 user, prio))
        else:
            jobs.append(TraceJob(row["job_id"], submit, duration, gpus, nodes, False, limit,
                                 user, prio))
    jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    return jobs


def _optional(text: str | None) -> float | None:
    """An optional numeric column: missing or empty is None."""
    if text is None or not text.strip():
        return None
    return float(text)
