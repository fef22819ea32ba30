"""Which pending spot-only jobs get the on-demand partition added (pure; the daemon applies it
with `scontrol update jobid=... partition=...`).

A job submitted to the spot partition alone cannot use the on-demand fallback that jobs
submitted with `-p spot,on-demand` move to while spot capacity is unavailable. If the admin
allows rewriting users' partitions (`spot.allow_partition_rewrite`), such a job that has waited
`spot.fallback_after_s` for capacity while its pool is unavailable gets the fallback partition
added after its own, so it still prefers spot.
"""

from __future__ import annotations

from typing import NamedTuple

from slurmscale.config import CapacityType, Config
from slurmscale.model import QueueJob
from slurmscale.policy.observe import CAPACITY_REASONS, slurm_time


class Rewrite(NamedTuple):
    job_id: str
    pool: str
    partitions: tuple[str, ...]  # the job's new partition list
    reason: str


def partition_rewrites(cfg: Config, jobs: list[QueueJob], unavailable_until: dict[str, float],
                       now: float) -> tuple[Rewrite, ...]:
    rules: dict[tuple[str, ...], tuple[str, str, float]] = {}
    for p in cfg.pools:
        if (p.capacity_type is CapacityType.SPOT and p.fallback_pool is not None
                and p.spot.allow_partition_rewrite
                and unavailable_until.get(p.name, 0.0) > now):
            rules[(p.partition,)] = (p.name, cfg.pool(p.fallback_pool).partition,
                                     p.spot.fallback_after_s)
    if not rules:
        return ()
    out = []
    for j in jobs:
        rule = rules.get(j.partitions)
        if rule is None or j.state != "PENDING" or j.reason not in CAPACITY_REASONS:
            continue
        pool, fallback, after = rule
        submit = slurm_time(j.submit_time)
        if submit is None or now - submit < after:
            continue
        out.append(Rewrite(j.job_id, pool, (*j.partitions, fallback),
                           f"pending {now - submit:.0f}s >= fallback_after_s {after:g} while "
                           f"{pool} has no capacity: may now run on {fallback} too"))
    return tuple(out)
