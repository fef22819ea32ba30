"""Holds that only help (issue 16): the rule reads Slurm's backfill plan for the gang and its
standing in the queue (sprio's factors, the age weights). Times worked out by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmscale.model import JobPriority, PriorityWeights, QueueJob
from slurmscale.policy.model import NodeState, NodeView
from slurmscale.policy.observe import slurm_time
from slurmscale.policy.reservations import (
    GangJob,
    Hold,
    HoldActionKind,
    ReservationKnobs,
    hold_verdict,
    plan_holds,
)
from slurmscale.policy.standing import gang_standings
from slurmscale.sim.model_view import stamp
from slurmscale.slurm.kv import parse_show_config, priority_weights
from tests.unit.conftest import with_earliest_plans

K = ReservationKnobs(accumulate_after_s=600, max_hold_s=3600)
NOW = 100_000.0


def gang(job_id: str = "7", nodes: int = 2, **kw: object) -> GangJob:
    return GangJob(job_id, "gpu", nodes, 8, NOW - 1000, 10, "alice", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kw", "gather", "hold", "needle"), [
    ({}, NOW + 900, True, "has no plan"),
    ({}, None, True, "has no plan"),
    ({}, NOW + 3601, False, "could not gather its 2 nodes within max_hold_s"),
    ({"expected_start_s": NOW + 300}, NOW + 900, False, "plans to start it in 300s"),
    ({"expected_start_s": NOW + 9000}, NOW + 900, False, "plans to start it in 9000s"),
    ({"expected_start_s": NOW + 1400, "first_expected_s": NOW + 700}, NOW + 900, True,
     "slipped by 700s"),
    ({"expected_start_s": NOW + 1400, "first_expected_s": NOW + 700,
      "age_lift_s": NOW + 500}, NOW + 900, False, "ranks it above the jobs that overtook it"),
    ({"expected_start_s": NOW + 1400, "first_expected_s": NOW + 700,
      "age_lift_s": NOW + 5000}, NOW + 900, True, "jobs keep overtaking it"),
])
def test_the_verdict_and_its_reason(kw: dict[str, float], gather: float | None, hold: bool,
                                    needle: str) -> None:
    got, why = hold_verdict(K, gang(**kw), gather, NOW)
    assert got is hold and needle in why, why


def busy(i: int, free_at: float) -> NodeView:
    return NodeView(f"g-{i}", "gpu", NodeState.ALLOCATED, alloc_gpus=8, free_at=free_at)


def test_a_gang_backfill_plans_soon_gets_no_hold_and_neither_does_one_behind_it() -> None:
    """A hold for the lower gang would take the very nodes backfill planned for the first."""
    nodes = tuple(busy(i, NOW + 300 * i) for i in range(1, 5))
    first = gang("1")._replace(priority=50, expected_start_s=NOW + 600)
    second = gang("2")._replace(priority=5)  # no plan: would be held for on its own
    plan = plan_holds(K, {"gpu": 8}, {"gpu": 4}, nodes, (first, second), (), frozenset(), NOW)
    assert plan.actions == ()
    (skip,) = plan.skipped
    assert skip.job_id == "1" and "in 600s" in skip.reason
    alone = plan_holds(K, {"gpu": 8}, {"gpu": 4}, nodes, (second,), (), frozenset(), NOW)
    assert [a.kind.value for a in alone.actions] == ["create"]
    assert "has no plan" in alone.actions[0].reason


def test_a_hold_takes_the_soonest_free_nodes_only_if_they_free_within_max_hold() -> None:
    """By the running jobs' time limits: g-1 and g-2 free at +300 and +600 (in time), g-3 and
    g-4 at +3900 and +4200 (after max_hold_s 3600: a 3-node hold would run out first)."""
    nodes = (busy(1, NOW + 300), busy(2, NOW + 600), busy(3, NOW + 3900), busy(4, NOW + 4200))
    plan = plan_holds(K, {"gpu": 8}, {"gpu": 4}, nodes, (gang(),), (), frozenset(), NOW)
    (a,) = plan.actions
    assert a.nodes == ("g-1", "g-2") and "has no plan" in a.reason, a.reason
    three = plan_holds(K, {"gpu": 8}, {"gpu": 4}, nodes, (gang(nodes=3),), (), frozenset(), NOW)
    assert three.actions == () and "free in 3900s" in three.skipped[0].reason


def test_the_earliest_plan_is_remembered_until_the_gang_leaves_the_queue() -> None:
    seen: dict[str, float] = {}
    (a,) = with_earliest_plans((gang(expected_start_s=NOW + 700),), seen)
    assert a.first_expected_s == NOW + 700
    (b,) = with_earliest_plans((gang(expected_start_s=NOW + 2000),), seen)
    assert b.first_expected_s == NOW + 700, "a later plan: slipped"
    (c,) = with_earliest_plans((gang(),), seen)
    assert c.first_expected_s == NOW + 700, "no plan this pass: still remembered"
    with_earliest_plans((gang(pending=False),), seen)
    assert seen == {}, "started: forgotten"


def q(job_id: str, submit: float, prio: int, part: str = "gpu", nodes: int = 1) -> QueueJob:
    return QueueJob(job_id, (part,), nodes, 8, 3600, stamp(submit - 1_700_000_000.0),
                    "Priority", prio, "u", "PENDING")


W = PriorityWeights(age=1000.0, max_age_s=86400.0)


def test_standing_counts_the_jobs_ahead_and_when_age_lifts_the_gang() -> None:
    """Gang 7 (submitted 1000 s ago, 2500 = 500 age + 2000 other) is behind an older job and
    two newer ones; the newer bring at most 2800 without age: the gang's age factor must
    reach 800, i.e. 300 more = 300/1000 of a day = 25,920 s."""
    g = gang("7")._replace(submit_s=NOW - 1000)
    jobs = [q("7", NOW - 1000, 2500, nodes=2), q("1", NOW - 5000, 9000), q("8", NOW - 100, 2900),
            q("9", NOW - 50, 2600), q("10", NOW - 10, 100), q("11", NOW - 10, 5000, "cpu")]
    prios = [JobPriority("7", "gpu", 2500, 500, 1000, 1000, 0, 0),
             JobPriority("8", "gpu", 2900, 100, 2800, 0, 0, 0),
             JobPriority("9", "gpu", 2600, 50, 2550, 0, 0, 0)]
    (s,) = gang_standings((g,), {"gpu": "gpu"}, jobs, prios, W, NOW)
    assert (s.ahead, s.overtaken_by, s.priority) == (3, 2, 2500)
    assert s.factors is not None and s.factors.age == 500
    assert s.lift_s == pytest.approx(NOW + 300 / 1000 * 86400), s.lift_note
    never = gang_standings((g,), {"gpu": "gpu"}, jobs, prios, W._replace(age=700), NOW)[0]
    assert never.lift_s is None and "cannot lift" in never.lift_note
    flat = gang_standings((g,), {"gpu": "gpu"}, jobs, prios, None, NOW)[0]
    assert flat.lift_s is None and "no weight" in flat.lift_note


def test_priority_weights_from_show_config() -> None:
    text = ("PriorityType            = priority/multifactor\n"
            "PriorityMaxAge          = 1-00:00:00\nPriorityWeightAge       = 1000\n")
    assert priority_weights(parse_show_config(text)) == PriorityWeights(1000.0, 86400.0)
    basic = "PriorityType            = priority/basic\n"
    assert priority_weights(parse_show_config(basic)) is None
    bad = text.replace("1000", "lots")
    assert priority_weights(parse_show_config(bad)) is None


def test_a_full_hold_swaps_a_node_still_draining_for_one_that_fell_idle() -> None:
    """g-1 and g-2 held; g-2 drains until +3000, g-1 until +100; g-3 fell idle: the hold takes
    g-3 and lets g-2 go (its jobs keep running, and it is the others' again)."""
    hold = Hold("slurmscale-gang-7", "gpu", "7", "alice", 2, ("g-1", "g-2"), NOW - 100, 0.0,
                NOW - 100)
    nodes = (busy(1, NOW + 100), busy(2, NOW + 3000),
             NodeView("g-3", "gpu", NodeState.IDLE), busy(4, NOW + 50))
    plan = plan_holds(K, {"gpu": 8}, {"gpu": 4}, nodes, (gang(),), (hold,), frozenset(), NOW)
    (a,) = plan.actions
    assert a.kind is HoldActionKind.EXTEND and a.nodes == ("g-1", "g-3"), a
    assert "instead of 1 still draining (g-2)" in a.reason
    assert plan.grabbed == {"g-3"}


def _scan(g: GangJob, jobs: list[QueueJob], prios: list[JobPriority]) -> tuple[int, int, float]:
    """The standing by its definition, one scan per gang: (ahead, overtaken_by, the largest
    non-age priority of those that overtook it)."""
    line = {(p.job_id, p.partition): p for p in prios}
    mine = line.get((g.job_id, "gpu"))
    prio = mine.priority if mine else float(g.priority)
    ahead, over, excess = 0, 0, float("-inf")
    for j in jobs:
        f = line.get((j.job_id, "gpu"))
        p, a = (f.priority, f.age) if f else (float(j.priority), 0.0)
        if j.job_id != g.job_id and p > prio:
            ahead += 1
            if slurm_time(j.submit_time) > g.submit_s:
                over, excess = over + 1, max(excess, p - a)
    return ahead, over, excess


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(1, 40), st.integers(0, 10),
                          st.booleans()), min_size=1, max_size=40))
