"""The built-in policies the simulator compares. Each is a function Snapshot -> Plan, but the
two slurmscale ones: those run the daemon's own capacity passes (`sim/daemon.py`) with its
default or governed knobs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from slurmscale.policy.demand import pool_demand
from slurmscale.policy.model import (
    Action,
    ActionKind,
    Mode,
    NodeState,
    Plan,
    PoolKnobs,
    PoolMemory,
    Snapshot,
)
from slurmscale.policy.reservations import ReservationKnobs

Decide = Callable[[Snapshot], Plan]


@dataclass(frozen=True)
class SimPolicy:
    name: str
    knobs: PoolKnobs
    decide: Decide | None  # None: the daemon's own passes decide (slurmscale's policies)
    all_up_from_start: bool = False  # static: every node booted at t=0, never released
    provision_to_target: bool = False  # naive: a target step launches a node at once
    holds: ReservationKnobs | None = None  # the daemon's: reservations for starving gangs
    description: str = ""
    offline_cost: bool = False  # the oracle: idle and cost worked out offline (sim/oracle.py)


def _naive(s: Snapshot) -> Plan:
    """A CPU-service autoscaler ported as-is: any pending job -> +1 node per cooldown
    (gang-unaware); scale down only when the queue is empty, one node per cooldown."""
    actions: list[Action] = []
    targets, memory, demands = {}, {}, {}
    for k in s.pools:
        jobs = [j for j in s.jobs if j.pool == k.name]
        d = pool_demand(k, jobs, s.now)
        demands[k.name] = d
        mem = s.memory.get(k.name, PoolMemory(k.min_nodes))
        cooled = mem.last_step_at is None or s.now - mem.last_step_at >= k.cooldown_s
        target = mem.target
        last = mem.last_step_at
        nodes = [n for n in s.nodes if n.pool == k.name]
        live = sum(1 for n in nodes if n.state is not NodeState.POWERED_DOWN)
        if d.pending_jobs and cooled and target < k.max_nodes:
            target, last = target + 1, s.now
            actions.append(Action(ActionKind.RAISE_TARGET, k.name, "queue non-empty: +1",
                                  count=1))
        elif not d.pending_jobs and cooled:
            idle = sorted((n for n in nodes if n.state is NodeState.IDLE
                           and n.idle_since is not None
                           and s.now - n.idle_since >= k.cooldown_s),
                          key=lambda n: (n.idle_since, n.name))
            if idle and live > k.min_nodes:
                actions.append(Action(ActionKind.RELEASE, k.name, "queue empty: -1",
                                      nodes=(idle[0].name,), count=1))
                target, last = max(k.min_nodes, min(target, live - 1)), s.now
        targets[k.name] = target
        memory[k.name] = PoolMemory(target, None, last)
    return Plan(s.now, tuple(actions), targets, memory, demands)


def _slurm_native(suspend_time_s: float) -> Decide:
    """Slurm's own power saving: every node idle for SuspendTime is powered down."""
    def run(s: Snapshot) -> Plan:
        actions = []
        for k in s.pools:
            idle = tuple(sorted(n.name for n in s.nodes if n.pool == k.name
                                and n.state is NodeState.IDLE and n.idle_since is not None
                                and s.now - n.idle_since >= suspend_time_s))
            if idle:
                actions.append(Action(ActionKind.RELEASE, k.name,
                                      f"idle >= SuspendTime {suspend_time_s:.0f}s",
                                      nodes=idle, count=len(idle)))
        return Plan(s.now, tuple(actions), {k.name: k.max_nodes for k in s.pools},
                    {k.name: PoolMemory(k.max_nodes) for k in s.pools}, {})
    return run


def _static(s: Snapshot) -> Plan:
    return Plan(s.now, (), {k.name: k.max_nodes for k in s.pools},
                {k.name: PoolMemory(k.max_nodes) for k in s.pools}, {})


def _never_release(s: Snapshot) -> Plan:
    """The oracle's run: nodes launched as Slurm asks (immediate), none ever released."""
    return Plan(s.now, (), {k.name: k.max_nodes for k in s.pools},
                {k.name: PoolMemory(k.max_nodes) for k in s.pools}, {})


POLICY_NAMES = ("naive", "immediate", "static", "slurmscale", "slurmscale-governed", "oracle")


DEFAULT_HOLDS = ReservationKnobs()


def builtin_policy(name: str, base: PoolKnobs,
                   holds: ReservationKnobs | None = DEFAULT_HOLDS) -> SimPolicy:
    """`holds`: the reservation knobs of the two slurmscale policies (None: no accumulation);
    the other policies model tools that have no such mechanism."""
    match name:
        case "naive":
            return SimPolicy(name, replace(base, mode=Mode.GOVERNED), _naive,
                             provision_to_target=True,
                             description="+1 node per cooldown on any pending job")
        case "immediate":
            return SimPolicy(name, replace(base, mode=Mode.IMMEDIATE), _slurm_native(600.0),
                             description="Slurm power saving, SuspendTime 10 min")
        case "static":
            return SimPolicy(name, base, _static, all_up_from_start=True,
                             description="max_nodes always up")
        case "slurmscale":
            return SimPolicy(name, replace(base, mode=Mode.IMMEDIATE), None, holds=holds,
                             description="immediate whole-gang scale-up, forecast scale-down")
        case "oracle":
            return SimPolicy(name, replace(base, mode=Mode.IMMEDIATE), _never_release,
                             offline_cost=True,
                             description="clairvoyant bound: never released while running; "
                             "idle and cost worked out offline (sim/oracle.py)")
        case "slurmscale-governed":
            return SimPolicy(name, replace(base, mode=Mode.GOVERNED), None, holds=holds,
                             description="governed target, gang-aware steps")
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}")
