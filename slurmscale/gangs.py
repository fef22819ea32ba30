"""From pending hook requests to launch and release decisions (pure: no I/O, no clock).

Each node's wanted state is the kind of the latest request naming it (resume -> wanted up,
suspend/resume-fail -> wanted down), so replaying, duplicating or reordering-by-crash the
same requests converges on one outcome: a hook run twice launches once.

Grouping: a multi-node job's nodes (from SLURM_RESUME_FILE) form one all-or-nothing gang;
single-node jobs and nodes no job claims are coalesced per pool into one batch, once the
oldest of them has waited `batch_window` seconds, so a burst of small jobs costs one
CreateFleet per pool instead of one per node.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from slurmscale.model import Gang
from slurmscale.slurm.resume_file import ResumeFileError, parse_resume_file
from slurmscale.spool import RequestKind


@dataclass(frozen=True)
class PendingRequest:
    id: str
    kind: RequestKind
    nodes: tuple[str, ...]
    resume_file: str | None
    received_at: float


@dataclass(frozen=True)
class RequestPlan:
    launch: tuple[Gang, ...]
    release: tuple[tuple[str, RequestKind, str], ...]  # (node, why, request id)
    already_up: tuple[str, ...]
    done: tuple[str, ...]
    deferred: tuple[str, ...]
    next_due: float | None
    unknown_nodes: tuple[str, ...] = ()


def _jobs_of(req: PendingRequest) -> dict[str, int | None]:
    """node -> job id (None where no job of the resume file claims it)."""
    out: dict[str, int | None] = dict.fromkeys(req.nodes)
    if req.resume_file:
        try:
            rf = parse_resume_file(req.resume_file)
        except ResumeFileError:
            return out  # validated by the hook; a bad file here degrades to single nodes
        for job in rf.jobs:
            for n in job.nodes:
                if n in out:
                    out[n] = job.job_id
    return out


def plan_requests(
    requests: Iterable[PendingRequest],
    active_nodes: set[str],
    pool_of: Callable[[str], str | None],
    now: float,
    batch_window: float,
) -> RequestPlan:
    reqs = sorted(requests, key=lambda r: (r.received_at, r.id))
    jobs_of = {r.id: _jobs_of(r) for r in reqs}  # each resume file parsed once per plan
    deferred: list[str] = []
    has_release = any(r.kind is not RequestKind.RESUME for r in reqs)
    next_due: float | None = None
    sizes = [Counter(jobs_of[r.id].values()) for r in reqs]
    # a gang is launched the pass its request comes: it flushes the singles batch with it
    # (one CreateFleet is made now anyway; a gang waiting on singles would start 2 s late)
    has_gang = any(j is not None and c >= 2 for size in sizes for j, c in size.items())
    if not has_release and not has_gang:
        with_singles = [r for r, size in zip(reqs, sizes, strict=True) if any(
            j is None or c == 1 for j, c in size.items())]
        if with_singles:
            oldest = min(r.received_at for r in with_singles)
            if now - oldest < batch_window:
                next_due = oldest + batch_window
                deferred = [r.id for r in with_singles]
    deferred_ids = set(deferred)
    live = [r for r in reqs if r.id not in deferred_ids]

    wanted: dict[str, PendingRequest] = {}
    for r in live:
        for n in r.nodes:
            wanted[n] = r

    release: list[tuple[str, RequestKind, str]] = []
    unknown: list[str] = []
    # (pool, job) -> nodes; job None = coalesced singles of that pool
    groups: dict[tuple[str, int | None], list[str]] = defaultdict(list)
    group_reqs: dict[tuple[str, int | None], set[str]] = defaultdict(set)
    up: list[str] = []
    for node, r in wanted.items():
        if r.kind is not RequestKind.RESUME:
            release.append((node, r.kind, r.id))
            continue
        if node in active_nodes:
            up.append(node)
            continue
        pool = pool_of(node)
        if pool is None:
            unknown.append(node)
            continue
        job = jobs_of[r.id].get(node)
        groups[(pool, job)].append(node)
        group_reqs[(pool, job)].add(r.id)
    # A job with one node left to launch is a single node: it joins its pool's batch.
    for (pool, job), nodes in list(groups.items()):
        if job is not None and len(nodes) < 2:
            del groups[(pool, job)]
            groups[(pool, None)].extend(nodes)
            group_reqs[(pool, None)] |= group_reqs.pop((pool, job))

    launch: list[Gang] = []
    # Gangs first (all-or-nothing, the hardest to fill), then each pool's batch of singles.
    order = sorted(groups.items(), key=lambda kv: (kv[0][1] is None, kv[0][0], kv[0][1] or 0))
    for (pool, job), nodes in order:
        names = tuple(sorted(nodes))
        launch.append(Gang(
            pool=pool, nodes=names,
            job_ids=(job,) if job is not None else (),
            request_ids=tuple(sorted(group_reqs[(pool, job)])),
            coalesced=job is None,
            requested_s=tuple(wanted[n].received_at for n in names),
        ))
    return RequestPlan(
        launch=tuple(launch), release=tuple(sorted(release)), already_up=tuple(sorted(up)),
        done=tuple(r.id for r in live), deferred=tuple(deferred), next_due=next_due,
        unknown_nodes=tuple(sorted(unknown)),
    )


def gang_id(gang: Gang) -> str:
    """Deterministic, so a retried request maps to the same gang and client token."""
    first = gang.request_ids[0] if gang.request_ids else "adhoc"
    what = f"job{gang.job_ids[0]}" if gang.job_ids else "batch"
    return f"{first}/{what}/{gang.pool}"
