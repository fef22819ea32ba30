"""A pass's effects as values, applied in order in one place, each outcome returned.

A pass decides from what it read (pure: `evacuation.py` for the interruption pass) and hands
the result, a sequence of effects, to `Effects.apply`. The effects are Slurm's edits
(`edits.Edit`, applied by `SlurmEdits` with its per-kind error policy), an audit event
(`Say`), a row recorded (`Record`: a job's lost run, a node's replacement, a hold), instances
terminated (`Terminate`), a job signalled ahead of its requeue with its
grace recorded (`Signal`), AWS Health's scheduled change kept (`Heard`), edits Slurm takes
in one call (`Together`: the nodes' addresses, node by node when refused), and `Chain`: an
effect and what follows it, `then` when it was taken, `otherwise` when it was not (a
preemption is recorded only once its requeue was taken; a job whose signal Slurm refused
is requeued at once). Where a later decision depends on an outcome, the pass reads it off
the `Applied` list `apply` returns (how many requeues Slurm took, whether a grace began),
never off a call made in the middle of the decision.

Error policy per kind: an edit's is `SlurmEdits`'s (said, held off, said by the pass, done
anyway); a signal Slurm refused is said (`signal_failed`) and its `otherwise` applied; the
store's writes are fenced by the leader's epoch (store/repo.py) and raise when the lease
is lost, which ends the pass (nothing after them is applied); an audit event cannot fail.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from slurmscale.audit import Event, Kind
from slurmscale.crashpoints import crash_point
from slurmscale.daemon import scheduled
from slurmscale.daemon.edits import Edit, EditKind, SlurmEdits
from slurmscale.model import ScheduledEvent
from slurmscale.slurm.protocol import SlurmClient, SlurmError
from slurmscale.store.protocol import PassStore, TimerStore
from slurmscale.store.rows import GraceRow, HoldRow, PreemptionRow, ReplacementRow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Say:
    """An audit event."""

    kind: Kind
    text: str
    node: str | None = None


@dataclass(frozen=True)
class Record:
    """A row recorded: a job's lost run (the preemptions table: what `max_preemptions`, the
    reports and the simulator's checks count), a node's replacement (what the replace
    loop guard, a power-up's boot attempts, `status` and `report` count), or a hold as it
    stands (its budget, its nodes, its end)."""

    row: PreemptionRow | ReplacementRow | HoldRow


@dataclass(frozen=True)
class Terminate:
    """Instances terminated and marked so on the store (`PassContext.terminate`: a refusal
    is said as terminate_failed, the store left as it was for the sweep to find)."""

    instance_ids: tuple[str, ...]
    why: str


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
class Chain:
    """An effect and what follows it: `then` once it was taken, `otherwise` when not."""

    first: Effect
    then: tuple[Effect, ...] = ()
    otherwise: tuple[Effect, ...] = ()


@dataclass(frozen=True)
class Together:
    """Edits of one kind Slurm takes in one call (edits.TOGETHER: nodes' addresses): sent
    together, then each alone if Slurm refuses that, so every refusal names its node. Each
    edit's outcome is its own."""

    edits: tuple[Edit, ...]


Effect = Edit | Say | Record | Signal | Heard | Terminate | Chain | Together


@dataclass(frozen=True)
class Applied:
    """One effect's outcome: taken, or refused (`error`: why, where it was said)."""

    effect: Edit | Say | Record | Signal | Heard | Terminate
    taken: bool
    error: str = ""


def taken(outcomes: Iterable[Applied], kind: EditKind) -> list[Edit]:
    """The edits of `kind` Slurm took, in order."""
    return [a.effect for a in outcomes
            if a.taken and isinstance(a.effect, Edit) and a.effect.kind is kind]


def signalled(outcomes: Iterable[Applied]) -> list[GraceRow]:
    """The graces begun (signalled, or recorded for a job signalled for another node)."""
    return [a.effect.grace for a in outcomes if a.taken and isinstance(a.effect, Signal)]


class EffectStore(PassStore, TimerStore, Protocol):
    """What the effects write: preemptions, graces (PassStore) and timers."""


class Effects:
    """Applies a pass's effects in order; `apply` returns each one's outcome."""

    def __init__(self, slurm: SlurmClient, store: EffectStore, event: Event,
                 terminate: Callable[[list[str], str], bool] | None = None) -> None:
        """`terminate`: how instances are terminated (`PassContext.terminate`; needed for
        `Terminate`)."""
        self.slurm = slurm
        self.store = store
        self.event = event
        self.edits = SlurmEdits(slurm, event, store)
        self.terminate = terminate

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
            if len(e.edits) > 1 and self.edits.apply_together(list(e.edits)):
                out.extend(Applied(x, True) for x in e.edits)
                return True
            return all([self._one(x, now, out) for x in e.edits])
        ok, error = True, ""
        match e:
            case Edit():
                ok = self.edits.apply(e, now)
                error = "" if ok else self.edits.last_error
            case Say():
                self.event(e.kind, e.text, node=e.node)
            case Record(row=PreemptionRow() as row):
                self.store.add_preemption(row)
            case Record(row=ReplacementRow() as row):
                self.store.add_replacement(row)
            case Record(row=HoldRow() as row):
                self.store.put_hold(row)
            case Terminate():
                assert self.terminate is not None, "Terminate needs the context's terminate"
                ok = self.terminate(list(e.instance_ids), e.why)
            case Signal():
                ok, error = self._signal(e)
            case Heard():
                scheduled.heard(self.store, e.instance_id, e.change, e.at)
        out.append(Applied(e, ok, error))
        return ok

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
