"""The capacity policy as a pure function: worked example and properties."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmscale.policy.decide import decide
from slurmscale.policy.model import (
    ActionKind,
    BufferRule,
    Mode,
    NodeState,
    NodeView,
    PendingJob,
    PoolKnobs,
    PoolMemory,
    Snapshot,
    StepSizing,
)

# the reuse forecast on (the defaults release at the first idle pass: tested on their own)
GOV = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=16, mode=Mode.GOVERNED,
                min_idle_s=120.0, reuse_horizon_s=600.0)


def nodes(states: list[NodeState], idle_since: float = 0.0) -> tuple[NodeView, ...]:
    return tuple(NodeView(f"n{i + 1}", "gpu", s, idle_since if s is NodeState.IDLE else None)
                 for i, s in enumerate(states))


def test_a_pending_gang_raises_an_empty_governed_pool_by_its_full_size_in_one_step() -> None:
    snap = Snapshot(now=60, pools=(GOV,), nodes=nodes([NodeState.POWERED_DOWN] * 16),
                    jobs=(PendingJob("42", "gpu", 8, 8, 3600, 0),),
                    memory={"gpu": PoolMemory(0)})
    plan = decide(snap)
    raises = [a for a in plan.actions if a.kind is ActionKind.RAISE_TARGET]
    assert len(raises) == 1 and raises[0].count == 8
    assert plan.targets["gpu"] == 8
    assert "42 (8 nodes)" in raises[0].reason


def test_queue_pressure_steps_once_per_cooldown_after_the_sustained_window() -> None:
    k = replace(GOV, step_sizing=StepSizing.FIXED)
    jobs = tuple(PendingJob(str(i), "gpu", 1, 8, 4 * 3600, 0) for i in range(3))  # 96 GPU-h
    mem = PoolMemory(2)
    live = nodes([NodeState.ALLOCATED] * 2 + [NodeState.POWERED_DOWN] * 14)
    first = decide(Snapshot(0, (k,), live, jobs, {"gpu": mem}))
    assert first.targets["gpu"] == 2  # above the threshold, not yet for 5 minutes
    later = decide(Snapshot(300, (k,), live, jobs, first.memory))
    assert later.targets["gpu"] == 3
    cooling = decide(Snapshot(600, (k,), live, jobs, later.memory))
    assert cooling.targets["gpu"] == 3
    cooled = decide(Snapshot(900, (k,), live, jobs, cooling.memory))
    assert cooled.targets["gpu"] == 4


def _pressure_step(k: PoolKnobs, jobs: tuple[PendingJob, ...],
                   states: list[NodeState]) -> tuple[int, str]:
    """The target after the sustained window, and the raise's reason."""
    live, mem = nodes(states), {"gpu": PoolMemory(2)}
    first = decide(Snapshot(0, (k,), live, jobs, mem))
    plan = decide(Snapshot(k.sustained_s, (k,), live, jobs, first.memory))
    (raised,) = [a for a in plan.actions if a.kind is ActionKind.RAISE_TARGET]
    return plan.targets["gpu"], raised.reason


def test_a_queue_pressure_step_is_what_the_pending_jobs_need_in_one_decision() -> None:
    busy = [NodeState.ALLOCATED] * 2 + [NodeState.POWERED_DOWN] * 14
    # three one-node jobs and twelve one-GPU jobs (packed: two more nodes), four hours each
    jobs = tuple(PendingJob(str(i), "gpu", 1, 8, 4 * 3600, 0) for i in range(3)) + tuple(
        PendingJob(f"s{i}", "gpu", 1, 1, 4 * 3600, 0) for i in range(12))
    target, why = _pressure_step(GOV, jobs, busy)
    assert target == 2 + 5
    assert "pending jobs need 5 node(s), 0 free" in why
    # an idle node is free for one of them: one fewer
    target, _ = _pressure_step(GOV, jobs, [NodeState.IDLE] + busy[1:])
    assert target == 2 + 4
    # a job without GPUs takes a node of its own
    cpu_only = jobs + (PendingJob("c", "gpu", 1, 0, 4 * 3600, 0),)
    assert _pressure_step(GOV, cpu_only, busy)[0] == 2 + 6
    # never above max_nodes, however much is pending
    many = tuple(PendingJob(str(i), "gpu", 1, 8, 4 * 3600, 0) for i in range(40))
    assert _pressure_step(GOV, many, busy)[0] == GOV.max_nodes


