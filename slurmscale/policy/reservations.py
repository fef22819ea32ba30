"""Reservations that accumulate nodes for a large pending gang job: pure decisions.

Where a pool cannot grow (at `max_nodes`, or every other node is taken), small jobs take each
node that frees up and a gang can wait forever. For the highest-priority gang that has waited
`accumulate_after_s` and cannot be given new capacity now, slurmscale holds a reservation of
its own (named with its prefix) and adds the pool's idle nodes to it as they free up; once it
holds the gang's node count the job is pointed at it and starts. A hold costs idle GPU time, so
each reservation has a budget in idle GPU-hours and a maximum hold time; it is released at
once when either is spent or its job is cancelled, held, finished or started elsewhere. A job
whose hold ran out is not held for again: the budget is per job, not per attempt.

The daemon and the simulator run this same function.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from slurmscale.config import ReservationSettings
from slurmscale.hostlists import node_order_key
from slurmscale.policy.model import NodeState, NodeView


def _setting(name: str) -> Any:
    """The config's default for a reservations setting: the one copy of it."""
    return ReservationSettings.model_fields[name].default


@dataclass(frozen=True)
class ReservationKnobs:
    """The planner's settings; defaults from the config model (ReservationSettings)."""

    enabled: bool = _setting("enabled")
    prefix: str = _setting("prefix")
    min_gang_nodes: int = _setting("min_gang_nodes")
    accumulate_after_s: float = _setting("accumulate_after_s")
    per_pool: int = _setting("per_pool")
    hold_budget_gpu_hours: float = _setting("hold_budget_gpu_hours")
    max_hold_s: float = _setting("max_hold_s")
    # the Slurm reservation outlives the hold's maximum by this much, so slurmscale deletes it
    # (it never expires under a job about to start); Slurm's backfill sees its nodes taken
    # until then
    end_margin_s: float = _setting("end_margin_s")
    # hold busy nodes for the shortfall too (they drain into it)
    drain_busy: bool = _setting("drain_busy")


@dataclass(frozen=True)
class GangJob:
    """A queued job as the reservation planner needs it (pending or running)."""

    job_id: str
    pool: str
    nodes: int
    gpus_per_node: int
    submit_s: float
    priority: int
    user: str
    account: str = ""
    pending: bool = True
    waiting_for_capacity: bool = True  # pending reason is Resources/Priority-like
    held: bool = False  # JobHeld*, priority 0: nothing will start it
    reservation: str = ""


@dataclass(frozen=True)
class Hold:
    """One of slurmscale's reservations and what it has cost so far."""

    name: str
    pool: str
    job_id: str
    user: str
    needed: int
    nodes: tuple[str, ...]
    created_s: float
    spent_gpu_s: float = 0.0
    accounted_s: float = 0.0
    attached: bool = False


class HoldActionKind(StrEnum):
    CREATE = "create"
    EXTEND = "extend"  # the full new node list (Slurm 22.05 refuses Nodes+=)
    ATTACH = "attach"  # scontrol update jobid=... reservation=...
    RELEASE = "release"


@dataclass(frozen=True)
class HoldAction:
    kind: HoldActionKind
    name: str
    pool: str
    job_id: str
    reason: str
    nodes: tuple[str, ...] = ()
    user: str = ""
    account: str = ""
    exhausted: bool = False  # RELEASE for its budget or time: the job is never held for again


@dataclass(frozen=True)
class HoldPlan:
    actions: tuple[HoldAction, ...]
    holds: tuple[Hold, ...]  # after this plan: accounting updated, released ones dropped
    grabbed: frozenset[str] = field(default_factory=frozenset)  # idle nodes newly reserved


def reservation_name(k: ReservationKnobs, job_id: str) -> str:
    return f"{k.prefix}{job_id}"


def _release_reason(k: ReservationKnobs, h: Hold, job: GangJob | None,
                    now: float) -> tuple[str, bool] | None:
    """Why the hold ends now, and whether it spent its budget or time (then the job is never
    held for again), or None to keep it."""
    if job is None:
        return f"job {h.job_id} is no longer queued (finished or cancelled)", False
    if not job.pending:
        if job.reservation == h.name:
            return f"job {h.job_id} started in it", False
        return f"job {h.job_id} started elsewhere", False
    if job.held:
        return f"job {h.job_id} is held", False
    if h.attached:
        return None  # the job is about to start on the held nodes: no budget cut now
    if h.spent_gpu_s / 3600.0 >= k.hold_budget_gpu_hours:
        return (f"hold budget spent: {h.spent_gpu_s / 3600.0:.1f} of "
                f"{k.hold_budget_gpu_hours:g} idle GPU-hours", True)
    if now - h.created_s >= k.max_hold_s:
        return f"maximum hold time {k.max_hold_s:.0f}s reached", True
    return None


