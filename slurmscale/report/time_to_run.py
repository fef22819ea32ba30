"""Time to run, launch by launch: the phases between Slurm's resume call and the node's first
job, where each one's seconds go, and what shortens a slow one. Pure: rows in, figures out
(the daemon's launch-phase pass fills the rows, `report`, the metrics and `status` read them).

Each phase runs between two of the times a `LaunchPhasesRow` keeps; a phase is counted only
for a launch that has both. The bootstrap's times are the instance's clock (Amazon Time Sync
on EC2), the others the head node's and AWS's: a small negative difference between two
clocks is read as 0.

Where the seconds go on EC2 (EC2 user guide, "Instance launch" and "Initialize Amazon EBS
volumes"): the API and the hypervisor, the firmware and the OS start, and the first read of
each block of the image's volume, which EBS loads from S3 on its first access unless the
snapshot has Fast Snapshot Restore or the volume an initialization rate; then the bootstrap
(node-init.py), slurmd's registration, and Slurm's own start of the job (a gang's waits for
every node; a job leaves CONFIGURING on slurmctld's periodic check)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel

from slurmscale.report.quantiles import percentile
from slurmscale.store.rows import LaunchPhasesRow

# the bootstrap's tag (node_init.py writes it; the daemon reads it with the instance)
TAG_BOOT_TIMES = "slurmscale:boot-times"
# its keys -> the row's fields
BOOT_FIELDS = {"os": "os_s", "start": "bootstrap_s", "tag": "tagged_s", "checked": "checked_s",
               "slurmd": "slurmd_s"}
CLOCK_SLACK_S = 5.0  # two clocks this far apart read as the same time


@dataclass(frozen=True)
class Phase:
    name: str
    begins: str  # the row's field where it begins
    ends: str  # ... and where it ends
    what: str  # what it holds
    shorten: str  # what shortens it, where it is slow
    slow_s: float  # a median above this is called slow


PHASES: tuple[Phase, ...] = (
    Phase("resume->fleet", "requested_s", "answered_s",
          "Slurm's resume call to CreateFleet's answer (the hook, the daemon's pass, EC2's API)",
          "the hook pokes the daemon at once; single nodes wait `batch_window_seconds` to go in "
          "one CreateFleet; EC2 not answering or capacity errors show in the audit log", 30.0),
    Phase("boot", "ec2_launch_s", "bootstrap_s",
          "EC2's launch to the bootstrap's start (hypervisor, firmware, OS, cloud-init)",
          "the image's first read from its snapshot (Fast Snapshot Restore on the snapshot, "
          "or an initialization rate on the volume) and its first-boot work (cloud-init "
          "modules, package installs) are here; a smaller image or one with that work done "
          "at build time boots faster", 120.0),
    Phase("tag", "bootstrap_s", "tagged_s",
          "the bootstrap waiting for its node tag in the instance metadata",
          "the daemon tags right after CreateFleet answers: long here means CreateTags "
          "failed (`tag_failed` in the audit log) or tags are off in the instance metadata",
          30.0),
    Phase("checks", "tagged_s", "checked_s",
          "the bootstrap's checks (the munge key, the GPUs, the site's check_program)",
          "the site's `health.check_program` and the munge key's read are here", 60.0),
    Phase("slurmd", "checked_s", "slurmd_s", "slurmd's start",
          "slurmd's own start (configless: its first read of the config)", 30.0),
    Phase("register", "slurmd_s", "registered_s",
          "slurmd's start to the daemon's first pass that saw it registered",
          "includes up to one of the daemon's passes (`daemon.tick_seconds`)", 60.0),
    Phase("->job", "registered_s", "started_s",
          "the node up to its first job RUNNING (Slurm's start of the job)",
          "a gang's job waits for all its nodes; slurmctld ends CONFIGURING on its periodic "
          "check (up to about 30 s)", 60.0),
)
# the ends to end: Slurm's resume call, and the job's submission, to RUNNING
TOTALS: tuple[Phase, ...] = (
    Phase("resume->running", "requested_s", "started_s",
          "Slurm's resume call to the node's first job RUNNING", "", math.inf),
    Phase("sbatch->running", "submitted_s", "started_s",
          "the job's submission to RUNNING (its node launched for it)", "", math.inf),
)


def parse_boot_times(value: str) -> dict[str, float]:
    """The bootstrap's tag ("os=<t>,start=<t>,...") as row fields -> Unix s; what is not a
    known key with a finite number is left out (a tag anyone with CreateTags may write)."""
    out = {}
    for part in value.split(",")[:len(BOOT_FIELDS)]:
        key, sep, raw = part.partition("=")
        field = BOOT_FIELDS.get(key.strip())
        if not sep or field is None:
            continue
        try:
            t = float(raw)
        except ValueError:
            continue
        if math.isfinite(t) and 0 < t < 1e11:
            out[field] = t
    return out


def seconds(row: LaunchPhasesRow, phase: Phase) -> float | None:
    """How long the phase took for this launch (None: one of its ends is not known, or the
    two are further apart backwards than two clocks can be)."""
    a, b = getattr(row, phase.begins), getattr(row, phase.ends)
    if a is None or b is None or b - a < -CLOCK_SLACK_S:
        return None
    return max(b - a, 0.0)


def done(row: LaunchPhasesRow) -> Iterable[tuple[Phase, float]]:
    """Every phase and total this launch has both ends of."""
    for ph in PHASES + TOTALS:
        s = seconds(row, ph)
        if s is not None:
            yield ph, s


def kind(row: LaunchPhasesRow) -> str:
    """single or gang; "warm ..." for a warm pool's start (its boot skips a first boot's
    work: shown apart from the cold launches it is measured against)."""
    return ("warm " if row.warm else "") + ("gang" if row.job_nodes >= 2 else "single")


class PhaseFigure(BaseModel):
    phase: str
    n: int  # launches with both its ends
    median_s: float | None
    p95_s: float | None


class TimeToRun(BaseModel):
    """One pool's launches of one kind (single nodes or gangs), phase by phase."""

    pool: str
    kind: str
    launches: int
    phases: list[PhaseFigure]
    slow: list[str]  # what shortens each phase whose median is slow


