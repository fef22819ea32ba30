"""The capacity policy inside the daemon: read Slurm, run the pure decisions (reservations
for starving gangs, then the pool sizes), carry out the plan.

The plan is recomputed from live state every pass, so a step that failed (Slurm briefly
unreachable, say) is simply planned again next time; only the policy's memory (targets and the
sustained/cooldown clocks) and the holds' budgets are kept in the store between passes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from slurmscale.aside import Aside
from slurmscale.audit import Kind
from slurmscale.config import CapacityType, Config
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.executor import edits
from slurmscale.daemon.executor.effects import Effect, Say
from slurmscale.daemon.passes.blocks import BlockOutlook, block_outlook
from slurmscale.daemon.passes.ledger import Ledger, PoolNow, pools_now
from slurmscale.daemon.queue.knobs import fallback_rules
from slurmscale.daemon.queue.queue_view import QueueView
from slurmscale.hostlists import compress
from slurmscale.model import JobPriority, PriorityWeights, QueueJob, SlurmNode, SlurmReservation
from slurmscale.policy.decide import decide
from slurmscale.policy.fallback import Rewrite, partition_rewrites
from slurmscale.policy.limit_use import LimitUse
from slurmscale.policy.model import ActionKind, NodeState, Plan, Snapshot
from slurmscale.policy.reservations import GangJob, HoldPlan, slipped
from slurmscale.policy.routing import Routed
from slurmscale.policy.standing import GangStanding, gang_standings
from slurmscale.slurm import reasons
from slurmscale.slurm.protocol import SlurmClient, SlurmError
from slurmscale.slurm.reasons import Why
from slurmscale.store.protocol import LaunchStore, PassStore
from slurmscale.store.rows import GraceRow, utc

if TYPE_CHECKING:
    from slurmscale.daemon.passes.holds import LimitUseLearner

log = logging.getLogger(__name__)


# Audit-log kinds per action; KEEP is not logged (it would repeat every pass) but `plan` shows it.
EVENT_KIND = {
    ActionKind.RAISE_TARGET: Kind.TARGET_RAISED,
    ActionKind.LOWER_TARGET: Kind.TARGET_LOWERED,
    ActionKind.HOLD: Kind.NODES_HELD,
    ActionKind.UNHOLD: Kind.NODES_UNHELD,
    ActionKind.RELEASE: Kind.SCALE_DOWN,
    ActionKind.WARM: Kind.BUFFER_WARMED,
}


# A job requeued off an interrupted node within this long is demand even while Slurm holds it
# back (its requeue delay): the on-demand buffer must not be released under it.
REQUEUED_RECENTLY_S = 3600.0
# ... and within this long, one the queue does not list yet (Slurm completing it off its
# node) keeps every pool's idle nodes: the next pass sees it pending (policy/decide.py)
REQUEUE_SETTLE_S = 60.0


@dataclass(frozen=True)
class PassPlan:
    capacity: Plan
    holds: HoldPlan
    gone: tuple[str, ...]  # holds whose reservation vanished from Slurm
    reservations: tuple[SlurmReservation, ...]
    rewrites: tuple[Rewrite, ...] = ()  # spot-only jobs given the on-demand partition too
    snapshot: Snapshot | None = None  # what the decisions were made from
    jobs: Sequence[QueueJob] = ()  # the queue as read this pass (the read itself)
    blocks: tuple[BlockOutlook, ...] = ()  # capacity-block pools: windows, pending jobs
    standings: tuple[GangStanding, ...] = ()  # pending gangs in the queue (where read)
    gangs: tuple[GangJob, ...] = ()  # the pending gangs this pass planned holds for
    # each pool's share of their time limits jobs run, as the hold rule used it
    limit_use: Mapping[str, LimitUse] = field(default_factory=dict)
    graces: tuple[GraceRow, ...] = ()  # jobs signalled before their requeue, still running
    routes: tuple[Routed, ...] = ()  # where the daemon sent the gangs of the last minutes


Priorities = tuple[list[JobPriority], PriorityWeights | None]


def read_priorities(slurm: SlurmClient) -> Priorities:
    """sprio's lines and the age weights, or none: under priority/basic sprio refuses to run,
    and a gang's standing is then its squeue priority alone; never a reason to skip a pass."""
    try:
        return slurm.priorities(), slurm.priority_weights()
    except SlurmError as e:
        log.warning("priority factors unreadable (%s): standings from squeue alone", e)
        return [], None


