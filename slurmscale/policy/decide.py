"""The capacity policy: Snapshot -> Plan. Pure and deterministic; the daemon and the simulator
run this same function.

Scale-up (governed pools): the target rises when pending GPU-hours stay above
`queue_gpu_hours` for `sustained_s` (or a job has waited `max_wait_s`), at most once per
`cooldown_s`, by what the pending jobs need beyond the free nodes - no more than would run
their GPU-hours within a cooldown, at least `step_nodes` (`step_sizing: fixed`: by
`step_nodes`); and when a pending gang cannot fit, by the gang's whole shortfall in one
decision, cooldown or not. Immediate pools keep the target at max_nodes: Slurm powers up each
job's whole node set through the hooks.

Scale-down (both modes) is slower than scale-up and never touches an allocated, reserved or
booting node, nor the idle capacity pending jobs are about to use: an idle node goes when it
has been idle `min_idle_s` and the pool's recent arrivals do not forecast a use for it within
`reuse_horizon_s` (a terminate-then-relaunch costs a boot), and in any case after `max_idle_s`
(where Slurm's SuspendTime would have released it); at most `max_scale_down_per_cycle` early
releases per decision, and never below `min_nodes`.

Safety buffer (on-demand pools a spot pool falls back to): at least a share of the GPUs in use
is kept powered up on demand, so jobs requeued by a burst of spot interruptions restart on warm
nodes instead of waiting for a boot while spot capacity is gone. Slurm prefers the spot
partition (higher PriorityTier), so these nodes sit idle until spot cannot take a job; what
they cost and what they save is measured in docs/spot.md.
"""

from __future__ import annotations

import functools
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from operator import attrgetter

from slurmscale.hostlists import node_order_key
from slurmscale.policy.demand import demand_of, pending_nodes, pool_demand, tally_nodes
from slurmscale.policy.model import (
    Action,
    ActionKind,
    Mode,
    NodeState,
    NodeView,
    PendingJob,
    Plan,
    PoolDemand,
    PoolKnobs,
    PoolMemory,
    PoolTally,
    Snapshot,
    StepSizing,
)

LIVE = (NodeState.BOOTING, NodeState.IDLE, NodeState.ALLOCATED, NodeState.RESERVED)


def _clamp(v: int, k: PoolKnobs) -> int:
    return max(k.min_nodes, min(k.max_nodes, v))


def _governed_target(k: PoolKnobs, mem: PoolMemory, demand: PoolDemand,
                     need: Callable[[], int], live: int, idle: int, now: float,
                     actions: list[Action]) -> PoolMemory:
    target = _clamp(mem.target, k)
    above_since = mem.above_since
    last_step = mem.last_step_at
    # Gang-aware: pending gangs that do not fit in the idle nodes plus the headroom under the
    # target get their whole shortfall now.
    # Nodes above the target that still run jobs count as the pool's size for this.
    base = max(target, live)
    free = idle + (base - live)
    shortfall = 0
    fitted: list[str] = []
    for job_id, n in demand.pending_gangs:
        if n > k.max_nodes:
            continue  # can never fit; reservations/alerts deal with it, not the target
        if n <= free:
            free -= n
            continue
        if base + shortfall + (n - free) > k.max_nodes:
            break  # priority order: do not let a smaller, later gang jump the queue
        shortfall += n - free
        free = 0
        fitted.append(f"{job_id} ({n} nodes)")
    if shortfall:
        new = _clamp(base + shortfall, k)
        actions.append(Action(ActionKind.RAISE_TARGET, k.name,
                              f"pending gang {', '.join(fitted)} cannot fit: target "
                              f"{target} -> {new} in one step", count=new - target))
        return PoolMemory(new, above_since, now)
    # Queue pressure: sustained pending GPU-hours above the threshold, or a job waiting past
    # max_wait_s (small demand must not wait forever), one step per cooldown.
    waited_out = demand.pending_jobs > 0 and demand.oldest_wait_s >= k.max_wait_s
    if demand.pending_gpu_hours > k.queue_gpu_hours or waited_out:
        above_since = above_since if above_since is not None else now
        sustained = now - above_since >= k.sustained_s or waited_out
        cooled = last_step is None or now - last_step >= k.cooldown_s
        if sustained and cooled and target < k.max_nodes:
            step, sized = _step(k, demand, need, idle + (base - live))
            new = _clamp(target + step, k)
            why = (f"pending {demand.pending_gpu_hours:.1f} GPU-h > {k.queue_gpu_hours:g} for "
                   f"{now - above_since:.0f}s" if not waited_out else
                   f"a job has waited {demand.oldest_wait_s:.0f}s >= {k.max_wait_s:.0f}s")
            actions.append(Action(ActionKind.RAISE_TARGET, k.name,
                                  f"{why}{sized}: target {target} -> {new}",
                                  count=new - target))
            return PoolMemory(new, above_since, now)
    else:
        above_since = None
    return PoolMemory(target, above_since, last_step)