def summarize(rows: Iterable[LaunchPhasesRow]) -> list[TimeToRun]:
    """Per pool and kind: each phase's and total's median and p95 over the launches that
    have both its ends."""
    groups: dict[tuple[str, str], list[LaunchPhasesRow]] = {}
    for r in rows:
        groups.setdefault((r.pool, kind(r)), []).append(r)
    out = []
    for (pool, k), rs in sorted(groups.items()):
        figures, slow = [], []
        for ph in PHASES + TOTALS:
            vals = [s for r in rs if (s := seconds(r, ph)) is not None]
            med = percentile(vals, 50)
            figures.append(PhaseFigure(phase=ph.name, n=len(vals), median_s=med,
                                       p95_s=percentile(vals, 95)))
            if med is not None and med > ph.slow_s:
                slow.append(f"{ph.name} {med:.0f}s ({ph.what}): {ph.shorten}")
        out.append(TimeToRun(pool=pool, kind=k, launches=len(rs), phases=figures, slow=slow))
    return out


def in_flight(row: LaunchPhasesRow, now: float) -> str:
    """Where a launch whose node has not registered is: "booting 2m10s, bootstrap not yet
    seen" (for `status`)."""
    since = row.answered_s if row.answered_s is not None else now
    took = max(now - since, 0.0)
    if row.slurmd_s is not None:
        where = "slurmd started, not registered yet"
    elif row.checked_s is not None:
        where = "checks passed, slurmd starting"
    elif row.tagged_s is not None:
        where = "bootstrap checking"
    elif row.bootstrap_s is not None:
        where = "bootstrap waiting for its node tag"
    else:
        where = "bootstrap not yet seen"
    return f"booting {int(took // 60)}m{int(took % 60):02d}s, {where}"
