"""Which launched nodes failed to join Slurm, and what is done about each: pure (Slurm's
nodes, the running instances, the boot errors their bootstraps tagged, the clock in; verdicts
out).

A node is waiting to join while Slurm has it POWERING_UP: its instance runs, its slurmd has
not registered. It failed to boot when
- its bootstrap tagged its instance `slurmscale:boot-error` (it says why: no node tag in
  metadata, a GPU missing, the site's check, slurmd would not start), or
- its instance has run `join_timeout_s` (the pool's boot time + 120 s by default) without
  slurmd registering (the bootstrap never ran, or hangs, or could not even report).
Such a node gets a fresh instance for the same node while Slurm still waits for it (its job
keeps its allocation: no requeue), up to `max_boot_retries` times per power-up; after that,
or when the node was replaced `health.max_replacements` times within `health.window_s` (the
fault is the image, not the instance), it is powered down with the boot error as its reason
and its job requeues. Waiting out Slurm's ResumeTimeout (900 s by default) instead would
cost every failed boot a quarter of an hour of the gang's wait."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from slurmscale.model import SlurmNode

TAG_BOOT_ERROR = "slurmscale:boot-error"  # written by the bootstrap (slurmscale/node_init.py)
JOIN_TIMEOUT = "join-timeout"
BOOT_CAUSE_PREFIX = "boot-"  # a replacement row's cause for a boot failure: boot-<cause>


class BootStep(StrEnum):
    REPLACE = "replace"  # a fresh instance for the node; Slurm keeps waiting
    GIVE_UP = "give-up"  # powered down with the reason: the job requeues


@dataclass(frozen=True)
class Booting:
    """A running instance slurmscale recorded for a node."""

    instance_id: str
    node: str
    pool: str
    launched_at: float  # Unix seconds


@dataclass(frozen=True)
class BootVerdict:
    node: str
    instance_id: str
    pool: str
    cause: str  # the bootstrap's (gpu-check, tag-timeout, ...) or join-timeout
    detail: str
    step: BootStep
    attempt: int  # replacements already made for this power-up


def split_error(tag: str) -> tuple[str, str]:
    """The bootstrap writes "<cause>: <what>"; anything else is all detail."""
    cause, sep, what = tag.partition(": ")
    if sep and cause and " " not in cause and len(cause) <= 24:
        return cause, what
    return "boot-error", tag


def boot_verdicts(nodes: Mapping[str, SlurmNode], running: Sequence[Booting],
                  errors: Mapping[str, str], now: float, join_timeout: Mapping[str, float],
                  attempts: Mapping[str, int], recent: Mapping[str, int],
                  max_retries: Mapping[str, int], max_replacements: int) -> list[BootVerdict]:
    """`errors`: instance id -> its boot-error tag; `join_timeout` and `max_retries`: pool
    -> its setting (a pool not there is not the config's any more: left alone);
    `attempts`: node -> fresh instances already given in this power-up; `recent`: node ->
    replacements of any cause within the health window (the replace-loop guard)."""
    out = []
    for b in running:
        n = nodes.get(b.node)
        if n is None or "POWERING_UP" not in n.flags or b.pool not in join_timeout:
            continue  # registered (or released): not ours to judge here
        tag = errors.get(b.instance_id)
        if tag is not None:
            cause, detail = split_error(tag)
        else:
            age = now - b.launched_at
            limit = join_timeout[b.pool]
            if age < limit:
                continue
            cause, detail = JOIN_TIMEOUT, (f"slurmd not registered {age:.0f}s after launch "
                                           f"(join_timeout_s {limit:g})")
        done = attempts.get(b.node, 0)
        if done >= max_retries.get(b.pool, 0):
            step, detail = BootStep.GIVE_UP, f"{detail}; {done} fresh instance(s) failed too"
        elif recent.get(b.node, 0) >= max_replacements:
            step, detail = BootStep.GIVE_UP, (f"{detail}; replaced {recent[b.node]} time(s) "
                                              "recently, not again")
        else:
            step = BootStep.REPLACE
        out.append(BootVerdict(b.node, b.instance_id, b.pool, cause, detail, step, done))
    return out