def test_short_work_is_stepped_by_its_gpu_hours_over_the_cooldown_and_never_below_step_nodes(
) -> None:
    busy = [NodeState.ALLOCATED] * 2 + [NodeState.POWERED_DOWN] * 14
    # ten one-node jobs of 5 minutes' limit: 6.7 GPU-h, two such jobs per node per cooldown
    k = replace(GOV, queue_gpu_hours=1.0)
    short = tuple(PendingJob(str(i), "gpu", 1, 8, 300, 0) for i in range(10))
    target, why = _pressure_step(k, short, busy)
    assert target == 2 + 5  # 10 jobs x 8 GPUs x 300 s / (8 GPUs x 600 s)
    assert "their GPU-hours fill 5 within the cooldown" in why
    # a larger step_nodes is the least step
    assert _pressure_step(replace(k, step_nodes=8), short, busy)[0] == 2 + 8
    # fixed: step_nodes whatever is pending
    assert _pressure_step(replace(k, step_sizing=StepSizing.FIXED), short, busy)[0] == 3


def test_idle_nodes_a_pending_job_will_use_are_not_released() -> None:
    k = replace(GOV, mode=Mode.IMMEDIATE)
    snap = Snapshot(10_000, (k,), nodes([NodeState.IDLE] * 4, idle_since=0),
                    (PendingJob("7", "gpu", 3, 8, 3600, 9_000),))
    released = [n for a in decide(snap).actions if a.kind is ActionKind.RELEASE
                for n in a.nodes]
    assert len(released) == 1


def test_by_default_an_idle_node_nothing_pending_will_use_goes_at_the_first_pass() -> None:
    k = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=16, max_scale_down_per_cycle=8)
    idle = nodes([NodeState.IDLE] * 3, idle_since=9_999)  # idle for a second
    arrivals = tuple((9_000.0 + i * 100, "gpu", 1) for i in range(10))
    plan = decide(Snapshot(10_000, (k,), idle, (PendingJob("7", "gpu", 1, 8, 3600, 9_990),),
                           arrivals=arrivals))
    released = [n for a in plan.actions if a.kind is ActionKind.RELEASE for n in a.nodes]
    assert len(released) == 2, "the pending job's node stays; no forecast keeps the others"


def test_recent_arrivals_keep_idle_nodes_that_will_be_reused() -> None:
    k = replace(GOV, mode=Mode.IMMEDIATE, max_scale_down_per_cycle=8)
    idle = nodes([NodeState.IDLE] * 4, idle_since=9_700)  # idle 300 s: past min, under max
    quiet = decide(Snapshot(10_000, (k,), idle, ()))
    busy = decide(Snapshot(10_000, (k,), idle, (), arrivals=tuple(
        (9_000.0 + i * 100, "gpu", 1) for i in range(10))))  # 10 nodes/h -> ~1.7 per 10 min
    rel = lambda p: sum(len(a.nodes) for a in p.actions if a.kind is ActionKind.RELEASE)  # noqa: E731
    assert rel(quiet) == 4
    assert rel(busy) == 2
    assert any(a.kind is ActionKind.KEEP for a in busy.actions)


states = st.sampled_from(list(NodeState))