def _grabbed_not_idle(snap: Snapshot, grabbed: frozenset[str]) -> Snapshot:
    """Idle nodes a hold takes this pass are not idle for the pool-size decision."""
    if not grabbed:
        return snap
    return replace(snap, nodes=tuple(
        n._replace(state=NodeState.RESERVED) if n.name in grabbed and n.state is NodeState.IDLE
        else n for n in snap.nodes))


def current_plan(cfg: Config, slurm: SlurmClient, store: PassStore | Callable[[], PassStore],
                 now: float,
                 view: QueueView | None = None,
                 standings: bool = False,
                 nodes: list[SlurmNode] | None = None,
                 limit_use: LimitUseLearner | None = None,
                 aside: bool = False) -> PassPlan:
    """What the policy decides from Slurm as it is now (raises SlurmError if unreadable).
    `view`: the daemon's view of the queue kept across passes (QueueView: its arrival log,
    each pending gang's earliest backfill plan, and what each unchanged job gave last
    pass; None: a fresh one, a one-shot command's); `standings`: read sprio for every
    pending gang's standing (`plan` shows it), not only where a gang's plan slipped;
    `nodes`: the pass's node read, current (None: read them here); `limit_use`: the
    daemon's learner of the hold rule's limit_use (None: learned here, from the store).
    `store` may be a function that gives it, called once Slurm is read (`plan --live`
    reads the store in another process meanwhile). `aside`: with `standings`, read sprio
    and make the standings in a child process while this one builds the snapshot
    (slurmscale/aside.py: a one-shot command's second core, never the daemon's)."""
    from slurmscale.daemon.passes.holds import HoldPass, LimitUseLearner

    view = view if view is not None else QueueView()  # (a rebuild: a fresh view's read)
    # Slurm read as the daemon reads it: nodes, queue, reservations; with the standings made
    # aside, the child starts once the queue is read, and the nodes are read meanwhile
    if nodes is None and not (standings and aside):
        nodes = slurm.nodes()
    jobs = slurm.active_jobs()
    gangs = view.gangs(cfg, jobs)  # (with their earliest plans; the read's own)

    def standings_now() -> tuple[GangStanding, ...]:
        return gang_standings(gangs, {p.name: p.partition for p in cfg.pools}, jobs,
                              *read_priorities(slurm), now)
    made = Aside(standings_now) if standings and aside else None
    if nodes is None:
        nodes = slurm.nodes()
    res = slurm.reservations()

    def lifted(standing: tuple[GangStanding, ...]) -> tuple[GangJob, ...]:
        lift = {s.job_id: s.lift_s for s in standing}
        return tuple(g._replace(age_lift_s=lift.get(g.job_id)) for g in gangs)
    try:
        if callable(store):
            store = store()
        lost = store.preemptions(since=now - REQUEUED_RECENTLY_S)
        requeued = frozenset(p.job_id for p in lost)
        state = view.read(cfg, nodes, jobs, now, store.pool_memory(), requeued,
                          store.reserved_nodes())
        snap = state.snapshot
        listed = {j.job_id for j in jobs}
        settling = frozenset(p.job_id for p in lost if p.job_id not in listed
                             and utc(p.at).timestamp() >= now - REQUEUE_SETTLE_S)
        if settling:
            snap = replace(snap, settling=settling)
        holds = HoldPass(cfg, store, knobs=state.hold_knobs)
        # A gang's age lift weighs in the hold rule only where its plan slipped (is age
        # about to stop the overtaking?): sprio is read for that, or when asked; made
        # aside, the standings are waited for before the decisions only then
        needed = any(slipped(holds.knobs, g) for g in gangs)
        standing = None
        if needed or (standings and made is None):
            standing = made.result() if made is not None else standings_now()
            gangs = lifted(standing)
        uses = (limit_use or LimitUseLearner(cfg, store)).current(now)
        hold_plan, gone = holds.plan(snap.nodes, gangs, res, now, uses, state.ranked,
                                     state.take_order)
        snap = _grabbed_not_idle(snap, hold_plan.grabbed)
        unavailable = {r.pool: r.until_s for r in store.offerings() if not r.offering}
        blocks = (block_outlook(cfg, store.capacity_reservations(), jobs, now)
                  if any(p.capacity_type is CapacityType.CAPACITY_BLOCK for p in cfg.pools)
                  else [])
        capacity = decide(snap)
        if standing is None and made is not None:  # (shown, not decided on: made meanwhile)
            standing = made.result()
            gangs = lifted(standing)
    finally:
        if made is not None:
            made.close()
    return PassPlan(capacity, hold_plan, tuple(gone), tuple(res),
                    partition_rewrites(fallback_rules(cfg), jobs, unavailable, now), snap,
                    jobs,
                    tuple(blocks), standing or (), tuple(gangs), uses, tuple(store.graces()))


