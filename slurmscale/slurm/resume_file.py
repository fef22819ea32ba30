"""SLURM_RESUME_FILE: which job asked for which nodes.

Slurm 22.05 writes `{"jobs":[{"job_id":1,"nodes":"c-[1-2]"}],"all_nodes":"c-[1-2]"}`; 23.02+
writes `all_nodes_resume` and per job `nodes_resume`/`nodes_alloc`/`partition`/... and may add
fields at any release, so unknown fields are ignored while the ones we rely on are checked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from slurmscale.hostlists import HostlistError, expand
from slurmscale.validation import first_problem


class ResumeFileError(ValueError):
    """The resume file is not something Slurm would write; the message names the bad part."""


class _Job(BaseModel):
    model_config = ConfigDict(extra="ignore")
    job_id: int
    nodes: str | None = None  # 22.05
    nodes_resume: str | None = None  # 23.02+
    nodes_alloc: str | None = None
    partition: str | None = None

    @model_validator(mode="after")
    def _has_nodes(self) -> _Job:
        if not (self.nodes_resume or self.nodes):
            raise ValueError(f"job {self.job_id} names no nodes")
        return self


class _File(BaseModel):
    model_config = ConfigDict(extra="ignore")
    jobs: list[_Job] = []
    all_nodes: str | None = None  # 22.05
    all_nodes_resume: str | None = None  # 23.02+


@dataclass(frozen=True)
class ResumeJob:
    job_id: int
    nodes: tuple[str, ...]
    partition: str | None


@dataclass(frozen=True)
class ResumeFile:
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
    try:
        f = _File.model_validate(raw)
    except ValidationError as e:
        raise ResumeFileError(f"malformed resume file at {first_problem(e)}") from None
    try:
        jobs = tuple(
            ResumeJob(j.job_id, tuple(expand(j.nodes_resume or j.nodes or "")), j.partition)
            for j in f.jobs
        )
        all_expr = f.all_nodes_resume or f.all_nodes
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
    return ResumeFile(all_nodes=all_nodes, jobs=jobs)
