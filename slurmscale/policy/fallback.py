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

from slurmscale.model import QueueJob
from slurmscale.policy.observe import CAPACITY_REASONS, slurm_time


class FallbackRule(NamedTuple):
    """A spot pool whose spot-only jobs may get its fallback's partition, after `after_s`
    pending for capacity while the pool is unavailable (built from the config at the edge:
    `daemon/queue/knobs.py`)."""

    pool: str
    partition: str
    fallback_partition: str
    after_s: float


class Rewrite(NamedTuple):
    job_id: str
    pool: str
    partitions: tuple[str, ...]  # the job's new partition list
    reason: str


def partition_rewrites(allowed: tuple[FallbackRule, ...], jobs: list[QueueJob],
                       unavailable_until: dict[str, float], now: float) -> tuple[Rewrite, ...]:
    rules: dict[tuple[str, ...], tuple[str, str, float]] = {
        (r.partition,): (r.pool, r.fallback_partition, r.after_s) for r in allowed
        if unavailable_until.get(r.pool, 0.0) > now}
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