def effects_of(p: PassPlan) -> list[Effect]:
    """The plan's actions and partition rewrites as effects, in its order: a hold is a
    drain with slurmscale's reason, an unhold its undrain, a release a power-down once idle,
    a warm-up a power-up; an action with no edit of its own is said (a launch is the
    resume hook's). Keeps are the plan's only."""
    out: list[Effect] = []
    for a in p.capacity.actions:
        if a.kind is ActionKind.KEEP:
            continue
        nodes = list(a.nodes)
        expr = compress(nodes) if nodes else None
        said = (EVENT_KIND[a.kind], f"{a.pool}: {a.reason}" + (f" [{expr}]" if expr else ""))
        match a.kind:
            case ActionKind.HOLD:
                out.append(edits.drain(nodes, reasons.reason(Why.HELD), said=said))
            case ActionKind.UNHOLD:
                out.append(edits.undrain(nodes, said=said))
            case ActionKind.RELEASE:
                out.append(edits.release(nodes, said=said))
            case ActionKind.WARM:
                out.append(edits.power_up(nodes, said=said))
            case _:
                out.append(Say(said[0], said[1], expr))
    out += [edits.move(rw.job_id, list(rw.partitions), said=(
        Kind.JOB_PARTITION_REWRITTEN, f"job {rw.job_id} -> partition "
        f"{','.join(rw.partitions)}: {rw.reason}")) for rw in p.rewrites]
    return out


class CapacityPass:
    """`ledger`: records job starts/ends and capacity samples from this pass's reads (the
    daemon's; the simulator keeps its own accounts and passes none)."""

    def __init__(self, ctx: PassContext[LaunchStore], ledger: Ledger | None = None) -> None:
        from slurmscale.daemon.passes.holds import HoldPass, LimitUseLearner

        cfg, store = ctx.cfg, ctx.store
        self.cfg = cfg
        self.store = store
        self.slurm = ctx.slurm
        self.event = ctx.event
        self.effects = ctx.effects
        self.holds = HoldPass(cfg, store, ctx.effects)
        self.limit_use = LimitUseLearner(cfg, store)
        self.view = QueueView()  # the queue as the passes saw it (arrivals, job views)
        self._read_failing = False
        self.ledger = ledger
        self._pools_now: tuple[Snapshot | None, list[PoolNow]] = (None, [])  # (made from)
        self.last: PassPlan | None = None  # the last pass's plan (`slurmscale plan` asks)

    def run(self, now: datetime, nodes: list[SlurmNode] | None = None) -> PassPlan | None:
        """`nodes`: the pass's node read as it stands now (None: read here)."""
        try:
            p = current_plan(self.cfg, self.slurm, self.store, now.timestamp(),
                             self.view, nodes=nodes,
                             limit_use=self.limit_use)
        except SlurmError as e:
            # Logged every pass, recorded once per outage: the audit log is for decisions.
            log.warning("capacity pass skipped: %s", e)
            if not self._read_failing:
                self.event(Kind.SLURM_READ_FAILED,
                           f"capacity pass skipped until Slurm answers: {e}")
            self._read_failing = True
            return None
        except Exception:
            # a pass that failed part-way may leave the queue's view half brought up to
            # date (its records kept, what they give not): the next reads the queue afresh
            self.view.forget()
            raise
        if self._read_failing:
            self.event(Kind.SLURM_READ_OK, "Slurm readable again; capacity passes resumed")
            self._read_failing = False
        self.holds.apply(p.holds, list(p.gone), list(p.reservations), now)
        self.effects.apply(effects_of(p), now.timestamp())
        self.store.save_pool_memory(p.capacity.memory, now)
        if p.snapshot is not None and self.ledger is not None:
            self.ledger.observe(p.snapshot, p.jobs, now)
        self.last = p
        return p

    @property
    def pools_now(self) -> list[PoolNow]:
        """The last pass's capacity and demand per pool (the metrics' gauges), worked out
        when asked: the daemon's metrics ask once a pass, the simulator never."""
        snap = self.last.snapshot if self.last is not None and self.ledger is not None else None
        if snap is None:
            return []
        if self._pools_now[0] is not snap:
            self._pools_now = (snap, pools_now(snap))
        return self._pools_now[1]