def _step(k: PoolKnobs, demand: PoolDemand, pending: Callable[[], int],
          free: int) -> tuple[int, str]:
    """How far queue pressure raises the target, and what the reason adds: the nodes the
    pending jobs need (`pending`, worked out only here) beyond the `free` ones (idle, or
    under the target), but no more than would run their GPU-hours (by time limit) within one
    cooldown - work shorter than the cooldown can share nodes one job after another - and at
    least `step_nodes`."""
    if k.step_sizing is StepSizing.FIXED:
        return k.step_nodes, ""
    need = pending()
    short = max(0, need - free)
    if k.gpus_per_node and k.cooldown_s > 0:
        per_cooldown = math.ceil(demand.pending_gpu_hours * 3600.0
                                 / (k.gpus_per_node * k.cooldown_s) - 1e-6)
        want = min(short, per_cooldown)
    else:
        per_cooldown, want = short, short
    if want < k.step_nodes:
        return k.step_nodes, ""
    return want, (f"; pending jobs need {need} node(s), {free} free"
                  + (f", their GPU-hours fill {per_cooldown} within the cooldown"
                     if per_cooldown < short else ""))


def _holds(k: PoolKnobs, nodes: list[NodeView], target: int,
           actions: list[Action]) -> None:
    """Which powered-down nodes Slurm may power up: in a governed pool, only as many as the
    target leaves room for above the live ones; the rest are held (drained with slurmscale's
    reason). Nodes drained or down by anyone else are never touched."""
    mine = [n for n in nodes if n.usable]
    if k.mode is Mode.IMMEDIATE:
        allowed = {n.name for n in mine}
    else:
        live = [n for n in mine if n.state in LIVE]
        room = max(0, target - len(live))
        down = sorted((n for n in mine if n.state is NodeState.POWERED_DOWN),
                      key=lambda n: (n.held, node_order_key(n.name)))
        allowed = {n.name for n in live} | {n.name for n in down[:room]}
    hold = tuple(n.name for n in mine if n.name not in allowed and not n.held
                 and n.state is NodeState.POWERED_DOWN)
    unhold = tuple(n.name for n in mine if n.name in allowed and n.held)
    if hold:
        actions.append(Action(ActionKind.HOLD, k.name,
                              f"target {target}: {len(hold)} powered-down node(s) above it are "
                              "held out of scheduling", nodes=hold, count=len(hold)))
    if unhold:
        why = ("pool is in immediate mode" if k.mode is Mode.IMMEDIATE
               else f"target {target} covers them")
        actions.append(Action(ActionKind.UNHOLD, k.name, f"{why}: {len(unhold)} held node(s) "
                              "returned to Slurm", nodes=unhold, count=len(unhold)))


def _reuse_forecast(k: PoolKnobs, arrivals: list[tuple[float, int]], now: float,
                    fits: int) -> float:
    """Nodes the pool's recent arrivals say will be asked for within the horizon, counting only
    jobs that `fits` idle nodes could run whole: keeping a few nodes for a gang larger than that
    saves it nothing, since it waits for a boot either way."""
    recent = sum(n for t, n in arrivals if now - k.reuse_window_s <= t <= now and n <= fits)
    return recent * k.reuse_horizon_s / k.reuse_window_s


