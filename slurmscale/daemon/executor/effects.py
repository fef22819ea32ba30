"""A pass's effects as values, applied in order in one place, each outcome returned.

A pass decides from what it read (pure: `evacuation.py` for the interruption pass) and hands
the result, a sequence of effects, to `Effects.apply`. The effects are Slurm's edits
(`edits.Edit`, applied by `SlurmEdits` with its per-kind error policy), an audit event
(`Say`), a row recorded (`Record`: a job's lost run, a node's replacement, a hold, a gang's
launch begun, the instances it got), a gang's row moved on (`GangUpdate`), EC2's writes
(`Fleet`: one CreateFleet; `Terminate`; `Tag`; `PlacementGroup` made, `DropPlacementGroup`;
a warm pool's `Stop` and `Start`),
instances no longer tracked though not terminated (`Untrack`), a job signalled ahead of its
requeue with its grace recorded (`Signal`), AWS Health's scheduled change kept (`Heard`), a
pass's waits on the store (`Timers`), an event queue's message deleted (`Forget`), a batch
of node names in Route 53 (`Names`), a file of Slurm's written (`WriteFile`: topology.conf),
effects of one kind sent at once (`Together`: the nodes' addresses in one scontrol call,
node by node when refused; the instances' tags in parallel), and `Chain`: an effect and what
follows it, `then` when it was taken, `otherwise` when it was not (a preemption is recorded
only once its requeue was taken; a job whose signal Slurm refused is requeued at once; an
instance EC2 would not terminate is untracked). Where a later decision depends on an
outcome, the pass reads it off the `Applied` list `apply` returns (how many requeues Slurm
took, whether a grace began, what a CreateFleet gave), never off a call made in the middle
of the decision.

Error policy per kind: an edit's is `SlurmEdits`'s (said, held off, said by the pass, done
anyway); a signal Slurm refused is said (`signal_failed`) and its `otherwise` applied; a
terminate EC2 refused is said (`terminate_failed`), the store left as it was for the sweep
to find; a stop refused is said (`warm_stop_failed`), the pass terminating instead; a start
refused is its outcome's `code`, the warm start's to decide; a tag refused is said
(`tag_failed`: the resume is replayed, tags are idempotent); a placement group not deleted
is logged (an instance still shutting down: the sweep tries again next pass); a CreateFleet
refused or unanswered is its outcome (`Applied.code`): a retry is the pass's decision (the
same ClientToken: never a second launch); a message not deleted is logged (it comes back and
is handled again); a Route 53 change or a file write that failed is its outcome's `error`,
the pass's to say (once until it works); the store's writes are fenced by the leader's epoch
(store/repo.py) and raise when the lease is lost, which ends the pass (nothing after them is
applied); an audit event cannot fail. The effects are the only place the daemon writes to
Slurm, EC2, the event queue, Route 53 or Slurm's files (tests/unit/test_layering.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

from slurmscale.audit import Event, Kind
from slurmscale.cloud.protocol import (
    CloudError,
    CloudProvider,
    DnsRecord,
    DnsZone,
    EventQueue,
    FleetSpec,
)
from slurmscale.config import Pool
from slurmscale.crashpoints import crash_point
from slurmscale.daemon.executor.edits import Edit, EditKind, SlurmEdits
from slurmscale.daemon.passes import scheduled
from slurmscale.model import LaunchResult, ScheduledEvent
from slurmscale.slurm.protocol import SlurmClient, SlurmError
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.rows import (
    GangRow,
    GraceRow,
    HoldRow,
    InstanceRow,
    LaunchPhasesRow,
    PreemptionRow,
    ReplacementRow,
    TimerKind,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Say:
    """An audit event (about a node, a gang)."""

    kind: Kind
    text: str
    node: str | None = None
    gang: str | None = None


@dataclass(frozen=True)
class Record:
    """A row recorded: a job's lost run (the preemptions table: what `max_preemptions`, the
    reports and the simulator's checks count), a node's replacement (what the replace
    loop guard, a power-up's boot attempts, `status` and `report` count), a hold as it
    stands (its budget, its nodes, its end), a gang's launch begun (before its CreateFleet:
    a daemon killed after it looks for the gang's instances by tag), the instances a
    launch got, each with its node (in one write: none of a gang's, or all), or their
    launches' phases (time to run)."""

    row: (PreemptionRow | ReplacementRow | HoldRow | GangRow | tuple[InstanceRow, ...]
          | tuple[LaunchPhasesRow, ...])


@dataclass(frozen=True)
class GangUpdate:
    """A gang's row moved on (its status `WHERE status = old`: store/repo.py)."""

    gang_id: str
    values: Mapping[str, object]


@dataclass(frozen=True)
class Terminate:
    """Instances terminated and marked so on the store (a refusal is said as
    terminate_failed, the store left as it was for the sweep to find)."""

    instance_ids: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Stop:
    """Instances stopped into their pool's warm pool and marked warm on the store. A refusal
    is said (warm_stop_failed) and left to the pass, which terminates them instead: nothing
    a release let go may run on."""

    instance_ids: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Start:
    """One warm instance started (StartInstances). A refusal is its outcome's `code`
    (InsufficientInstanceCapacity: EC2 keeps no capacity for a stopped instance), for the
    warm start to decide; the store is moved on by the launch that takes it."""

    instance_id: str


@dataclass(frozen=True)
class PhasesApart:
    """These instances' time-to-run rows kept as their earlier launch's (a warm pool's start
    is about to record its own)."""

    instance_ids: tuple[str, ...]


@dataclass(frozen=True)
class Untrack:
    """Instances marked terminated on the store though EC2 was not told (one instance per
    node: a node given a fresh one whose failed one EC2 would not terminate). The sweep
    finds the instance by its tags and terminates it as a leak."""

    instance_ids: tuple[str, ...]


@dataclass(frozen=True)
class Fleet:
    """One instant CreateFleet: `count` instances, at least `need` of them or none. What EC2
    gave is the outcome's `fleet`; a refusal or no answer, its `code` (and `error`): whether
    that is worth another try is the pass's (with the same `token`, EC2's ClientToken, a
    retry is the same request and never launches twice)."""

    pool: Pool
    count: int
    need: int
    token: str
    tags: Mapping[str, str]
    spec: FleetSpec


@dataclass(frozen=True)
class Tag:
    """An instance tagged with its node (its bootstrap waits for that tag)."""

    instance_id: str
    node: str
    tags: Mapping[str, str]
    gang: str | None = None


@dataclass(frozen=True)
class PlacementGroup:
    """A placement group made if it does not exist yet (a pool's, or a gang's)."""

    name: str
    tags: Mapping[str, str]


@dataclass(frozen=True)
class DropPlacementGroup:
    """A gang's placement group deleted once no instance of the gang is left."""

    name: str


@dataclass(frozen=True)
class Signal:
    """The job signalled ahead of its requeue, then its grace recorded (signalled before it
    is recorded: a daemon killed between the two signals again after its restart, never not
    at all); `full`: the batch script and every step (else the steps only); `again`: it is
    in its grace for another node's warning (a gang's): recorded for this node, not
    signalled; `said`: the event once signalled."""

    grace: GraceRow
    full: bool
    again: bool = False
    said: str = ""


@dataclass(frozen=True)
class Heard:
    """AWS Health's scheduled change for an instance, kept for the health pass (the message
    it came in is deleted once read: scheduled.py)."""

    instance_id: str
    change: ScheduledEvent
    at: float  # Unix s


@dataclass(frozen=True)
class Timers:
    """Waits kept on the store (store/rows.py's `TimerKind`), written per subject: `over`
    ended, then `since` begun or moved (with `notes`, subject -> the pass's note)."""

    kind: TimerKind
    since: Mapping[str, float] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)
    over: tuple[str, ...] = ()


@dataclass(frozen=True)
class Forget:
    """An event queue's message handled, or moot: deleted, so that SQS does not deliver it
    again (one that could not be deleted comes back after the queue's visibility timeout
    and is handled again, idempotently: logged, no more)."""

    receipt: str


@dataclass(frozen=True)
class Names:
    """One Route 53 change batch of node names: these set to these addresses, these records
    deleted (`said`: the event once Route 53 took it; a refusal is the pass's to say, once
    until it works again: node_names.py)."""

    upsert: Mapping[str, str]
    delete: Mapping[str, DnsRecord]
    said: tuple[Kind, str]


@dataclass(frozen=True)
class WriteFile:
    """A file of Slurm's written in place and fsynced (topology.conf: SlurmUser owns the
    file, not the directory it is in); a failure is the outcome's `error`."""

    path: str
    text: str


@dataclass(frozen=True)
class Chain:
    """An effect and what follows it: `then` once it was taken, `otherwise` when not."""

    first: Effect
    then: tuple[Effect, ...] = ()
    otherwise: tuple[Effect, ...] = ()


@dataclass(frozen=True)
class Together:
    """Effects of one kind sent at once, each outcome its own. Edits Slurm takes in one call
    (edits.TOGETHER: nodes' addresses): sent together, then each alone if Slurm refuses
    that, so every refusal names its node. Tags: one CreateTags per instance (the node tag
    differs), at most TAG_THREADS in flight (well within EC2's mutating-call rate), their
    outcomes in order."""

    parts: tuple[Edit, ...] | tuple[Tag, ...]


TAG_THREADS = 8  # CreateTags in flight at once for one gang

# what one effect is (Chain and Together hold others)
Single = (Edit | Say | Record | GangUpdate | Signal | Heard | Terminate | Untrack | Fleet | Tag
          | PlacementGroup | DropPlacementGroup | Timers | Forget | Names | WriteFile | Stop
          | Start | PhasesApart)
Effect = Single | Chain | Together


@dataclass(frozen=True)
class Applied:
    """One effect's outcome: taken, or refused (`error`: why, where it was said; EC2's
    refusals: its message, and its error `code`). A CreateFleet's: the instances EC2 gave
    (`fleet`)."""

    effect: Single
    taken: bool
    error: str = ""
    code: str = ""
    fleet: LaunchResult | None = None


def taken(outcomes: Iterable[Applied], kind: EditKind) -> list[Edit]:
    """The edits of `kind` Slurm took, in order."""
    return [a.effect for a in outcomes
            if a.taken and isinstance(a.effect, Edit) and a.effect.kind is kind]


def signalled(outcomes: Iterable[Applied]) -> list[GraceRow]:
    """The graces begun (signalled, or recorded for a job signalled for another node)."""
    return [a.effect.grace for a in outcomes if a.taken and isinstance(a.effect, Signal)]


def fleet(outcomes: Iterable[Applied]) -> Applied:
    """The outcome of the (one) CreateFleet among `outcomes`."""
    return next(a for a in outcomes if isinstance(a.effect, Fleet))


# what the effects write: preemptions, graces, holds, timers, gangs, instances
EffectStore = LaunchStore


class Effects:
    """Applies a pass's effects in order; `apply` returns each one's outcome."""

    def __init__(self, slurm: SlurmClient, store: EffectStore, event: Event,
                 cloud: CloudProvider | None = None,
                 clock: Callable[[], datetime] | None = None,
                 queue: EventQueue | None = None, zone: DnsZone | None = None) -> None:
        """`cloud` and `clock` (when an instance was terminated): needed for EC2's effects;
        `queue`, for `Forget`; `zone`, for `Names`."""
        self.slurm = slurm
        self.store = store
        self.event = event
        self.edits = SlurmEdits(slurm, event, store)
        self.cloud = cloud
        self.clock = clock
        self.queue = queue
        self.zone = zone

    def apply(self, effects: Iterable[Effect], now: float = 0.0) -> list[Applied]:
        """`now` (Unix s): when the pass asks (the held-off edits' waits)."""
        out: list[Applied] = []
        for e in effects:
            self._one(e, now, out)
        return out

    def _one(self, e: Effect, now: float, out: list[Applied]) -> bool:
        if isinstance(e, Chain):
            ok = self._one(e.first, now, out)
            for f in e.then if ok else e.otherwise:
                self._one(f, now, out)
            return ok
        if isinstance(e, Together):
            return self._together(e, now, out)
        if isinstance(e, (Fleet, Tag, Terminate, PlacementGroup, DropPlacementGroup, Stop,
                          Start)):
            done = self._cloud(e)
            out.append(done)
            return done.taken
        ok, error = True, ""
        match e:
            case Edit():
                ok = self.edits.apply(e, now)
                error = "" if ok else self.edits.last_error
            case Say():
                self.event(e.kind, e.text, node=e.node, gang_id=e.gang)
            case Record(row=PreemptionRow() as row):
                self.store.add_preemption(row)
            case Record(row=ReplacementRow() as row):
                self.store.add_replacement(row)
            case Record(row=HoldRow() as row):
                self.store.put_hold(row)
            case Record(row=GangRow() as row):
                self.store.add_gang(row)
            case Record(row=tuple() as rows) if all(isinstance(r, LaunchPhasesRow)
                                                        for r in rows):
                self.store.put_launch_phases(cast(tuple[LaunchPhasesRow, ...], rows))
            case Record(row=tuple() as rows):
                self.store.add_instances(cast(tuple[InstanceRow, ...], rows))
            case GangUpdate():
                self.store.update_gang(e.gang_id, **e.values)
            case Untrack():
                self.store.mark_terminated(e.instance_ids, self._now())
            case PhasesApart():
                self.store.set_launch_phases_apart(e.instance_ids)
            case Signal():
                ok, error = self._signal(e)
            case Heard():
                scheduled.heard(self.store, e.instance_id, e.change, e.at)
            case Timers():
                self.store.end_timers(e.kind, e.over)
                self.store.set_timers(e.kind, e.since, e.notes)
            case Forget() | Names() | WriteFile():
                ok, error = self._outside(e)
        out.append(Applied(e, ok, error))
        return ok

    def _together(self, e: Together, now: float, out: list[Applied]) -> bool:
        items = e.parts
        if items and isinstance(items[0], Tag):
            tags = [x for x in items if isinstance(x, Tag)]
            if len(tags) > 2:
                with ThreadPoolExecutor(min(TAG_THREADS, len(tags))) as pool:
                    done = list(pool.map(self._cloud, tags))
            else:
                done = [self._cloud(t) for t in tags]
            out.extend(done)
            return all(a.taken for a in done)
        edits = [x for x in items if isinstance(x, Edit)]
        if len(edits) > 1 and self.edits.apply_together(edits):
            out.extend(Applied(x, True) for x in edits)
            return True
        return all([self._one(x, now, out) for x in edits])

    def _now(self) -> datetime:
        assert self.clock is not None, "EC2's effects need the context's clock"
        return self.clock()

    def _cloud(self, e: Fleet | Tag | Terminate | PlacementGroup | DropPlacementGroup | Stop
               | Start) -> Applied:
        """One of EC2's writes, its outcome by the kind's error policy (module docstring)."""
        assert self.cloud is not None, "EC2's effects need the context's cloud"
        cloud = self.cloud
        if isinstance(e, Terminate):
            crash_point("release:before_terminate")
        try:
            match e:
                case Fleet():
                    got = cloud.launch(e.pool, e.count, e.need, e.token, dict(e.tags), e.spec)
                    return Applied(e, True, fleet=got)
                case Tag():
                    cloud.tag(e.instance_id, dict(e.tags))
                case Terminate():
                    cloud.terminate(list(e.instance_ids))
                case PlacementGroup():
                    cloud.ensure_placement_group(e.name, dict(e.tags))
                case DropPlacementGroup():
                    cloud.delete_placement_group(e.name)
                case Stop():
                    cloud.stop(list(e.instance_ids))
                case Start():
                    cloud.start(e.instance_id)
        except CloudError as err:
            match e:
                case Tag():
                    self.event(Kind.TAG_FAILED, f"{e.instance_id} ({e.node}): {err}",
                               node=e.node, gang_id=e.gang)
                case Terminate():
                    self.event(Kind.TERMINATE_FAILED,
                               f"{','.join(e.instance_ids)} ({e.why}): {err}")
                case DropPlacementGroup():
                    log.info("placement group %s not deleted yet: %s", e.name, err)
                case Stop():
                    self.event(Kind.WARM_STOP_FAILED,
                               f"{','.join(e.instance_ids)} ({e.why}): {err}")
            return Applied(e, False, err.message, err.code)
        if isinstance(e, Terminate):
            crash_point("release:after_terminate")
            self.store.mark_terminated(e.instance_ids, self._now())
            self.event(Kind.TERMINATED, f"{','.join(e.instance_ids)} ({e.why})")
        if isinstance(e, Stop):
            self.store.keep_warm(e.instance_ids, self._now())
            self.event(Kind.WARM_STOPPED, f"{','.join(e.instance_ids)} ({e.why})")
        return Applied(e, True)

    def _outside(self, e: Forget | Names | WriteFile) -> tuple[bool, str]:
        """The event queue's, Route 53's and a file's writes, by their kinds' policies (the
        effects' docstrings)."""
        if isinstance(e, WriteFile):
            try:
                with open(e.path, "w", encoding="utf-8") as f:
                    f.write(e.text)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as err:
                return False, f"cannot write {e.path}: {err}"
            return True, ""
        try:
            if isinstance(e, Forget):
                assert self.queue is not None, "Forget needs the context's queue"
                self.queue.delete(e.receipt)
            else:
                assert self.zone is not None, "Names needs the context's DNS zone"
                self.zone.change(dict(e.upsert), dict(e.delete))
                self.event(*e.said)
        except CloudError as err:
            if isinstance(e, Forget):  # (it comes back after its visibility timeout)
                log.warning("cannot delete event message: %s", err)
            return False, str(err)
        return True, ""

    def _signal(self, s: Signal) -> tuple[bool, str]:
        g = s.grace
        if s.again:
            log.info("job %s on %s: signalled already (another of its nodes' warning)",
                     g.job_id, g.node)
        else:
            try:
                self.slurm.signal_job(g.job_id, g.signal, s.full)
            except SlurmError as e:
                self.event(Kind.SIGNAL_FAILED, f"job {g.job_id} on {g.node}: {e}; requeued "
                           "now", node=g.node)
                return False, str(e)
        self.store.put_grace(g)
        if not s.again:
            self.event(Kind.JOB_SIGNALLED, s.said, node=g.node)
            crash_point("grace:after_signal")
        return True, ""