@settings(max_examples=300, deadline=None)
@given(
    node_states=st.lists(states, min_size=1, max_size=24),
    idle_ages=st.lists(st.floats(0, 5000), min_size=24, max_size=24),
    gangs=st.lists(st.integers(1, 30), max_size=6),
    target=st.integers(-5, 40), min_nodes=st.integers(0, 4),
    mode=st.sampled_from(list(Mode)), now=st.floats(5000, 10_000),
)
def test_policy_properties(node_states, idle_ages, gangs, target, min_nodes, mode, now) -> None:  # type: ignore[no-untyped-def]
    k = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=len(node_states),
                  min_nodes=min(min_nodes, len(node_states)), mode=mode)
    views = tuple(NodeView(f"n{i}", "gpu", s, now - idle_ages[i] if s is NodeState.IDLE
                           else None) for i, s in enumerate(node_states))
    jobs = tuple(PendingJob(f"j{i}", "gpu", n, 8, 3600, 0) for i, n in enumerate(gangs))
    snap = Snapshot(now, (k,), views, jobs, {"gpu": PoolMemory(target)})
    plan = decide(snap)
    # deterministic
    assert plan == decide(snap)
    # target within bounds
    assert k.min_nodes <= plan.targets["gpu"] <= k.max_nodes
    # scale-down only ever picks idle nodes, never allocated, reserved or booting ones
    by_name = {v.name: v for v in views}
    released = [n for a in plan.actions if a.kind is ActionKind.RELEASE for n in a.nodes]
    assert all(by_name[n].state is NodeState.IDLE for n in released)
    early = [n for n in released if now - by_name[n].idle_since < k.max_idle_s]
    assert len(early) <= k.max_scale_down_per_cycle
    live = sum(1 for v in views if v.state is not NodeState.POWERED_DOWN)
    assert live - len(released) >= min(k.min_nodes, live)
    # a gang is never planned partially: a gang raise makes room for at least one whole
    # pending gang, and adds no more than the gangs' combined size
    for a in plan.actions:
        if a.kind is ActionKind.RAISE_TARGET and "pending gang" in a.reason:
            idle = sum(1 for v in views if v.state is NodeState.IDLE)
            fits = [n for _, n in plan.demand["gpu"].pending_gangs if n <= k.max_nodes]
            base = max(min(max(target, k.min_nodes), k.max_nodes), live)
            assert 0 < plan.targets["gpu"] - base <= sum(fits)
            assert idle + (plan.targets["gpu"] - live) >= min(fits)


@settings(max_examples=200, deadline=None)
@given(node_states=st.lists(st.tuples(states, st.booleans(), st.booleans()), min_size=1,
                            max_size=16),
       target=st.integers(0, 16), mode=st.sampled_from(list(Mode)))
def test_holds_only_touch_slurmscales_own_powered_down_nodes(node_states, target, mode) -> None:  # type: ignore[no-untyped-def]
    k = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=len(node_states), mode=mode)
    views = tuple(NodeView(f"n{i}", "gpu", s, 0.0 if s is NodeState.IDLE else None,
                           held=held and usable, usable=usable)
                  for i, (s, held, usable) in enumerate(node_states))
    plan = decide(Snapshot(100.0, (k,), views, (), {"gpu": PoolMemory(target)}))
    by_name = {v.name: v for v in views}
    hold = [n for a in plan.actions if a.kind is ActionKind.HOLD for n in a.nodes]
    unhold = [n for a in plan.actions if a.kind is ActionKind.UNHOLD for n in a.nodes]
    assert all(by_name[n].usable and not by_name[n].held
               and by_name[n].state is NodeState.POWERED_DOWN for n in hold)
    assert all(by_name[n].held for n in unhold)
    if mode is Mode.IMMEDIATE:
        assert not hold and len(unhold) == sum(v.held for v in views)
    else:
        # after the plan, Slurm may use at most max(target, live) of the pool's usable nodes
        live = [v for v in views if v.usable and v.state is not NodeState.POWERED_DOWN]
        free = [v for v in views if v.usable and v.state is NodeState.POWERED_DOWN
                and ((not v.held and v.name not in hold) or v.name in unhold)]
        assert len(free) <= max(0, plan.targets["gpu"] - len(live))