def _in_use(nodes: list[NodeView], gpus_per_node: int) -> float:
    """GPUs running jobs (nodes, for a pool without GPUs)."""
    if gpus_per_node:
        return float(sum(n.alloc_gpus for n in nodes if n.state in LIVE))
    return float(sum(1 for n in nodes if n.state is NodeState.ALLOCATED))


def buffer_nodes(k: PoolKnobs, nodes_by_pool: dict[str, list[NodeView]],
                 gpus_by_pool: dict[str, int]) -> tuple[int, str]:
    """How many idle (or booting) nodes of on-demand pool `k` the safety buffer keeps warm
    for the spot pools falling back to it, and why. Busy on-demand nodes are not a buffer:
    they cannot take a requeued job."""
    if not k.buffer:
        return 0, ""
    parts: list[str] = []
    units = 0.0
    for r in k.buffer:
        used = _in_use(nodes_by_pool.get(r.spot_pool, []), gpus_by_pool.get(r.spot_pool, 0))
        units += r.fraction * used
        unit = "GPU(s)" if gpus_by_pool.get(r.spot_pool, 0) else "busy node(s)"
        parts.append(f"{r.fraction:.0%} of {used:g} {unit} in use on {r.spot_pool}")
    by_share = math.ceil(units / max(1, k.gpus_per_node) - 1e-9)
    warm = sum(r.warm_nodes for r in k.buffer)
    want = min(k.max_nodes, max(by_share, warm))
    why = f"on-demand safety buffer of {want} idle node(s) for {' + '.join(parts)}"
    if warm:
        why += f", at least {warm}"
    return want, why


def _warm(k: PoolKnobs, nodes: list[NodeView], want: int, why: str,
          actions: list[Action]) -> None:
    spare = sum(1 for n in nodes if n.state in (NodeState.IDLE, NodeState.BOOTING)
                and n.usable and not n.held)
    if spare >= want:
        return
    down = sorted((n for n in nodes if n.state is NodeState.POWERED_DOWN and n.usable
                   and not n.held), key=lambda n: node_order_key(n.name))
    up = tuple(n.name for n in down[:want - spare])
    if up:
        actions.append(Action(ActionKind.WARM, k.name, f"{why}; {spare} spare: powering up "
                              f"{len(up)}", nodes=up, count=len(up)))


