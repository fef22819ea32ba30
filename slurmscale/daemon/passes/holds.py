"""Reservations that accumulate nodes for starving gangs, carried out on Slurm.

Each pass: reconcile the store's holds with `scontrol show res` (Slurm is the truth about which
reservations exist; the store remembers budgets and which jobs must not be held for again),
run the pure planner, then create / extend / attach / delete. Only reservations whose name
starts with slurmscale's prefix are ever touched: an admin's are read (their nodes are never
taken) and nothing else.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime

from slurmscale.audit import Kind
from slurmscale.config import Config
from slurmscale.daemon.executor import edits
from slurmscale.daemon.executor.edits import Edit, EditKind
from slurmscale.daemon.executor.effects import Effect, Effects, Record, Say
from slurmscale.daemon.queue.knobs import hold_knobs
from slurmscale.lifecycles import HoldState
from slurmscale.model import SlurmReservation
from slurmscale.policy.limit_use import LimitUse, Shares, fixed
from slurmscale.policy.model import NodeView
from slurmscale.policy.observe import slurm_time
from slurmscale.policy.reservations import (
    GangJob,
    Hold,
    HoldActionKind,
    HoldPlan,
    RankedGangs,
    ReservationKnobs,
    TakeOrder,
    plan_holds,
)
from slurmscale.store.protocol import PassStore
from slurmscale.store.rows import HoldRow

log = logging.getLogger(__name__)

# the audit event of each hold action carried out
HOLD_EVENT = {
    HoldActionKind.CREATE: Kind.RESERVATION_CREATE,
    HoldActionKind.EXTEND: Kind.RESERVATION_EXTEND,
    HoldActionKind.ATTACH: Kind.RESERVATION_ATTACH,
    HoldActionKind.RELEASE: Kind.RESERVATION_RELEASE,
}


def limit_use_runs_since(cfg: Config, now: float) -> float | None:
    """Since when `limit_use: auto` learns from the jobs that ended (Unix s; None: the
    config fixes it, nothing is read)."""
    r = cfg.reservations
    return None if r.limit_use != "auto" else now - r.limit_use_auto.learning().window_s


# How long after its end a job may first be recorded: the ledger records a job that ran
# between two passes from Slurm's memory of ended jobs (MinJobAge, 300 s by default), with
# Slurm's own end time. A read takes the jobs that ended since the last read less this.
LATE_RECORD_S = 86400.0


class LimitUseLearner:
    """Each pool's `reservations.limit_use` as the hold rule uses it now: the config's, or
    (auto) learned from the jobs the store recorded as ended within the window
    (policy/limit_use.py), read again every `limit_use_auto.every_s`. The first read takes
    the whole window; each one after it, the jobs that ended since the last read (less
    `LATE_RECORD_S`), kept in `Shares` with those read before: a window of days is not read
    again every ten minutes."""

    def __init__(self, cfg: Config, store: PassStore) -> None:
        self.store = store
        self.read_at: float | None = None
        self.shares = Shares()
        self.uses: dict[str, LimitUse] = {}
        r = cfg.reservations
        self.pools = [p.name for p in cfg.pools]
        # (the config's, made once: asked every pass)
        self.how = r.limit_use_auto.learning()
        self.fixed = None if r.limit_use == "auto" else fixed(float(r.limit_use), self.pools)

    def current(self, now: float) -> dict[str, LimitUse]:
        if self.fixed is not None:
            self.uses = self.fixed
            return self.uses
        pools, how = self.pools, self.how
        since = now - how.window_s  # (limit_use_runs_since's)
        if self.read_at is None or not 0 <= now - self.read_at < how.every_s:
            if self.read_at is None or self.read_at > now:  # (first, or a clock gone back)
                self.shares, start = Shares(), since
            else:
                start = max(since, self.read_at - LATE_RECORD_S)
            self.shares.add_all(self.store.job_runs(datetime.fromtimestamp(start, UTC)))
            self.shares.drop_before(since)
            self.uses = self.shares.learned(pools, how)
            self.read_at = now
        return self.uses


def current_holds(cfg: Config, store: PassStore, slurm_res: list[SlurmReservation],
                  now: float) -> tuple[list[Hold], list[str], frozenset[str]]:
    """The holds to plan with (the store's, corrected by Slurm), the names of holds that
    vanished from Slurm, and every node in any reservation (an admin's included)."""
    prefix = cfg.reservations.prefix
    in_slurm = {r.name: r for r in slurm_res}
    rows = {r.name: r for r in store.holds((HoldState.ACTIVE.value,))}
    holds: list[Hold] = []
    gone = [name for name in rows if name not in in_slurm]
    for name, r in in_slurm.items():
        if not name.startswith(prefix):
            continue
        row = rows.get(name)
        if row is not None:
            holds.append(Hold(row.name, row.pool, row.job_id, row.user_name, row.needed,
                              r.nodes, row.created_s, row.spent_gpu_s, row.accounted_s,
                              row.attached))
            continue
        known = store.hold(name)
        if known is not None and known.state != HoldState.ACTIVE:
            continue  # releasing: retried below, not planned
        # Not in the store (lost, or created by an older store): adopt it, so it is bounded.
        pool = next((p.name for n in r.nodes if (p := cfg.pool_of(n))), None)
        if pool is None:
            continue
        created = slurm_time(r.start_time) or now
        holds.append(Hold(name, pool, name.removeprefix(prefix), r.users[0] if r.users else "",
                          len(r.nodes), r.nodes, created, 0.0, now))
    reserved = frozenset(n for r in slurm_res for n in r.nodes)
    return holds, gone, reserved


class HoldPass:
    """The hold planner on the store's holds (`plan`), and its plan carried out (`apply`)
    through the pass's effects executor: `effects` None for a HoldPass that only plans
    (`plan --live`)."""

    def __init__(self, cfg: Config, store: PassStore, effects: Effects | None = None,
                 knobs: ReservationKnobs | None = None) -> None:
        """`knobs`: the config's hold knobs where already made (the queue view's)."""
        self.cfg = cfg
        self.store = store
        self.effects = effects
        self.knobs = hold_knobs(cfg) if knobs is None else knobs

    def plan(self, nodes: tuple[NodeView, ...], jobs: tuple[GangJob, ...],
             slurm_res: list[SlurmReservation], now: float,
             limit_use: Mapping[str, LimitUse],
             ranked: RankedGangs | None = None,
             order: TakeOrder | None = None) -> tuple[HoldPlan, list[str]]:
        """`limit_use`: each pool's share of their limits jobs run (LimitUseLearner);
        `ranked`, `order`: the queue view's ranking of `jobs` and the nodes a hold may
        take as last worked out (None: worked out here)."""
        holds, gone, reserved = current_holds(self.cfg, self.store, slurm_res, now)
        plan = plan_holds(self.knobs, {p.name: p.gpus_per_node for p in self.cfg.pools},
                          {p.name: p.max_nodes for p in self.cfg.pools}, nodes, jobs,
                          tuple(holds), self.store.exhausted_jobs(), now, reserved,
                          {p: u.value for p, u in limit_use.items()}, ranked, order)
        return plan, gone

    def apply(self, plan: HoldPlan, gone: list[str], slurm_res: list[SlurmReservation],
              now: datetime) -> frozenset[str]:
        """Carry out the plan, as effects: Slurm's edits first, in the plan's order (a
        release is its pending job taken out of the reservation, then the reservation
        deleted; a release Slurm refused before is tried again), then what each outcome
        calls for - the holds' rows and the events of their ends. Returns the nodes now held
        (for the capacity policy)."""
        fx = self.effects
        assert fx is not None, "a HoldPass made to plan applies nothing"
        t = now.timestamp()
        after = {h.name: h for h in plan.holds}
        then: list[Effect] = []
        for name in gone:
            then += _finished(self.store.hold(name), name, GONE, t)
        # releases to ask of Slurm: name -> (its row, why, exhausted, tried before)
        releases: dict[str, tuple[HoldRow | None, str, bool, bool]] = {}
        existing = {r.name for r in slurm_res}
        for row in self.store.holds((HoldState.RELEASING.value,)):
            if row.name in gone:
                continue  # (finished above)
            if row.name not in existing:
                then += _finished(row, row.name, row.reason, t)
            else:
                releases[row.name] = (row, row.reason, False, True)
        asked: list[Effect] = [e for name, (row, _, _, _) in releases.items()
                               for e in _deletes(name, row)]
        for a in plan.actions:
            said = (HOLD_EVENT[a.kind], f"{a.name}: {a.reason}")
            match a.kind:
                case HoldActionKind.CREATE:
                    asked.append(edits.reserve(a.name, list(a.nodes), [after[a.name].user],
                                               self.knobs.max_hold_s + self.knobs.end_margin_s,
                                               a.job_id, said))
                case HoldActionKind.EXTEND:
                    asked.append(edits.reserve_nodes(a.name, list(a.nodes), a.job_id, said))
                case HoldActionKind.ATTACH:
                    asked.append(edits.attach(a.job_id, a.name, list(a.nodes), said))
                case _:  # RELEASE
                    held = self.store.hold(a.name)
                    releases[a.name] = (held, a.reason, a.exhausted, False)
                    asked += _deletes(a.name, held)
        failed: set[str] = set()
        not_attached: set[str] = set()  # an attach Slurm refused is tried again next pass
        for out in fx.apply(asked, t):
            e = out.effect
            assert isinstance(e, Edit)
            if e.kind is EditKind.UNHOLD:
                was, why, exhausted, before = releases[e.reservation]
                if out.taken:
                    then += _finished(was, e.reservation, why, t, exhausted)
                elif not before:  # Slurm keeps a reservation its job runs in: retried
                    then += _releasing(was, e.reservation, why, exhausted, out.error)
            elif not out.taken and e.kind is not EditKind.DETACH:
                failed.add(e.reservation)
                if e.kind is EditKind.ATTACH:
                    not_attached.add(e.reservation)
        for h in plan.holds:
            if h.name in failed and self.store.hold(h.name) is None:
                continue  # never created: nothing to remember
            then.append(Record(HoldRow(
                name=h.name, pool=h.pool, job_id=h.job_id, user_name=h.user, needed=h.needed,
                nodes=json.dumps(list(h.nodes)), created_s=h.created_s,
                spent_gpu_s=h.spent_gpu_s, accounted_s=h.accounted_s,
                attached=h.attached and h.name not in not_attached,
                state=HoldState.ACTIVE, reason="", exhausted=False, released_s=None)))
        fx.apply(then, t)
        return frozenset(n for h in plan.holds for n in h.nodes)


GONE = "the reservation is gone from Slurm (deleted or expired)"


def _finished(row: HoldRow | None, name: str, why: str, t: float,
              exhausted: bool = False) -> list[Effect]:
    """A hold ended (its reservation deleted, or gone from Slurm): its row released
    (`exhausted`: it spent its budget or time, so its job is never held for again),
    and said with the idle GPU time it spent."""
    if row is None:
        return [Say(Kind.RESERVATION_RELEASED, f"{name}: {why}")]
    done = replace(row, state=HoldState.RELEASED, reason=why, released_s=t,
                   exhausted=row.exhausted or exhausted)
    return [Record(done), Say(Kind.RESERVATION_RELEASED, f"{name}: {why} "
                              f"({row.spent_gpu_s / 3600:.2f} idle GPU-hours spent)")]


def _deletes(name: str, row: HoldRow | None) -> list[Effect]:
    """A hold's reservation deleted. Slurm refuses while any job points at it, a pending one
    too: the hold's job, if still pending, is first taken out of it (a running job keeps
    it, and the delete is retried once it ends)."""
    job = [edits.detach(row.job_id, name)] if row is not None else []
    return [*job, edits.unhold(name)]


def _releasing(row: HoldRow | None, name: str, why: str, exhausted: bool, error: str
               ) -> list[Effect]:
    """A release Slurm refused (the job runs in the reservation: it owns the nodes now):
    the row kept as releasing, tried each pass until the job ends."""
    said = Say(Kind.RESERVATION_RELEASE_PENDING, f"{name}: {why}; Slurm kept it for now "
               f"({error}), retrying each pass")
    if row is None:
        return [said]
    return [Record(replace(row, state=HoldState.RELEASING, reason=why, exhausted=exhausted)),
            said]