def test_a_raised_target_unholds_the_lowest_numbered_nodes() -> None:
    pool = tuple(NodeView(f"n{i}", "gpu", NodeState.POWERED_DOWN, held=True)
                 for i in range(1, 13))
    plan = decide(Snapshot(60, (replace(GOV, max_nodes=12),), pool,
                           (PendingJob("7", "gpu", 3, 8, 3600, 0),), {"gpu": PoolMemory(0)}))
    (unhold,) = [a for a in plan.actions if a.kind is ActionKind.UNHOLD]
    assert unhold.nodes == ("n1", "n2", "n3")


def test_nodes_idle_past_max_idle_all_go_at_once_and_early_releases_are_capped() -> None:
    k = replace(GOV, mode=Mode.IMMEDIATE, max_nodes=80, max_scale_down_per_cycle=4)
    stale = tuple(NodeView(f"n{i}", "gpu", NodeState.IDLE, 10_000 - 700) for i in range(64))
    fresh = tuple(NodeView(f"m{i}", "gpu", NodeState.IDLE, 10_000 - 200) for i in range(10))
    plan = decide(Snapshot(10_000, (k,), stale + fresh, ()))
    released = [n for a in plan.actions if a.kind is ActionKind.RELEASE for n in a.nodes]
    assert len(released) == 64 + 4
    assert {n for n in released if n.startswith("n")} == {v.name for v in stale}


def test_a_recent_gang_too_big_for_the_idle_nodes_does_not_keep_them() -> None:
    k = replace(GOV, mode=Mode.IMMEDIATE, max_nodes=80, max_scale_down_per_cycle=8)
    idle = tuple(NodeView(f"n{i}", "gpu", NodeState.IDLE, 10_000 - 200) for i in range(8))
    big = decide(Snapshot(10_000, (k,), idle, (), arrivals=((9_900.0, "gpu", 64),)))
    small = decide(Snapshot(10_000, (k,), idle, (), arrivals=tuple(
        (9_000.0 + i, "gpu", 2) for i in range(6))))  # 12 nodes/h -> 2 in the next 10 min
    rel = lambda p: sum(len(a.nodes) for a in p.actions if a.kind is ActionKind.RELEASE)  # noqa: E731
    assert rel(big) == 8, "a 64-node gang waits for a boot anyway: keeping 8 saves it nothing"
    assert rel(small) == 6


def test_idle_nodes_a_gang_will_start_on_are_kept_only_if_the_gang_can_fit() -> None:
    idle2 = (NodeView("n1", "gpu", NodeState.IDLE, 9_000.0),
             NodeView("n2", "gpu", NodeState.IDLE, 9_000.0))
    busy2 = (NodeView("n3", "gpu", NodeState.ALLOCATED), NodeView("n4", "gpu",
                                                                 NodeState.ALLOCATED))
    gang = (PendingJob("9", "gpu", 4, 8, 3600, 9_500.0),)
    rel = lambda p: [n for a in p.actions if a.kind is ActionKind.RELEASE for n in a.nodes]  # noqa: E731
    # room to power up two more: Slurm starts the gang on the two idle nodes + two new ones
    roomy = replace(GOV, mode=Mode.IMMEDIATE, max_nodes=8)
    assert rel(decide(Snapshot(10_000, (roomy,), idle2 + busy2, gang))) == []
    # capped at 4 with two busy: the gang waits for them either way; the idle pair goes
    capped = replace(GOV, mode=Mode.IMMEDIATE, max_nodes=4)
    assert rel(decide(Snapshot(10_000, (capped,), idle2 + busy2, gang))) == ["n1", "n2"]


SPOT = PoolKnobs(name="spot", gpus_per_node=8, max_nodes=10)
ONDEMAND = PoolKnobs(name="od", gpus_per_node=8, max_nodes=4,
                     buffer=(BufferRule("spot", 0.2),))