def _scale_down(k: PoolKnobs, nodes: list[NodeView], demand: PoolDemand, target: int,
                arrivals: list[tuple[float, int]], now: float,
                actions: list[Action], floor: int = 0) -> list[str]:
    live = [n for n in nodes if n.state in LIVE]
    idle = sorted((n for n in nodes if n.state is NodeState.IDLE and n.usable),
                  key=lambda n: (n.idle_since if n.idle_since is not None else now, n.name))
    if not k.release_paid_idle:
        paid = [n.name for n in idle if n.paid]
        if paid:
            actions.append(Action(ActionKind.KEEP, k.name, "idle on reserved capacity, paid "
                                  "whether used or not: releasing it saves nothing and a "
                                  "relaunch costs a boot", nodes=tuple(paid), lasting=True))
            idle = [n for n in idle if not n.paid]
    # Idle capacity a pending job is about to use is not idle: Slurm will place it there, with
    # powered-down nodes under the target for the rest of a gang. A gang that fits in neither
    # is not about to use them: it waits for running jobs to end (holding nodes for it is what
    # reservations do, with a budget).
    avail, headroom = len(idle), max(0, target - len(live))
    for _, n in demand.pending_gangs:
        if n <= avail + headroom:
            from_idle = min(n, avail)
            avail, headroom = avail - from_idle, headroom - (n - from_idle)
    avail -= min(avail, demand.pending_jobs - len(demand.pending_gangs))
    spare = avail
    forecast = _reuse_forecast(k, arrivals, now, spare)
    keep_for_reuse = math.ceil(forecast - 1e-9)
    room = max(0, len(live) - max(k.min_nodes, floor))
    out: list[str] = []
    early = 0  # released before max_idle_s: these are capped per cycle
    kept_reuse: list[str] = []
    # Most recently idle nodes are the ones kept for reuse: the oldest idle go first.
    candidates = idle[:spare]
    n_reuse = min(keep_for_reuse, len(candidates))
    n_releasable = len(candidates) - n_reuse  # candidates[n_releasable:] are kept for reuse
    for i, node in enumerate(candidates):
        if len(out) >= room:
            break
        idle_for = now - (node.idle_since if node.idle_since is not None else now)
        if idle_for >= k.max_idle_s:
            # Where Slurm's own SuspendTime would have released it: never held back longer.
            out.append(node.name)
        elif i < n_releasable and idle_for >= k.min_idle_s:
            if early < k.max_scale_down_per_cycle:
                out.append(node.name)
                early += 1
        elif i >= n_releasable and idle_for >= k.min_idle_s:
            kept_reuse.append(node.name)
    if out:
        actions.append(Action(
            ActionKind.RELEASE, k.name,
            f"idle >= {k.min_idle_s:.0f}s with no pending job for them and a reuse forecast of "
            f"{forecast:.1f} node(s) in {k.reuse_horizon_s:.0f}s", nodes=tuple(out),
            count=len(out)))
    bottom = max(k.min_nodes, floor)
    if bottom and len(out) == room and len(live) - room <= bottom:
        kept = [n.name for n in candidates if n.name not in out and n.name not in kept_reuse
                and now - (n.idle_since if n.idle_since is not None else now) >= k.min_idle_s]
        if kept:
            why = ("kept idle as the on-demand safety buffer" if floor > k.min_nodes
                   else f"kept idle: the pool keeps at least {k.min_nodes} node(s) up "
                   "(min_nodes)")
            actions.append(Action(ActionKind.KEEP, k.name, why, nodes=tuple(kept),
                                  lasting=True))
    if kept_reuse:
        actions.append(Action(ActionKind.KEEP, k.name,
                              f"recent arrivals forecast {forecast:.1f} node(s) needed within "
                              f"{k.reuse_horizon_s:.0f}s: relaunching would cost a boot",
                              nodes=tuple(kept_reuse)))
    return out


class _Demand:
    """A snapshot's pending demand, pool by pool: from its tallies where it has them and
    they are exact for the pool, else by walking its jobs (sorted by pool once, and only if
    asked)."""

    def __init__(self, s: Snapshot) -> None:
        self.s = s
        self._by_pool: tuple[dict[str, list[PendingJob]], dict[str, list[PendingJob]]] | None \
            = None

    def _walked(self) -> tuple[dict[str, list[PendingJob]], dict[str, list[PendingJob]]]:
        if self._by_pool is None:
            jobs: dict[str, list[PendingJob]] = defaultdict(list)
            also: dict[str, list[PendingJob]] = defaultdict(list)
            for j in self.s.jobs:
                jobs[j.pool].append(j)
                for other in j.also:
                    also[other].append(j)
            self._by_pool = jobs, also
        return self._by_pool

    def _tally(self, k: PoolKnobs, near: bool) -> PoolTally | None:
        t = self.s.tallies.get(k.name) if self.s.tallies is not None else None
        if t is not None and near and k.name in self.s.near:
            t = t.plus(self.s.near[k.name])
        return t if t is not None and t.exact(k) else None

    def own(self, k: PoolKnobs) -> PoolDemand:
        t = self._tally(k, False)
        if t is not None:
            return demand_of(k, t, self.s.now)
        return pool_demand(k, self._walked()[0][k.name], self.s.now)

    def near(self, k: PoolKnobs, own: PoolDemand) -> PoolDemand:
        """With the jobs that may also run here (requeued spot jobs waiting for the
        on-demand buffer, say): what is about to use its idle nodes, for scale-down."""
        if self.s.tallies is not None:
            if k.name not in self.s.near:
                return own
            t = self._tally(k, True)
            if t is not None:
                return demand_of(k, t, self.s.now)
        jobs, also = self._walked()
        return pool_demand(k, jobs[k.name] + also[k.name], self.s.now) if also[k.name] \
            else own

    def nodes(self, k: PoolKnobs) -> int:
        t = self._tally(k, False)
        if t is not None:
            return tally_nodes(k, t)
        return pending_nodes(k, self._walked()[0][k.name])


