"""The lifecycles slurmscale records: requests, gangs, instances and holds, each an enum with
ONE transition table. Every edge says why it happens; the store refuses any other
(IllegalTransition), so a bug that would, say, mark a failed gang launched or bring a
terminated instance back to life is stopped where it is written, not found later in a report.

`None` as the source is the row's creation.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar

S = TypeVar("S", bound=StrEnum)


class IllegalTransition(ValueError):
    """A write that would move a record along an edge its table does not have."""


class ChangedMeanwhile(IllegalTransition):
    """A transition whose record another writer moved between its read and its write (the
    write is conditioned on the state read: `WHERE status = old`); nothing was written, and
    the next pass decides again from what is there now."""


class RequestStatus(StrEnum):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


REQUEST_EDGES: Mapping[tuple[RequestStatus | None, RequestStatus], str] = {
    (None, RequestStatus.PENDING): "a hook spooled it and the daemon took it into the store",
    (RequestStatus.PENDING, RequestStatus.DONE): "its nodes were launched or released",
    (RequestStatus.PENDING, RequestStatus.FAILED):
        "its gang failed all or nothing (the job requeues), or the stored row is unreadable",
}


class GangStatus(StrEnum):
    LAUNCHING = "launching"
    LAUNCHED = "launched"
    FAILED = "failed"


GANG_EDGES: Mapping[tuple[GangStatus | None, GangStatus], str] = {
    (None, GangStatus.LAUNCHING): "recorded before its CreateFleet, so a crash can find it",
    (GangStatus.LAUNCHING, GangStatus.LAUNCHED):
        "EC2 gave at least its minimum and the instances are recorded (or were found by the "
        "gang's tag after a restart)",
    (GangStatus.LAUNCHING, GangStatus.FAILED):
        "EC2 refused or gave too few: everything launched was rolled back, nodes powered down",
    (GangStatus.LAUNCHED, GangStatus.LAUNCHED):
        "its requests replayed after a restart: the same ClientToken, the same instances",
}


class InstanceState(StrEnum):
    RUNNING = "running"
    # stopped, in its pool's warm pool (`warm_pool`): no node; its row keeps the last one's
    WARM = "warm"
    TERMINATED = "terminated"


INSTANCE_EDGES: Mapping[tuple[InstanceState | None, InstanceState], str] = {
    (None, InstanceState.RUNNING): "a launch returned it and it was paired with a node",
    (InstanceState.RUNNING, InstanceState.RUNNING): "recorded again by a recovered launch",
    (InstanceState.RUNNING, InstanceState.TERMINATED):
        "released, rolled back, interrupted, vanished, or left without a node",
    (InstanceState.TERMINATED, InstanceState.TERMINATED):
        "terminated again (TerminateInstances is idempotent; a retried release)",
    (InstanceState.RUNNING, InstanceState.WARM):
        "released into its pool's warm pool: stopped (StopInstances), its node tag cleared",
    (InstanceState.WARM, InstanceState.WARM):
        "stopped again (a warm start that went back: the gang's other starts were refused)",
    (InstanceState.WARM, InstanceState.RUNNING):
        "started (StartInstances) for a node of a resume, or taken by a recovered launch",
    (InstanceState.WARM, InstanceState.TERMINATED):
        "aged out, past the pool's size, taken by a rolled-back launch, or vanished",
}


class HoldState(StrEnum):
    ACTIVE = "active"
    RELEASING = "releasing"
    RELEASED = "released"


HOLD_EDGES: Mapping[tuple[HoldState | None, HoldState], str] = {
    (None, HoldState.ACTIVE): "created for a starving gang, or adopted from Slurm",
    (HoldState.ACTIVE, HoldState.ACTIVE): "its nodes and idle-GPU accounting updated a pass",
    (HoldState.ACTIVE, HoldState.RELEASING):
        "to be released, but Slurm keeps a reservation its job runs in: retried each pass",
    (HoldState.ACTIVE, HoldState.RELEASED): "deleted, or gone from Slurm",
    (HoldState.RELEASING, HoldState.RELEASED): "deleted at last, or gone from Slurm",
    (HoldState.RELEASED, HoldState.ACTIVE):
        "the same job held for again (its earlier hold ended without spending its budget)",
    (HoldState.RELEASED, HoldState.RELEASED):
        "released by an admin (`slurmscale reservations release`) while Slurm still had it",
}
# holds that still exist in Slurm (or may)
LIVE_HOLD_STATES = (HoldState.ACTIVE.value, HoldState.RELEASING.value)


class GraceState(StrEnum):
    SIGNALLED = "signalled"
    ENDED = "ended"
    REQUEUED = "requeued"


GRACE_EDGES: Mapping[tuple[GraceState | None, GraceState], str] = {
    (None, GraceState.SIGNALLED):
        "EC2 warned its node would be taken back: the job got its signal, its requeue waits",
    (GraceState.SIGNALLED, GraceState.ENDED):
        "the job left the node within its grace (it ended, or requeued itself)",
    (GraceState.SIGNALLED, GraceState.REQUEUED):
        "still running at the warning's deadline less the margin (or its instance went "
        "first): requeued",
}


def check(edges: Mapping[tuple[S | None, S], str], what: str, old: S | str | None,
          new: S | str) -> None:
    """Raise IllegalTransition unless `old` -> `new` is an edge of the table."""
    kind = type(next(iter(edges))[1])
    try:
        src = None if old is None else kind(old)
        dst = kind(new)
    except ValueError:
        raise IllegalTransition(f"{what}: {old!r} -> {new!r} is not a {kind.__name__}") from None
    if (src, dst) not in edges:
        raise IllegalTransition(f"{what}: {src and src.value} -> {dst.value} is not allowed")