def _pair(spot: list[NodeState], od: list[NodeState], od_idle_since: float = 0.0,
          ) -> tuple[NodeView, ...]:
    return tuple(
        [NodeView(f"s{i + 1}", "spot", s, alloc_gpus=8 if s is NodeState.ALLOCATED else 0)
         for i, s in enumerate(spot)]
        + [NodeView(f"o{i + 1}", "od", s, od_idle_since if s is NodeState.IDLE else None,
                    alloc_gpus=8 if s is NodeState.ALLOCATED else 0)
           for i, s in enumerate(od)])


def test_the_on_demand_buffer_powers_up_a_share_of_the_gpus_in_use() -> None:
    # 6 busy spot nodes = 48 GPUs in use; 20 % = 9.6 GPUs = 2 on-demand nodes of 8
    snap = Snapshot(0, (SPOT, ONDEMAND),
                    _pair([NodeState.ALLOCATED] * 6 + [NodeState.POWERED_DOWN] * 4,
                          [NodeState.POWERED_DOWN] * 4), ())
    warm = [a for a in decide(snap).actions if a.kind is ActionKind.WARM]
    assert [(a.pool, a.nodes) for a in warm] == [("od", ("o1", "o2"))]
    assert "2 idle node(s) for 20% of 48 GPU(s) in use on spot" in warm[0].reason


def test_buffer_nodes_are_kept_past_max_idle_and_released_when_work_ends() -> None:
    busy = _pair([NodeState.ALLOCATED] * 6, [NodeState.IDLE] * 3, od_idle_since=0)
    plan = decide(Snapshot(10_000, (SPOT, ONDEMAND), busy, ()))
    released = [n for a in plan.actions if a.kind is ActionKind.RELEASE for n in a.nodes]
    assert len(released) == 1  # 3 idle, the buffer wants 2
    assert not [a for a in plan.actions if a.kind is ActionKind.WARM]
    kept = [a for a in plan.actions if a.kind is ActionKind.KEEP and "buffer" in a.reason]
    assert len(kept) == 1 and len(kept[0].nodes) == 2
    quiet = _pair([NodeState.IDLE] * 6, [NodeState.IDLE] * 3, od_idle_since=0)
    plan = decide(Snapshot(10_000, (SPOT, ONDEMAND), quiet, ()))
    released = {n for a in plan.actions if a.kind is ActionKind.RELEASE for n in a.nodes}
    assert {"o1", "o2", "o3"} <= released  # nothing in use: no buffer


def test_a_storm_half_read_keeps_the_buffer_the_requeued_jobs_are_about_to_need() -> None:
    """The first pass of a storm lost 2 of 6 spot nodes: the buffer now wants 1 of its 3
    idle nodes, but the two jobs requeued off them are not back in the queue yet (Slurm is
    completing them): nothing is released until they are (it was, in a CI run: a launch)."""
    storm = _pair([NodeState.ALLOCATED] * 4 + [NodeState.POWERED_DOWN] * 2,
                  [NodeState.IDLE] * 3, od_idle_since=0)
    plan = decide(Snapshot(10_000, (SPOT, ONDEMAND), storm, ()))
    assert [n for a in plan.actions if a.kind is ActionKind.RELEASE for n in a.nodes]
    plan = decide(Snapshot(10_000, (SPOT, ONDEMAND), storm, (), settling=frozenset({"1", "2"})))
    assert not [a for a in plan.actions if a.kind is ActionKind.RELEASE]
    (kept,) = [a for a in plan.actions if a.kind is ActionKind.KEEP and a.pool == "od"]
    assert "not back in the queue yet (1,2)" in kept.reason and kept.count == 3


