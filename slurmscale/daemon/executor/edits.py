"""A pass's edits of Slurm as values, applied in one place.

A pass says what it wants done to Slurm as an `Edit` (drain, undrain, power down, requeue a
job, move a job to other partitions; create a hold's reservation, set its nodes, point its job
at it, take it out and delete the reservation; create or set a Capacity Block's closed
window, delete a reservation, set a block partition UP; set SuspendExcNodes; a node's address
and its instance id; reconfigure slurmctld) and hands it to `SlurmEdits.apply` (or, among
other effects, to `effects.Effects`), which makes the call and says its outcome once: the
edit's own audit event when Slurm took it, the kind's failure event when it refused
(`FAILED`: slurm_update_failed, requeue_failed, steer_failed, reservation_failed). Each kind
has one error policy here, not one per call site: a refused requeue of a job Slurm has
already made pending (it requeues a configuring job itself when its booting node is drained)
counts as done, and so does a refused detach; a refused edit of the `HELD_OFF` kinds is not
sent again, the same, before RETRY_REFUSED_S, its wait kept on the store's rows (a standby
waits out the leader's); a hold's refused delete is said by the hold planner and a refused
reconfigure by the topology pass (`SAID_BY_PASS`: once, then retried quietly each pass); an
address set again each pass until it holds, and a node's instance id (informational), are
only logged (`LOGGED`). So no pass has a try/except of its own around Slurm's writes, and
every failure reads the same in the audit log, with the nodes it concerns.

Issue 44 (effects as data): every write to Slurm a pass makes goes through here. The
interruption pass decides as a whole before it applies (`evacuation.py`); the other passes
still make each edit where they decide it, and the executor records no outcome on rows of its
own (the audit log says each).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from slurmscale.audit import Event, Kind
from slurmscale.hostlists import compress
from slurmscale.policy.blocks import at
from slurmscale.slurm.protocol import SlurmClient, SlurmError
from slurmscale.store.protocol import TimerStore
from slurmscale.store.rows import TimerKind

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
    # A hold's reservation let go: its pending job taken out of it (a refusal is no failure:
    # the job runs in it, or is gone, and the delete says which), then the reservation
    # deleted (a refusal is said by the hold planner: "release pending", retried each pass
    # while the job runs there; `SlurmEdits.last_error` says why)
    DETACH = "detach"
    UNHOLD = "delete hold"
    # slurmctld's SuspendExcNodes set (`value`: the whole list, the admin's entries kept)
    SUSPEND_EXC = "SuspendExcNodes"
    # A Capacity Block pool's closed window (a reservation from `start` to `end`, over the
    # pool's nodes): created, or its span and nodes set; any reservation deleted; a block
    # partition set UP. Refused, the same edit is held off for RETRY_REFUSED_S (`HELD_OFF`).
    # A node's NodeAddr/NodeHostname (`value`, `host`): said when refused (`ADDRESS`), or
    # only logged (`READDRESS`: set again each pass until it holds); several at once in one
    # call (`effects.Together`), node by node when Slurm refuses that. A node record's
    # InstanceId/InstanceType (`entries`: 23.02+, informational: a refusal is logged).
    ADDRESS = "nodeaddr"
    READDRESS = "readdress"
    INSTANCES = "instance ids"
    # slurmctld told to read its configuration again (topology.conf written): a refusal is
    # said by the topology pass, once until it works again (`SAID_BY_PASS`)
    RECONFIGURE = "reconfigure"
    WINDOW = "create window"
    WINDOW_SET = "update window"
    UNRESERVE = "delete"
    PARTITION_UP = "open"


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
    EditKind.DETACH: Kind.RESERVATION_FAILED,
    EditKind.UNHOLD: Kind.RESERVATION_FAILED,
    EditKind.SUSPEND_EXC: Kind.SLURM_UPDATE_FAILED,
    EditKind.WINDOW: Kind.SLURM_UPDATE_FAILED,
    EditKind.WINDOW_SET: Kind.SLURM_UPDATE_FAILED,
    EditKind.UNRESERVE: Kind.SLURM_UPDATE_FAILED,
    EditKind.PARTITION_UP: Kind.SLURM_UPDATE_FAILED,
    EditKind.ADDRESS: Kind.SLURM_UPDATE_FAILED,
    EditKind.READDRESS: Kind.SLURM_UPDATE_FAILED,
    EditKind.INSTANCES: Kind.SLURM_UPDATE_FAILED,
    EditKind.RECONFIGURE: Kind.TOPOLOGY_FAILED,
}

# Error policy "held off": an edit of these kinds Slurm refused is not sent again, the same,
# before RETRY_REFUSED_S (the Capacity Block plan changes as time passes, a gap beginning, a
# window opening, so the next try is usually another edit). The wait is on the store (timers
# of kind REFUSED, subject the edit's `key`), so a standby that takes over does not send at
# once what the leader was waiting to resend. The other kinds are sent each time a pass asks.
HELD_OFF = frozenset({EditKind.WINDOW, EditKind.WINDOW_SET, EditKind.UNRESERVE,
                      EditKind.PARTITION_UP})
RETRY_REFUSED_S = 300.0
REFUSED = TimerKind.REFUSED_EDIT
# Error policy "said by the pass": a refusal of these kinds is no audit event here (the pass
# says what it means for it) - `apply` is False and `last_error` says why.
SAID_BY_PASS = frozenset({EditKind.UNHOLD, EditKind.RECONFIGURE})
# Error policy "logged": a refusal is a warning in the daemon's log, no audit event (the
# pass sends it again each pass until it holds, or it is only informational).
LOGGED = frozenset({EditKind.READDRESS, EditKind.INSTANCES})
# the kinds several edits of which go in one call (`apply_together`)
TOGETHER = frozenset({EditKind.ADDRESS, EditKind.READDRESS})


@dataclass(frozen=True)
class Edit:
    """One change to Slurm. `nodes`: the nodes it edits (drain, undrain, power down, a
    reservation's) or the node a job's edit is about (the event's node); `job`: the job
    (requeue, move, attach; a reservation's job); `reason`: the drain or power-down reason;
    `partitions`: where a moved job may run; `reservation`, `users`, `duration_s`: a
    reservation's (`start`, `end`: a closed window's); `partition`: the one set UP;
    `value`: SuspendExcNodes' new value; `said`: the audit event once Slurm took it (None:
    the pass says it)."""

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
    start: float | None = None  # a window's start (Unix s; None: now)
    end: float = 0.0  # a window's end (Unix s)
    partition: str = ""  # the partition set UP
    value: str = ""  # SuspendExcNodes' new value; a node's NodeAddr
    host: str = ""  # a node's NodeHostname
    entries: tuple[tuple[str, str, str], ...] = ()  # (node, instance id, type)

    @property
    def key(self) -> str:
        """The edit as one string, the same for the same call: what a held-off refusal is
        kept under (`kind|name|start|end`)."""
        name = self.partition if self.kind is EditKind.PARTITION_UP else self.reservation
        return f"{self.kind.value}|{name}|{round(self.start or 0)}|{round(self.end)}"

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
        if self.kind in (EditKind.WINDOW, EditKind.WINDOW_SET):
            return f"reservation {self.reservation} ({self.kind.value.split()[0]})"
        if self.kind is EditKind.UNRESERVE:
            return f"delete reservation {self.reservation}"
        if self.kind is EditKind.PARTITION_UP:
            return f"partition {self.partition} UP"
        if self.kind in TOGETHER:
            return f"{self.where} nodeaddr={self.value}"
        if self.kind is EditKind.INSTANCES:
            return f"instance ids of {self.where}"
        if self.kind is EditKind.RECONFIGURE:
            return "scontrol reconfigure"
        if self.kind is EditKind.SUSPEND_EXC:
            return f"SuspendExcNodes={self.value}"
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


def suspend_exc(value: str, said: tuple[Kind, str] | None = None) -> Edit:
    return Edit(EditKind.SUSPEND_EXC, value=value, said=said)


def detach(job: str, name: str) -> Edit:
    """Job `job` taken out of reservation `name` (pointed at none)."""
    return Edit(EditKind.DETACH, job=job, reservation=name)


def unhold(name: str) -> Edit:
    """A hold's reservation deleted."""
    return Edit(EditKind.UNHOLD, reservation=name)


def window(name: str, nodes: list[str], users: list[str], start: float | None, end: float,
           said: tuple[Kind, str] | None = None) -> Edit:
    """A closed window's reservation created over `nodes`, from `start` (None: now) to
    `end`, for `users`."""
    return Edit(EditKind.WINDOW, tuple(nodes), reservation=name, users=tuple(users),
                start=start, end=end, said=said)


def window_set(name: str, nodes: list[str], start: float | None, end: float,
               said: tuple[Kind, str] | None = None) -> Edit:
    """A closed window's reservation set to `nodes`, from `start` (None: now) to `end`."""
    return Edit(EditKind.WINDOW_SET, tuple(nodes), reservation=name, start=start, end=end,
                said=said)


def unreserve(name: str, said: tuple[Kind, str] | None = None) -> Edit:
    return Edit(EditKind.UNRESERVE, reservation=name, said=said)


def partition_up(partition: str, nodes: list[str],
                 said: tuple[Kind, str] | None = None) -> Edit:
    return Edit(EditKind.PARTITION_UP, tuple(nodes), partition=partition, said=said)


def address(node: str, addr: str, host: str, said: tuple[Kind, str] | None = None,
            again: bool = False, gang: str | None = None) -> Edit:
    """`node`'s NodeAddr and NodeHostname; `again`: set again each pass until it holds (a
    refusal only logged)."""
    return Edit(EditKind.READDRESS if again else EditKind.ADDRESS, (node,), value=addr,
                host=host, said=said, gang=gang)


def reconfigure(said: tuple[Kind, str] | None = None) -> Edit:
    return Edit(EditKind.RECONFIGURE, said=said)


def instances(entries: list[tuple[str, str, str]]) -> Edit:
    """The nodes' InstanceId/InstanceType in Slurm's node records (node, id, type)."""
    return Edit(EditKind.INSTANCES, tuple(n for n, _, _ in entries), entries=tuple(entries))


RESERVATION_EDITS = frozenset({EditKind.RESERVE, EditKind.RESERVE_NODES, EditKind.ATTACH,
                               EditKind.DETACH, EditKind.UNHOLD})


class SlurmEdits:
    """Applies edits: `apply` is True when Slurm took the edit (or its effect is already
    there), False when it refused, which the audit log then says, or when a refusal of the
    same held-off edit is still in its wait (`store`: where those waits are kept; needed
    for the `HELD_OFF` kinds)."""

    def __init__(self, slurm: SlurmClient, event: Event, store: TimerStore | None = None
                 ) -> None:
        self.slurm = slurm
        self.event = event
        self.store = store
        self.last_error = ""  # why Slurm refused the last edit it refused (its stderr)

    def apply(self, edit: Edit, now: float = 0.0) -> bool:
        """`now` (Unix s): when the pass asks, for the held-off kinds' waits."""
        held = edit.kind in HELD_OFF
        refused: dict[str, float] = {}
        if held:
            assert self.store is not None, f"{edit.kind} edits need a store for their waits"
            refused = self.store.timers(REFUSED)
            since = refused.get(edit.key)
            if since is not None and since + RETRY_REFUSED_S > now:
                return False
        try:
            self._call(edit)
        except SlurmError as e:
            if not self._done_anyway(edit):
                self.last_error = e.stderr or str(e)
                if edit.kind in SAID_BY_PASS:
                    return False
                if edit.kind in LOGGED:
                    log.warning("%s: %s", edit.label, e)
                    return False
                then = (f"; not sent again the same before {at(now + RETRY_REFUSED_S)}"
                        if held else "")
                if held:
                    self._keep(refused, now, {edit.key: now})
                self.event(FAILED[edit.kind], f"{edit.label}: {e}{then}", node=edit.where,
                           **({"gang_id": edit.gang} if edit.gang else {}))
                return False
        if edit.key in refused:
            del refused[edit.key]
            self._keep(refused, now, {}, [edit.key])
        self._say(edit)
        return True

    def _say(self, edit: Edit) -> None:
        """The edit's own audit event, once Slurm took it."""
        if edit.said is not None:
            self.event(edit.said[0], edit.said[1], node=edit.where,
                       **({"gang_id": edit.gang} if edit.gang else {}))

    def apply_together(self, together: list[Edit]) -> bool:
        """Edits of one `TOGETHER` kind in one call; False: Slurm refused it (logged: the
        caller sends each alone, so that every refusal names its node)."""
        try:
            self.slurm.set_node_addresses([(e.nodes[0], e.value, e.host) for e in together])
        except SlurmError as e:
            self.last_error = e.stderr or str(e)
            log.warning("%s in one update refused (%s); node by node",
                        compress([n for x in together for n in x.nodes]), e)
            return False
        for x in together:
            self._say(x)
        return True

    def _keep(self, refused: dict[str, float], now: float, begun: dict[str, float],
              over: list[str] | None = None) -> None:
        """A refusal's wait `begun` on the store; the waits `over` and those past (of
        `refused`, as read) ended."""
        assert self.store is not None
        self.store.end_timers(REFUSED, (over or []) + [
            k for k, t in refused.items() if t + RETRY_REFUSED_S <= now and k not in begun])
        self.store.set_timers(REFUSED, begun)

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
                self.slurm.requeue(edit.job, nodes[0] if nodes else "")
            case EditKind.PARTITIONS:
                self.slurm.set_job_partitions(edit.job, list(edit.partitions))
            case EditKind.RESERVE:
                self.slurm.create_reservation(edit.reservation, nodes, list(edit.users),
                                              edit.duration_s)
            case EditKind.RESERVE_NODES:
                self.slurm.set_reservation_nodes(edit.reservation, nodes)
            case EditKind.ATTACH:
                self.slurm.set_job_reservation(edit.job, edit.reservation)
            case EditKind.DETACH:
                self.slurm.set_job_reservation(edit.job, "")
            case EditKind.SUSPEND_EXC:
                self.slurm.set_suspend_exc_nodes(edit.value)
            case EditKind.ADDRESS | EditKind.READDRESS:
                self.slurm.set_node_address(nodes[0], edit.value, edit.host)
            case EditKind.INSTANCES:
                self.slurm.set_node_instances(list(edit.entries))
            case EditKind.RECONFIGURE:
                self.slurm.reconfigure()
            case EditKind.UNHOLD:
                self.slurm.delete_reservation(edit.reservation)
            case EditKind.WINDOW:
                self.slurm.create_window_reservation(edit.reservation, nodes, list(edit.users),
                                                     edit.start, edit.end)
            case EditKind.WINDOW_SET:
                self.slurm.update_window_reservation(edit.reservation, nodes, edit.start,
                                                     edit.end)
            case EditKind.UNRESERVE:
                self.slurm.delete_reservation(edit.reservation)
            case EditKind.PARTITION_UP:
                self.slurm.set_partition_state(edit.partition, "UP")

    def _done_anyway(self, edit: Edit) -> bool:
        """A requeue Slurm refused because it had requeued the job itself (a configuring job
        on a node drained while booting) is done; so is a detach Slurm refused (the job
        runs in the reservation, or is gone: the delete that follows says which)."""
        if edit.kind is EditKind.DETACH:
            return True
        if edit.kind is not EditKind.REQUEUE:
            return False
        try:
            return self.slurm.job(edit.job).get("JobState") == "PENDING"
        except SlurmError:
            return False
