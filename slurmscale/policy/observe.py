"""Reading Slurm's state for the policy: Slurm's times, the node states and the jobs' ends (pure:
the caller reads Slurm and the clock). Building the Snapshot from them and the config is the
edge's (`daemon/queue/observe.py`, `daemon/queue/queue_view.py`)."""

from __future__ import annotations

import functools
from datetime import datetime

from slurmscale import timeframe
from slurmscale.hostlists import expand_cached
from slurmscale.model import QueueJob, SlurmNode
from slurmscale.policy.model import (
    NodeState,
    NodeView,
)

# Pending reasons that mean "waiting for capacity"; Dependency, JobHeld*, BeginTime, limits
# and the like are not demand the pool can answer now. The DOWN/DRAINED reason is what a job
# shows while slurmscale holds a governed pool's nodes: that is the demand the target serves.
_HELD_OUT = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority " \
    "partitions"
# "None" is a job just submitted that the scheduler has not looked at yet (squeue prints None
# until its next run sets a reason): Slurm places it at that run, on the idle nodes a pass
# might otherwise release a moment before (a released node then boots again for it).
CAPACITY_REASONS = frozenset({
    "Resources", "Priority", "PowerUpNode", "None", _HELD_OUT, _HELD_OUT.replace(" ", "_"),
})



UNUSABLE_FLAGS = frozenset({"DRAIN", "FAIL", "MAINT", "REBOOT_REQUESTED", "INVALID_REG"})


def slurm_time(text: str) -> float | None:
    """Slurm prints local times without a zone (2026-11-29T11:00:00); Unknown/None -> None.

    Read for every job every pass (submit, start, end, backfill's plan), the same times pass
    after pass: remembered. Not in an LRU: one smaller than the queue's distinct times misses
    on every read, pass after pass, and pays its bookkeeping for nothing (65,536 did past
    ~65k jobs). A plain dict, emptied whole when full, refills in one pass and then hits."""
    t = _TIMES.get(text, _MISSING)
    if t is _MISSING:
        try:
            t = datetime.fromisoformat(text).timestamp()
        except ValueError:
            t = None
        if len(_TIMES) >= MAX_TIMES:
            _TIMES.clear()
        _TIMES[text] = t
    if t is not None and timeframe.FRAME.eras:
        # the host's clock has stepped since the daemon started: read in its steady time
        return timeframe.FRAME.from_host(t)  # type: ignore[arg-type]
    return t  # type: ignore[return-value]


MAX_TIMES = 1 << 18  # ~40 MB at most; a queue of 50,000 jobs holds ~150,000 distinct times
_TIMES: dict[str, float | None] = {}
_MISSING = object()


def node_state(n: SlurmNode) -> NodeState:
    return state_facts(n.state)[0]


@functools.lru_cache(maxsize=4096)
def state_facts(state: str) -> tuple[NodeState, bool, bool]:
    """From a node's State (a few dozen distinct strings on any cluster, so remembered): the
    policy's state, drained, and unusable unless slurmscale holds it (drained, failed, in
    maintenance, down, or powering down: in transition, nothing may be asked of it)."""
    parts = state.upper().split("+")
    base, f = parts[0], frozenset(parts)
    if f & {"POWERED_DOWN", "POWERING_DOWN"} or base == "DOWN":
        st = NodeState.POWERED_DOWN
    elif base in {"ALLOCATED", "MIXED", "COMPLETING"} or "COMPLETING" in f:
        st = NodeState.ALLOCATED  # running jobs, reserved or not
    elif "POWER_DOWN" in f:
        # idle, its power-down asked for (by slurmscale's release): gone in a moment, not
        # capacity to keep or release again (a pass per poke used to repeat the release)
        st = NodeState.POWERED_DOWN
    elif "RESERVED" in f:
        st = NodeState.RESERVED
    elif "POWERING_UP" in f or "CONFIGURING" in f or "NOT_RESPONDING" in f:
        st = NodeState.BOOTING
    else:
        st = NodeState.IDLE
    unusable = bool(f & UNUSABLE_FLAGS) or base == "DOWN" or "POWERING_DOWN" in f
    return st, "DRAIN" in f, unusable


@functools.lru_cache(maxsize=65536)
def down_view(name: str, pool: str, held: bool, usable: bool) -> NodeView:
    """A powered-down node's view: the same every pass while it stays down (one per node)."""
    return NodeView(name, pool, NodeState.POWERED_DOWN, None, held, usable)


def running_ends(jobs: list[QueueJob]) -> tuple[dict[str, float], dict[str, int]]:
    """Per node, from its running jobs: the latest end (start + time limit, when it will be
    free at the latest; none while a job without a limit runs there) and the GPUs they use.
    Only running jobs carry an EndTime and node list. The GPUs stand in for the node's
    AllocTRES, which counts GPUs only where AccountingStorageTRES=gres/gpu (and so slurmdbd)
    is configured."""
    free_at: dict[str, float] = {}
    gpus: dict[str, int] = {}
    endless: set[str] = set()
    for j in jobs:
        if not j.nodelist:
            continue
        # an UNLIMITED job's EndTime is Slurm's stand-in (a year on): when it frees is unknown
        end = slurm_time(j.end_time) if j.end_time and j.time_limit_s is not None else None
        for name in expand_cached(j.nodelist):
            gpus[name] = gpus.get(name, 0) + j.gpus_per_node
            if end is None:
                endless.add(name)
            elif end > free_at.get(name, 0.0):
                free_at[name] = end
    for name in endless:
        free_at.pop(name, None)
    return free_at, gpus
