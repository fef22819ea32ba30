"""SLURM_RESUME_FILE: which job asked for which nodes.

Slurm 22.05 writes `{"jobs":[{"job_id":1,"nodes":"c-[1-2]"}],"all_nodes":"c-[1-2]"}`; 23.02+
writes `all_nodes_resume` and per job `nodes_resume`/`nodes_alloc`/`partition`/... and may add
fields at any release, so unknown fields are ignored while the ones we rely on are checked.
The resume hook parses it on every power-up: plain Python, no pydantic to import.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from slurmscale.hostlists import HostlistError, expand


class ResumeFileError(ValueError):
    """The resume file is not something Slurm would write; the message names the bad part."""


def _bad(where: str, what: str, got: Any) -> ResumeFileError:
    return ResumeFileError(f"malformed resume file at {where}: {what} (got {got!r})")


def _text(d: dict[str, Any], key: str, where: str) -> str | None:
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise _bad(f"{where}{key}", "expected a string", v)
    return v


def _job_id(v: Any, where: str) -> int:
    # Slurm writes a number; a string of digits is taken as one, as any JSON reader would
    if isinstance(v, str) and v.isascii() and v.isdigit():
        v = int(v)
    if type(v) is not int or not 0 < v < 1 << 32:
        raise _bad(where, "expected a job id (a positive integer)", v)
    return v


class ResumeJob(NamedTuple):
    job_id: int
    nodes: tuple[str, ...]
    partition: str | None


class ResumeFile(NamedTuple):
    all_nodes: tuple[str, ...]
    jobs: tuple[ResumeJob, ...]


def parse_resume_file(text: str) -> ResumeFile:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ResumeFileError(f"resume file is not JSON: {e}") from None
    except RecursionError:
        raise ResumeFileError("resume file nests too deeply to be Slurm's") from None
    if not isinstance(raw, dict):
        raise ResumeFileError(f"resume file must hold a JSON object, got {type(raw).__name__}")
    raw_jobs = raw.get("jobs", [])
    if not isinstance(raw_jobs, list):
        raise _bad("jobs", "expected a list", raw_jobs)
    jobs: list[ResumeJob] = []
    for i, j in enumerate(raw_jobs):
        where = f"jobs.{i}"
        if not isinstance(j, dict):
            raise _bad(where, "expected an object", j)
        if "job_id" not in j:
            raise _bad(where, "job_id is missing", j)
        job_id = _job_id(j["job_id"], f"{where}.job_id")
        # 23.02+ names the nodes to power up in nodes_resume (nodes_alloc has them all)
        resume, nodes = _text(j, "nodes_resume", f"{where}."), _text(j, "nodes", f"{where}.")
        expr = resume or nodes
        _text(j, "nodes_alloc", f"{where}.")
        partition = _text(j, "partition", f"{where}.")
        if not expr:
            raise _bad(where, f"job {job_id} names no nodes", j)
        try:
            jobs.append(ResumeJob(job_id, tuple(expand(expr)), partition))
        except HostlistError as e:
            raise ResumeFileError(f"malformed resume file: {e}") from None
    all_resume, all_listed = _text(raw, "all_nodes_resume", ""), _text(raw, "all_nodes", "")
    all_expr = all_resume or all_listed
    try:
        all_nodes = tuple(expand(all_expr)) if all_expr else ()
    except HostlistError as e:
        raise ResumeFileError(f"malformed resume file: {e}") from None
    in_jobs = {n for j in jobs for n in j.nodes}
    if not all_nodes:
        all_nodes = tuple(sorted(in_jobs))
    stray = in_jobs - set(all_nodes)
    if stray:
        raise ResumeFileError(
            f"malformed resume file: job nodes {sorted(stray)} missing from all_nodes"
        )
    return ResumeFile(all_nodes=all_nodes, jobs=tuple(jobs))
