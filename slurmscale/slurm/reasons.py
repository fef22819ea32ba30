"""The reasons slurmscale writes on Slurm nodes, in one place, and the one answer to "did
slurmscale drain or power down this node, and why".

Why it matters: slurmscale only ever undoes what it did. A node drained by an admin (any reason
not listed here) is never undrained, never marked unavailable over, never returned. The texts
are what admins see in `sinfo -R`; they are kept as they were (scripts grep them).
"""

from __future__ import annotations

import functools
from enum import StrEnum

from slurmscale.model import SlurmNode


class Why(StrEnum):
    """slurmscale's reasons: each value is the prefix of the reason Slurm shows."""

    HELD = "slurmscale: held above the pool's target"  # governed pool, drained
    NO_CAPACITY = "slurmscale: no capacity in this pool until"  # + the TTL's end, drained
    INTERRUPTED = "slurmscale: spot interruption notice"  # + notice time, drained, powered down
    # an interruptible reservation's owner took its capacity back: as INTERRUPTED
    RECLAIMED = "slurmscale: reservation reclaimed"  # + notice time
    REBALANCE = "slurmscale: rebalance recommendation"  # + time, drained
    GONE = "slurmscale: instance"  # + id, state, time: vanished, powered down
    LOST = "slurmscale: node has no instance"  # Slurm had it up with nothing behind it
    LAUNCH_FAILED = "slurmscale launch failed:"  # + EC2's code: powered down, job requeues
    UNHEALTHY = "slurmscale: unhealthy, replaced:"  # + cause and what was seen: powered down
    SCHEDULED = "slurmscale: scheduled EC2 event"  # + code and start: drained, replaced once idle
    REPLACE_LOOP = "slurmscale: replaced too often"  # + count, window, cause: left for an admin
    BOOT_FAILED = "slurmscale: boot failed:"  # + cause, what: powered down, job requeues
    # Slurm held a powered-down node DOWN (ResumeTimeout reached) with nothing behind it
    STUCK = "slurmscale: returned to service after"  # + Slurm's reason: powered down again


# the reasons of an instance going away: the node returns once powered down
INSTANCE_LOST = frozenset({Why.INTERRUPTED, Why.RECLAIMED, Why.REBALANCE, Why.GONE,
                           Why.UNHEALTHY, Why.SCHEDULED})

# a node being replaced (unhealthy, a scheduled event) or left for an admin: `status` lists them
REPLACING = frozenset({Why.UNHEALTHY, Why.SCHEDULED, Why.REPLACE_LOOP})

# longest first: a reason is matched by its most specific prefix (plain strings: this runs
# for every node every pass, and an enum member's .value is a descriptor call)
_BY_LENGTH = [(why.value, why) for why in sorted(Why, key=len, reverse=True)]
_COMMON = "slurmscale"  # every reason of ours starts with it


def reason(why: Why, detail: str = "") -> str:
    """The reason text to write: the prefix, then what this occurrence adds."""
    return f"{why.value} {detail}" if detail else why.value


@functools.lru_cache(maxsize=4096)
def ours(text: str) -> Why | None:
    """Which of slurmscale's reasons this is, or None (an admin's, or Slurm's own)."""
    if not text.startswith(_COMMON):
        return None
    for prefix, why in _BY_LENGTH:
        if text.startswith(prefix):
            return why
    return None


def drained_by_us(node: SlurmNode) -> Why | None:
    """Why slurmscale drained this node, or None when it is not drained or not by us."""
    if "DRAIN" not in node.flags:
        return None
    return ours(node.reason)
