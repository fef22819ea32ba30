"""Parsers for Slurm's text output: `scontrol show ... -o` lines and fixed-field squeue."""

from __future__ import annotations

import functools
import itertools
import logging
import math
import operator
import re
from collections.abc import Iterable
from typing import Generic, TypeVar, cast

from slurmscale.hostlists import HostlistError, expand
from slurmscale.model import (
    JobPriority,
    PriorityWeights,
    QueueJob,
    QueueRead,
    SlurmReservation,
    next_read,
)

R = TypeVar("R")
log = logging.getLogger(__name__)

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


# What slurmscale reads of a node: a node line carries ~40 keys and is read for every node
# every pass, so only these are picked out.
NODE_KEYS = ("NodeName", "State", "NodeAddr", "NodeHostName", "Reason", "Partitions",
             "LastBusyTime", "AllocTRES")


def parse_node_line(line: str, keys: tuple[str, ...] = NODE_KEYS) -> dict[str, str]:
    """`keys` of one `scontrol show node -o` line, as parse_oneliner splits them (a value
    runs to the next Key= token), without splitting the other ~30: each key found by its
    first " Key=" (a Reason quoting "State=x" cannot shadow the real State, which comes
    first), each value ended by the next key - or, for a value that cannot hold a space
    (a name, a state, a time, a TRES list), by the first space."""
    out: dict[str, str] = {}
    for key in keys:
        tag = key + "="
        if line.startswith(tag):
            start = len(tag)
        else:
            i = line.find(" " + tag)
            if i < 0:
                continue
            start = i + 1 + len(tag)
        if key in _SPACED:
            m = _KEY.search(line, start)
            out[key] = line[start:m.start() if m else len(line)].strip()
        else:  # a value without spaces ends at the first one
            end = line.find(" ", start)
            out[key] = line[start:] if end < 0 else line[start:end]
    return out


# Of NODE_KEYS, those whose values may hold spaces (an admin's or a health check's words)
_SPACED = frozenset({"Reason"})


SQUEUE_FIELDS = (
    "JobID", "Partition", "NumNodes", "tres-per-node", "TimeLimit", "SubmitTime", "Reason",
    "PriorityLong", "UserName", "State", "Account", "Reservation", "EndTime", "NodeList",
    "StartTime", "ArrayJobID", "ArrayTaskID",
)
SQUEUE_FORMAT = ",".join(f"{f}:|" for f in SQUEUE_FIELDS)

_GPU = re.compile(r"gres[:/]gpu(?::[A-Za-z0-9_.-]+)?:(\d+)")


@functools.lru_cache(maxsize=4096)
def array_tasks(spec: str) -> tuple[int, int]:
    """squeue's ArrayTaskID -> (tasks it stands for, the array's `%` throttle or 0).
    A pending array is ONE squeue line for all its pending tasks ("0-19%5", "1,3,7-9",
    "1-99:2"); a started task, one number; "N/A": not an array (1, 0). Counted, never
    expanded (a 100,000-task array is arithmetic, not 100,000 values); anything else counts
    as one task."""
    if not spec or spec == "N/A":
        return 1, 0
    spec, _, throttle = spec.partition("%")
    n = 0
    try:
        for part in spec.split(","):
            rng, _, step = part.partition(":")
            lo, _, hi = rng.partition("-")
            a = int(lo)
            b = int(hi) if hi else a
            s = int(step) if step else 1
            if b < a or s < 1:
                return 1, 0
            n += (b - a) // s + 1
        return max(1, n), int(throttle) if throttle.isdigit() else 0
    except ValueError:
        return 1, 0


@functools.lru_cache(maxsize=4096)
def gpus_from_tres(text: str) -> int:
    """`gres:gpu:8` (22.05), `gres/gpu:h100:8` (23.11+) -> 8; nothing -> 0."""
    m = _GPU.search(text or "")
    return int(m.group(1)) if m else 0


@functools.lru_cache(maxsize=4096)
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


def _items(kv: dict[str, str], key: str) -> tuple[str, ...]:
    v = kv.get(key, "")
    return () if v in ("", "(null)") else tuple(x for x in v.split(",") if x)


def parse_reservations(text: str) -> list[SlurmReservation]:
    """`scontrol show res -o`; "No reservations in the system" gives []."""
    out = []
    for line in text.splitlines():
        if not line.startswith("ReservationName="):
            continue
        kv = parse_oneliner(line)
        nodes = kv.get("Nodes", "")
        try:
            names = tuple(expand(nodes)) if nodes not in ("", "(null)") else ()
        except HostlistError as e:
            # someone else's reservation slurmscale cannot read must not stop the pass
            log.warning("reservation %s skipped: %s", kv.get("ReservationName", "?"), e)
            continue
        out.append(SlurmReservation(
            name=kv.get("ReservationName", ""),
            nodes=names,
            users=_items(kv, "Users"), accounts=_items(kv, "Accounts"),
            flags=frozenset(_items(kv, "Flags")), start_time=kv.get("StartTime", ""),
            end_time=kv.get("EndTime", ""), state=kv.get("State", "")))
    return out