_NAME = attrgetter("name")
_STATE_USABLE_HELD = attrgetter("state", "usable", "held")


def _keep_while_settling(k: PoolKnobs, idle: int, settling: frozenset[str],
                         actions: list[Action]) -> None:
    """While jobs slurmscale requeued are not back in the queue (a storm's first pass: the
    rest of its warnings and the requeued jobs come next), the pool's idle nodes are kept:
    a spot pool's buffer shrinks with the spot nodes lost, and would otherwise release the
    on-demand nodes those jobs need a moment later."""
    if idle:
        shown = ",".join(sorted(settling)[:3]) + ("..." if len(settling) > 3 else "")
        actions.append(Action(ActionKind.KEEP, k.name, f"jobs requeued off interrupted nodes "
                              f"not back in the queue yet ({shown}): idle nodes kept",
                              count=idle))


def decide(s: Snapshot) -> Plan:
    nodes_by_pool: dict[str, list[NodeView]] = defaultdict(list)
    for n in s.nodes:
        nodes_by_pool[n.pool].append(n)
    pending = _Demand(s)
    arrivals_by_pool: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for t, pool, arrived in s.arrivals:
        arrivals_by_pool[pool].append((t, arrived))
    actions: list[Action] = []
    targets: dict[str, int] = {}
    memory: dict[str, PoolMemory] = {}
    demands: dict[str, PoolDemand] = {}
    gpus_by_pool = {k.name: k.gpus_per_node for k in s.pools}
    for k in sorted(s.pools, key=lambda p: p.name):
        nodes = sorted(nodes_by_pool[k.name], key=_NAME)
        demand = pending.own(k)
        demands[k.name] = demand
        # (the nodes counted by state, and the idle ones free to take, in one pass)
        states: Counter[NodeState] = Counter()
        idle = 0
        for (state, usable, held), count in Counter(map(_STATE_USABLE_HELD, nodes)).items():
            states[state] += count
            if state is NodeState.IDLE and usable and not held:
                idle += count
        live = sum(states[st] for st in LIVE)
        mem = s.memory.get(k.name, PoolMemory(target=k.min_nodes))
        buffer, why_buffer = buffer_nodes(k, nodes_by_pool, gpus_by_pool)
        # live nodes the buffer keeps: the busy ones plus the idle buffer
        floor = min(k.max_nodes, buffer + states[NodeState.ALLOCATED]
                    + states[NodeState.RESERVED]) if buffer else 0
        if k.mode is Mode.IMMEDIATE:
            mem = PoolMemory(k.max_nodes, None, mem.last_step_at)
        else:
            mem = _governed_target(k, mem, demand, functools.partial(pending.nodes, k), live,
                                   idle, s.now, actions)
            if mem.target < floor:
                actions.append(Action(ActionKind.RAISE_TARGET, k.name, f"{why_buffer}: target "
                                      f"{mem.target} -> {floor}", count=floor - mem.target))
                mem = PoolMemory(floor, mem.above_since, s.now)
        # Jobs that may also run here are about to use its idle nodes too (e.g. requeued
        # spot jobs waiting for the on-demand buffer): they count for scale-down only.
        near = pending.near(k, demand)
        released: list[str] = []
        if s.settling:
            _keep_while_settling(k, idle, s.settling, actions)
        else:
            released = _scale_down(k, nodes, near, mem.target, arrivals_by_pool[k.name],
                                   s.now, actions, floor=floor)
        if k.mode is Mode.GOVERNED and released:
            new = _clamp(min(mem.target, live - len(released)), k)
            if new < mem.target:
                actions.append(Action(ActionKind.LOWER_TARGET, k.name,
                                      f"released {len(released)} idle node(s): target "
                                      f"{mem.target} -> {new}", count=mem.target - new))
                mem = PoolMemory(new, mem.above_since, mem.last_step_at)
        _holds(k, nodes, mem.target, actions)
        if buffer:
            _warm(k, nodes, buffer, why_buffer, actions)
        targets[k.name] = mem.target
        memory[k.name] = mem
    return Plan(s.now, tuple(actions), targets, memory, demands)
