"""A pass's edits of Slurm as values, applied in one place.

A pass says what it wants done to Slurm as an `Edit` (drain, undrain, power down, requeue a
job, move a job to other partitions; create a hold's reservation, set its nodes, point its job
at it) and hands it to `SlurmEdits.apply`, which makes the call and says its outcome once: the
edit's own audit event when Slurm took it, the kind's failure event when it refused (`FAILED`:
slurm_update_failed, requeue_failed, steer_failed, reservation_failed). Each kind
has one error policy here, not one per call site: a refused requeue of a job Slurm has already
made pending (it requeues a configuring job itself when its booting node is drained) counts
as done. So a pass has no try/except of its own around Slurm's writes, and every failure
reads the same in the audit log, with the nodes it concerns.

The first step of issue 44 (effects as data): the interruption pass, the node sweep, the
capacity backoff and the capacity pass's actions, a Capacity Block's close, the launch's
rollback, the lifting of slurmscale's drains and the hold planner's reservations use it. Not
yet: the executor neither retries nor records outcomes on rows, and passes still apply their
edits as they decide (the interruption pass's next step depends on each outcome).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from slurmscale.audit import Event, Kind
from slurmscale.hostlists import compress
from slurmscale.slurm.protocol import SlurmClient, SlurmError

log = logging.getLogger(__name__)


class EditKind(StrEnum):
    DRAIN = "drain"
    UNDRAIN = "undrain"
    POWER_DOWN = "power down"  # at once (power_down_force: its jobs requeue)
    RELEASE = "release"  # power down once idle (the suspend hook)
    POWER_UP = "power up"
    REQUEUE = "requeue"
    PARTITIONS = "move"
    RESERVE = "create"  # a hold's reservation: from now, for a duration, for its users
    RESERVE_NODES = "extend"  # a reservation's whole node list (22.05 refuses Nodes+=)
    ATTACH = "attach"  # a pending job pointed at a reservation


# the audit event of an edit Slurm refused, by kind
FAILED: dict[EditKind, Kind] = {
    EditKind.DRAIN: Kind.SLURM_UPDATE_FAILED,
    EditKind.UNDRAIN: Kind.SLURM_UPDATE_FAILED,
    EditKind.POWER_DOWN: Kind.SLURM_UPDATE_FAILED,
    EditKind.RELEASE: Kind.SLURM_UPDATE_FAILED,
    EditKind.POWER_UP: Kind.SLURM_UPDATE_FAILED,
    EditKind.REQUEUE: Kind.REQUEUE_FAILED,
    EditKind.PARTITIONS: Kind.STEER_FAILED,
    EditKind.RESERVE: Kind.RESERVATION_FAILED,
    EditKind.RESERVE_NODES: Kind.RESERVATION_FAILED,
    EditKind.ATTACH: Kind.RESERVATION_FAILED,
}


@dataclass(frozen=True)
class Edit:
    """One change to Slurm. `nodes`: the nodes it edits (drain, undrain, power down, a
    reservation's) or the node a job's edit is about (the event's node); `job`: the job
    (requeue, move, attach; a reservation's job); `reason`: the drain or power-down reason;
    `partitions`: where a moved job may run; `reservation`, `users`, `duration_s`: a
    reservation's; `said`: the audit event once Slurm took it (None: the pass says it)."""

    kind: EditKind
    nodes: tuple[str, ...] = ()
    job: str = ""
    reason: str = ""
    partitions: tuple[str, ...] = ()
    said: tuple[Kind, str] | None = None
    gang: str | None = None  # the gang it is for (the events' gang_id)
    reservation: str = ""
    users: tuple[str, ...] = ()
    duration_s: float = 0.0

    @property
    def where(self) -> str | None:
        return compress(list(self.nodes)) if self.nodes else None

    @property
    def label(self) -> str:
        """How a failure names it: `drain spot-[1-2]`, `requeue job 42 on spot-1`."""
        if self.kind is EditKind.REQUEUE:
            return f"job {self.job}" + (f" on {self.where}" if self.nodes else "")
        if self.kind is EditKind.PARTITIONS:
            return f"job {self.job}: cannot move it to {','.join(self.partitions)}"
        if self.kind in RESERVATION_EDITS:
            return f"{self.kind.value} {self.reservation} (job {self.job})"
        verb = "power down" if self.kind is EditKind.RELEASE else self.kind.value
        return f"{verb} {self.where}"


def drain(nodes: list[str], reason: str, said: tuple[Kind, str] | None = None) -> Edit:
    return Edit(EditKind.DRAIN, tuple(nodes), reason=reason, said=said)


def undrain(nodes: list[str], said: tuple[Kind, str] | None = None) -> Edit:
    return Edit(EditKind.UNDRAIN, tuple(nodes), said=said)


def power_down(nodes: list[str], reason: str, said: tuple[Kind, str] | None = None,
               gang: str | None = None) -> Edit:
    return Edit(EditKind.POWER_DOWN, tuple(nodes), reason=reason, said=said, gang=gang)


def release(nodes: list[str], said: tuple[Kind, str] | None = None) -> Edit:
    return Edit(EditKind.RELEASE, tuple(nodes), said=said)


def power_up(nodes: list[str], said: tuple[Kind, str] | None = None) -> Edit:
    return Edit(EditKind.POWER_UP, tuple(nodes), said=said)


def requeue(job: str, node: str = "", said: tuple[Kind, str] | None = None) -> Edit:
    return Edit(EditKind.REQUEUE, (node,) if node else (), job=job, said=said)


def move(job: str, partitions: list[str], node: str = "",
         said: tuple[Kind, str] | None = None) -> Edit:
    return Edit(EditKind.PARTITIONS, (node,) if node else (), job=job,
                partitions=tuple(partitions), said=said)


def reserve(name: str, nodes: list[str], users: list[str], duration_s: float, job: str = "",
            said: tuple[Kind, str] | None = None) -> Edit:
    return Edit(EditKind.RESERVE, tuple(nodes), job=job, reservation=name, users=tuple(users),
                duration_s=duration_s, said=said)


def reserve_nodes(name: str, nodes: list[str], job: str = "",
                  said: tuple[Kind, str] | None = None) -> Edit:
    return Edit(EditKind.RESERVE_NODES, tuple(nodes), job=job, reservation=name, said=said)


def attach(job: str, name: str, nodes: list[str] | None = None,
           said: tuple[Kind, str] | None = None) -> Edit:
    return Edit(EditKind.ATTACH, tuple(nodes or ()), job=job, reservation=name, said=said)


RESERVATION_EDITS = frozenset({EditKind.RESERVE, EditKind.RESERVE_NODES, EditKind.ATTACH})


class SlurmEdits:
    """Applies edits: `apply` is True when Slurm took the edit (or its effect is already
    there), False when it refused, which the audit log then says."""

    def __init__(self, slurm: SlurmClient, event: Event) -> None:
        self.slurm = slurm
        self.event = event

    def apply(self, edit: Edit) -> bool:
        try:
            self._call(edit)
        except SlurmError as e:
            if not self._done_anyway(edit):
                self.event(FAILED[edit.kind], f"{edit.label}: {e}", node=edit.where,
                           **({"gang_id": edit.gang} if edit.gang else {}))
                return False
        if edit.said is not None:
            self.event(edit.said[0], edit.said[1], node=edit.where,
                       **({"gang_id": edit.gang} if edit.gang else {}))
        return True

    def _call(self, edit: Edit) -> None:
        nodes = list(edit.nodes)
        match edit.kind:
            case EditKind.DRAIN:
                self.slurm.drain(nodes, edit.reason)
            case EditKind.UNDRAIN:
                self.slurm.undrain(nodes)
            case EditKind.POWER_DOWN:
                self.slurm.power_down_force(nodes, edit.reason)
            case EditKind.RELEASE:
                self.slurm.power_down(nodes)
            case EditKind.POWER_UP:
                self.slurm.power_up(nodes)
            case EditKind.REQUEUE:
                self.slurm.requeue(edit.job)
            case EditKind.PARTITIONS:
                self.slurm.set_job_partitions(edit.job, list(edit.partitions))
            case EditKind.RESERVE:
                self.slurm.create_reservation(edit.reservation, nodes, list(edit.users),
                                              edit.duration_s)
            case EditKind.RESERVE_NODES:
                self.slurm.set_reservation_nodes(edit.reservation, nodes)
            case EditKind.ATTACH:
                self.slurm.set_job_reservation(edit.job, edit.reservation)

    def _done_anyway(self, edit: Edit) -> bool:
        """A requeue Slurm refused because it had requeued the job itself (a configuring job
        on a node drained while booting) is done."""
        if edit.kind is not EditKind.REQUEUE:
            return False
        try:
            return self.slurm.job(edit.job).get("JobState") == "PENDING"
        except SlurmError:
            return False