def plan_holds(k: ReservationKnobs, gpus_per_node: dict[str, int], max_nodes: dict[str, int],
               nodes: tuple[NodeView, ...], jobs: tuple[GangJob, ...],
               holds: tuple[Hold, ...], exhausted: frozenset[str], now: float,
               reserved: frozenset[str] = frozenset()) -> HoldPlan:
    """`exhausted`: jobs whose hold was already released for budget or time; never again.
    `reserved`: nodes in any reservation (an admin's included): never taken."""
    if not holds and not (k.enabled and any(
            j.pending and j.nodes >= k.min_gang_nodes
            and now - j.submit_s >= k.accumulate_after_s for j in jobs)):
        return HoldPlan((), (), frozenset())  # nothing held, no gang has waited long enough
    by_job = {j.job_id: j for j in jobs}
    taken = set(reserved) | {n for h in holds for n in h.nodes}
    actions: list[HoldAction] = []
    kept: list[Hold] = []
    view = {n.name: n for n in nodes}
    free: dict[str, list[str]] = {}
    busy: dict[str, list[NodeView]] = {}
    down_usable: dict[str, int] = {}
    for n in sorted(nodes, key=lambda n: node_order_key(n.name)):
        if n.name in taken:
            continue
        if n.state is NodeState.IDLE and n.usable and not n.held:
            free.setdefault(n.pool, []).append(n.name)
        elif n.state is NodeState.ALLOCATED and n.usable and not n.held:
            busy.setdefault(n.pool, []).append(n)
        elif n.state is NodeState.POWERED_DOWN and n.usable:
            down_usable[n.pool] = down_usable.get(n.pool, 0) + 1
    for pool in busy:  # the soonest free by their jobs' time limits drain first
        busy[pool].sort(key=lambda n: (n.free_at if n.free_at is not None else float("inf"),
                                       n.alloc_gpus, node_order_key(n.name)))
    grabbed: set[str] = set()

    def take(pool: str, count: int) -> list[str]:
        """Idle nodes first; the rest of the shortfall from busy nodes, which then drain into
        the reservation (their jobs finish, nothing new starts there): with small jobs packed
        onto every node, waiting for whole nodes to fall idle by chance can take forever."""
        got = free.get(pool, [])[:max(0, count)]
        free[pool] = free.get(pool, [])[len(got):]
        if k.drain_busy and len(got) < count:
            more = busy.get(pool, [])[:count - len(got)]
            busy[pool] = busy.get(pool, [])[len(more):]
            got += [n.name for n in more]
        grabbed.update(got)
        return got

    def idle_gpus(h: Hold) -> int:
        return sum(max(0, gpus_per_node.get(h.pool, 0) - (view[n].alloc_gpus if n in view
                                                          else 0)) for n in h.nodes)

    for h in sorted(holds, key=lambda h: h.name):
        if not h.attached:
            h = replace(h, spent_gpu_s=h.spent_gpu_s
                        + idle_gpus(h) * max(0.0, now - h.accounted_s))
        h = replace(h, accounted_s=now)
        job = by_job.get(h.job_id)
        if job is not None and job.nodes != h.needed:  # e.g. a hold adopted after a restart
            h = replace(h, needed=job.nodes)
        ending = _release_reason(k, h, job, now)
        if ending is not None:
            why, spent = ending
            actions.append(HoldAction(HoldActionKind.RELEASE, h.name, h.pool, h.job_id, why,
                                      h.nodes, exhausted=spent))
            continue
        if not h.attached and len(h.nodes) < h.needed:
            more = take(h.pool, h.needed - len(h.nodes))
            if more:
                h = replace(h, nodes=tuple(sorted((*h.nodes, *more), key=node_order_key)))
                actions.append(HoldAction(
                    HoldActionKind.EXTEND, h.name, h.pool, h.job_id,
                    f"{len(more)} more node(s): holding {len(h.nodes)} of {h.needed} "
                    f"for job {h.job_id}", h.nodes))
        drained = all(view[n].state is NodeState.RESERVED for n in h.nodes if n in view)
        if not h.attached and len(h.nodes) >= h.needed and drained:
            h = replace(h, attached=True)
            actions.append(HoldAction(HoldActionKind.ATTACH, h.name, h.pool, h.job_id,
                                      f"holds all {h.needed} nodes: job {h.job_id} pointed "
                                      "at it", h.nodes))
        kept.append(h)

    if k.enabled:
        held_jobs = {h.job_id for h in kept} | {a.job_id for a in actions}
        for pool in sorted(gpus_per_node):
            if sum(1 for h in kept if h.pool == pool) >= k.per_pool:
                continue
            cands = sorted(
                (j for j in jobs if j.pool == pool and j.pending and not j.held
                 and j.waiting_for_capacity and not j.reservation
                 and k.min_gang_nodes <= j.nodes <= max_nodes.get(pool, 0)
                 and now - j.submit_s >= k.accumulate_after_s
                 and j.job_id not in held_jobs and j.job_id not in exhausted),
                key=lambda j: (-j.priority, j.submit_s, j.job_id))
            for j in cands:
                if sum(1 for h in kept if h.pool == pool) >= k.per_pool:
                    break
                if j.nodes <= len(free.get(pool, [])) + down_usable.get(pool, 0):
                    continue  # the pool can start it now: Slurm (and the policy) will
                got = sorted(take(pool, j.nodes), key=node_order_key)
                if not got:
                    break  # nothing to hold yet: the highest-priority gang waits for it
                name = reservation_name(k, j.job_id)
                h = Hold(name, pool, j.job_id, j.user, j.nodes, tuple(got), now, 0.0, now)
                actions.append(HoldAction(
                    HoldActionKind.CREATE, name, pool, j.job_id,
                    f"job {j.job_id} ({j.nodes} nodes) has waited {now - j.submit_s:.0f}s and "
                    f"the pool cannot grow for it: holding {len(got)} of {j.nodes} node(s)",
                    h.nodes, j.user, j.account))
                if len(got) >= j.nodes and not any(
                        view[n].state is NodeState.ALLOCATED for n in got):
                    h = replace(h, attached=True)
                    actions.append(HoldAction(HoldActionKind.ATTACH, name, pool, j.job_id,
                                              f"holds all {j.nodes} nodes: job {j.job_id} "
                                              "pointed at it", h.nodes))
                kept.append(h)
    return HoldPlan(tuple(actions), tuple(kept), frozenset(grabbed))