class LineMemo(Generic[R]):
    """The records one read's lines gave, kept for the next read of the same command: a line
    squeue (or `scontrol show node -o`) prints again unchanged gives back the very record it
    gave before, unparsed. Most of a queue is the same from one pass to the next, so a pass
    parses what changed, and the observe layer after it (daemon/queue_view.QueueView) knows an
    unchanged job by its record's identity. Holds one read's lines (the last), never more."""

    def __init__(self) -> None:
        self.last: dict[str, R] = {}
        self.serial: int | None = None  # the last read's (QueueRead.serial), None: no read
        self.line_of: dict[str, str] = {}  # (squeue's) job id -> its line in `last`


def parse_squeue_fixed(text: str | Iterable[str],
                       memo: LineMemo[QueueJob] | None = None) -> list[QueueJob]:
    """Parse `squeue -h -O <SQUEUE_FORMAT>` output (one job per line, fields ending in '|'):
    the whole text, or its lines as they arrive (SlurmCLI.run_parsed; each line keeps its
    newline, which lands after the last '|' where nothing is read). Runs every pass over the
    whole queue: kept to one split per line and cached conversions; with `memo`, a line the
    last read printed too is not parsed again, and the read comes back as a QueueRead that
    says what changed since the memo's last read."""
    if memo is not None:
        return _parse_against(text.splitlines() if isinstance(text, str) else list(text),
                              memo)
    jobs: list[QueueJob] = []
    # the two array fields come last; a line without them (canned output, a wrapper that
    # trims) is read as a job that is not an array
    n = SQUEUE_FIELDS.index("ArrayJobID") + 1
    arrays = len(SQUEUE_FIELDS) + 1
    parts_of: dict[str, tuple[str, ...]] = {}
    skipped = 0
    for line in text.splitlines() if isinstance(text, str) else text:
        f = line.split("|")
        if len(f) < n:
            if line.strip():
                skipped += 1  # one line slurmscale cannot read must not stop the pass
            continue
        # `Field:|` (no width) pads nothing, so no field needs stripping.
        parts = parts_of.get(f[1])
        if parts is None:
            parts = parts_of[f[1]] = tuple(p for p in f[1].split(",") if p)
        nodes, prio, acct, resv, state = f[2], f[7], f[10], f[11], f[9]
        if state == EXPEDITING:
            state = "PENDING"  # (25.11+: see EXPEDITING below)
        pending = state == "PENDING"  # a pending job's EndTime/NodeList are only estimates
        try:
            limit = parse_time_limit(f[4])
        except ValueError:
            skipped += 1
            continue
        job = QueueJob(
            f[0], parts, int(nodes) if nodes.isascii() and nodes.isdigit() else 1,
            gpus_from_tres(f[3]), limit, f[5], f[6],
            int(prio) if prio.isascii() and prio.lstrip("-").isdigit() else 0, f[8], state,
            "" if acct == "(null)" else acct, "" if resv == "(null)" else resv,
            "" if pending else f[12], "" if pending else f[13], "" if pending else f[14],
            f[14] if pending else "",
            *(_array_fields(f[15], f[16]) if len(f) >= arrays else _NO_ARRAY))
        jobs.append(job)
    if skipped:
        log.warning("squeue: %d line(s) slurmscale cannot read skipped", skipped)
    return jobs


def _parse_against(lines: list[str], memo: LineMemo[QueueJob]) -> QueueRead:
    """The read's lines against the memo's: each line printed last time too gives back its
    record, the others are parsed (as parse_squeue_fixed parses them); the read says what
    changed, and the memo is brought up to date in place. Every line is looked up at C
    speed, with no loop of Python's own over the lines: at 50,000 jobs a pass at rest costs
    a hash lookup a line, and the rest follows what changed (a set difference only when
    jobs left the queue)."""
    last, line_of = memo.last, memo.line_of
    recs: list[QueueJob | None] = list(map(last.get, lines))
    new_at = list(itertools.compress(range(len(lines)),
                                     map(operator.is_, recs, itertools.repeat(None))))
    parsed = parse_squeue_fixed([lines[i] for i in new_at]) if new_at else []
    if len(parsed) == len(new_at):
        for i, job in zip(new_at, parsed, strict=True):
            recs[i] = job
        if starts_over(len(new_at), len(lines)):
            return _start_over(lines, cast(list[QueueJob], recs), memo)
    else:  # a line it could not read (skipped, said once): records matched by job id
        got = iter(parsed)
        nxt: QueueJob | None = next(got, None)
        for i in new_at:
            if nxt is not None and lines[i].split("|", 1)[0] == nxt.job_id:
                recs[i], nxt = nxt, next(got, None)
    # the last read's lines not printed again: a changed job's old line (found by its id),
    # and, when the count says some job left, the lines no longer there
    gone = [old for old in map(line_of.get, [j.job_id for j in parsed]) if old is not None]
    if len(lines) - len(new_at) + len(gone) != len(last):
        gone = list(last.keys() - set(lines))
    dropped = [last.pop(ln) for ln in gone]
    for j, ln in zip(dropped, gone, strict=True):
        if line_of.get(j.job_id) == ln:
            del line_of[j.job_id]
    for i in new_at:
        rec = recs[i]
        if rec is not None:
            last[lines[i]] = rec
            line_of[rec.job_id] = lines[i]
    jobs = cast(list[QueueJob], recs if len(parsed) == len(new_at)
                else [r for r in recs if r is not None])
    read = QueueRead(jobs, next_read(), memo.serial, parsed, dropped)
    memo.serial = read.serial
    return read