def test_the_standing_sweep_counts_what_a_scan_of_the_queue_counts(rows) -> None:  # type: ignore[no-untyped-def]
    """Ties in priority and submit time included: the sweep must agree with the definition."""
    jobs = [q(str(i), NOW - 100 * t, 100 * p) for i, (t, p, _, _) in enumerate(rows)]
    prios = [JobPriority(str(i), "gpu", 100 * p, 10 * a, 100 * p - 10 * a, 0, 0, 0)
             for i, (_, p, a, listed) in enumerate(rows) if listed]
    gangs = tuple(GangJob(str(i), "gpu", 2, 8, NOW - 100 * t, 100 * p, "u")
                  for i, (t, p, _, _) in enumerate(rows) if i % 2 == 0)
    got = gang_standings(gangs, {"gpu": "gpu"}, jobs, prios, W, NOW)
    assert [s.job_id for s in got] == [g.job_id for g in gangs]
    for g, s in zip(gangs, got, strict=True):
        ahead, over, excess = _scan(g, jobs, prios)
        assert (s.ahead, s.overtaken_by) == (ahead, over)
        want_lift = gang_standings((g,), {"gpu": "gpu"}, jobs, prios, W, NOW)[0].lift_s
        assert s.lift_s == want_lift
        if over:
            need = excess - (s.priority - (s.factors.age if s.factors else 0.0))
            assert (s.lift_s is None) == (need > W.age)


def test_the_time_memo_is_bounded_and_stays_right_when_emptied(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from slurmscale.policy import observe

    monkeypatch.setattr(observe, "MAX_TIMES", 100)
    monkeypatch.setattr(observe, "_TIMES", {})
    texts = [stamp(float(i)) for i in range(1000)]
    first = [slurm_time(t) for t in texts]
    assert len(observe._TIMES) <= 100
    assert [slurm_time(t) for t in texts] == first
    assert first == sorted(first) and first[1] - first[0] == 1.0
    assert slurm_time("Unknown") is None and slurm_time("N/A") is None