def test_warm_nodes_are_a_floor_and_the_buffer_never_exceeds_max_nodes() -> None:
    od = replace(ONDEMAND, buffer=(BufferRule("spot", 1.0, warm_nodes=1),))
    idle = _pair([NodeState.POWERED_DOWN] * 10, [NodeState.POWERED_DOWN] * 4)
    warm = [a for a in decide(Snapshot(0, (SPOT, od), idle, ())).actions
            if a.kind is ActionKind.WARM]
    assert warm and warm[0].nodes == ("o1",)
    full = _pair([NodeState.ALLOCATED] * 10, [NodeState.POWERED_DOWN] * 4)
    warm = [a for a in decide(Snapshot(0, (SPOT, od), full, ())).actions
            if a.kind is ActionKind.WARM]
    assert warm and len(warm[0].nodes) == 4


def test_a_governed_on_demand_pool_raises_its_target_for_the_buffer() -> None:
    od = replace(ONDEMAND, mode=Mode.GOVERNED)
    snap = Snapshot(0, (SPOT, od), _pair([NodeState.ALLOCATED] * 6,
                                         [NodeState.POWERED_DOWN] * 4), (),
                    {"od": PoolMemory(0)})
    plan = decide(snap)
    assert plan.targets["od"] == 2
    assert not [a for a in plan.actions if a.kind is ActionKind.HOLD
                and set(a.nodes) & {"o1", "o2"}]
    assert [a.nodes for a in plan.actions if a.kind is ActionKind.WARM] == [("o1", "o2")]


@settings(max_examples=150, deadline=None)
@given(spot=st.lists(st.sampled_from(list(NodeState)), min_size=0, max_size=10),
       od=st.lists(st.sampled_from(list(NodeState)), min_size=0, max_size=4),
       fraction=st.floats(0, 1), warm=st.integers(0, 5))
def test_buffer_properties(spot, od, fraction, warm) -> None:  # type: ignore[no-untyped-def]
    k = replace(ONDEMAND, buffer=(BufferRule("spot", fraction, warm),))
    plan = decide(Snapshot(10_000, (SPOT, k), _pair(spot, od), ()))
    warmed = [n for a in plan.actions if a.kind is ActionKind.WARM for n in a.nodes]
    released = [n for a in plan.actions if a.kind is ActionKind.RELEASE for n in a.nodes]
    by_name = {n.name: n for n in _pair(spot, od)}
    # only powered-down on-demand nodes are warmed; never one that is released
    assert all(n.startswith("o") and by_name[n].state is NodeState.POWERED_DOWN for n in warmed)
    assert not (set(warmed) & set(released))
    # afterwards the pool has the buffer's idle nodes, or every node it could power up
    spare = sum(1 for s_ in od if s_ in (NodeState.IDLE, NodeState.BOOTING))
    down = od.count(NodeState.POWERED_DOWN)
    want = min(4, max(warm, math.ceil(round(fraction * 8 * spot.count(NodeState.ALLOCATED), 6)
                                      / 8 - 1e-9)))
    after = spare + len(warmed) - sum(1 for n in released if n.startswith("o"))
    assert after >= min(want, spare + down)


def test_idle_nodes_a_job_from_another_partition_may_use_are_not_released() -> None:
    od = replace(ONDEMAND, buffer=())
    nodes = _pair([NodeState.ALLOCATED] * 10, [NodeState.IDLE] * 2, od_idle_since=0)
    job = PendingJob("9", "spot", 1, 8, 3600, 9_000, also=("od",))
    plan = decide(Snapshot(10_000, (SPOT, od), nodes, (job,)))
    released = [n for a in plan.actions if a.kind is ActionKind.RELEASE for n in a.nodes]
    assert len(released) == 1  # one is about to run the spot pool's job, the other goes
    alone = decide(Snapshot(10_000, (SPOT, od), nodes, (job._replace(also=()),)))
    assert sorted(n for a in alone.actions if a.kind is ActionKind.RELEASE
                  for n in a.nodes) == ["o1", "o2"]