# Past this share of a read's records new, what is kept of the last read is worth less than
# bringing it up to date record by record costs (each PriorityCalcPeriod prints every
# pending job's line anew): the memo is made afresh from the read, which then says no change,
# and the queue view starts over too (daemon/queue/queue_view.py). Not below START_OVER_MIN
# records, where either way costs a few milliseconds. Measured:
# tests/benchmarks/pass_mix.py.
START_OVER = 0.3
START_OVER_MIN = 2000


def starts_over(changed: int, records: int) -> bool:
    return records >= START_OVER_MIN and changed > START_OVER * records


def _start_over(lines: list[str], jobs: list[QueueJob], memo: LineMemo[QueueJob]
                ) -> QueueRead:
    """The read when most of its lines are new: the memo made afresh from it, in C."""
    memo.last = dict(zip(lines, jobs, strict=True))
    memo.line_of = dict(zip(map(_JOB_ID, jobs), lines, strict=True))
    read = QueueRead(jobs, next_read())
    memo.serial = read.serial
    return read


_JOB_ID = operator.attrgetter("job_id")
_NO_ARRAY = ("", 1, 0)


def _array_fields(array_job: str, task_spec: str) -> tuple[str, int, int]:
    """(ArrayJobID, tasks, throttle) of an array job's line; ("", 1, 0) for any other job."""
    if task_spec in ("", "N/A"):
        return _NO_ARRAY
    tasks, throttle = array_tasks(task_spec)
    return array_job, tasks, throttle


# sprio: job id, partition, then the priority and its weighted factors (age, fair-share, job
# size, partition, QOS), each field ended by '|' so a value never runs into the next
SPRIO_FORMAT = "%i|%r|%Y|%A|%F|%J|%P|%Q|"


def parse_sprio(text: str) -> list[JobPriority]:
    """Parse `sprio -h -o <SPRIO_FORMAT>`: one line per pending job and partition. A line
    slurmscale cannot read is skipped with a warning, never the whole read."""
    out: list[JobPriority] = []
    skipped = 0
    finite = math.isfinite
    for line in text.splitlines():
        f = line.split("|")  # (no width given: nothing padded; float() allows blanks anyway)
        if len(f) < 8:
            if line.strip():
                skipped += 1
            continue
        try:
            prio, age, fs, size, part, qos = map(float, f[2:8])
        except ValueError:
            skipped += 1
            continue
        if not finite(prio + age + fs + size + part + qos):  # (one inf or nan makes it so)
            skipped += 1
            continue
        out.append(JobPriority(f[0], f[1], prio, age, fs, size, part, qos))
    if skipped:
        log.warning("sprio: %d line(s) slurmscale cannot read skipped", skipped)
    return out


# sbatch --requeue=expedite and SlurmctldParameters=enable_expedited_requeue (Slurm 25.11)
EXPEDITED_REQUEUE = (25, 11)
# The state such a job is in from its node's failure until it starts again: squeue prints it
# EXPEDITING (compact state PD) and `-t PD` leaves it out, `-t EXPEDITING` lists it (measured
# on 26.05: 57 s of it while its lost node powered down and up). It is pending demand; 22.05's
# squeue refuses the name, so it is asked for on 25.11+ only.
EXPEDITING = "EXPEDITING"


def release_of(text: str) -> tuple[int, int] | None:
    """Slurm's release (major, minor) from its version text (`scontrol --version`:
    "slurm-wlm 26.05.5"; SLURM_VERSION in `scontrol show config`: "22.05.8"); None: none in
    it."""
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m[1]), int(m[2])) if m else None


def parse_show_config(text: str) -> dict[str, str]:
    """`scontrol show config`: one `Key = Value` per line."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def priority_weights(config: dict[str, str]) -> PriorityWeights | None:
    """The age weights from `scontrol show config` (parse_show_config's dict); None unless
    PriorityType is priority/multifactor (priority/basic orders by submission: no factors)."""
    if config.get("PriorityType", "") != "priority/multifactor":
        return None
    try:
        weight = float(config.get("PriorityWeightAge", "0").split()[0] or 0)
        max_age = parse_time_limit(config.get("PriorityMaxAge", "7-00:00:00"))
    except ValueError:
        return None
    if not math.isfinite(weight) or max_age is None:
        return None
    return PriorityWeights(weight, float(max_age))
