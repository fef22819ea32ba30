"""`reservations.limit_use: auto`: the share of their time limits jobs run, learned per pool
from the jobs that ended (policy/limit_use.py), and what it changes in the hold rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmscale.config_file import ConfigError, parse_config
from slurmscale.daemon.passes.holds import LimitUseLearner
from slurmscale.policy.limit_use import (
    UNLEARNED,
    Learning,
    LimitUse,
    Shares,
    fixed,
    learn,
    quantile,
)
from slurmscale.policy.model import NodeState, NodeView
from slurmscale.policy.reservations import GangJob, ReservationKnobs, plan_holds
from slurmscale.store.memory import MemoryStore
from slurmscale.store.rows import JobRow
from tests.unit.conftest import base_config

HOW = Learning(quantile=0.5, min_jobs=4, floor=0.1, ceiling=0.9)


def test_the_fixed_value_until_enough_jobs_then_their_quantile_within_floor_and_ceiling(
) -> None:
    assert learn([0.2, 0.3, 0.4], HOW) == LimitUse(UNLEARNED, 3, "unlearned")
    assert learn([0.2, 0.3, 0.4, 0.5], HOW) == LimitUse(0.35, 4, "learned")
    assert learn([0.01] * 4, HOW).value == 0.1  # the floor
    assert learn([1.0] * 4, HOW).value == 0.9  # the ceiling
    # a run longer than its limit (a requeue's gap counted in) is a limit run out
    assert learn([3.0, 3.0, 0.5, 0.5], Learning(min_jobs=1)).value == 0.75


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 5), min_size=1, max_size=50), st.floats(0.01, 0.99))
def test_a_learned_value_is_always_within_its_bounds(shares: list[float], q: float) -> None:
    how = Learning(quantile=q, min_jobs=1, floor=0.2, ceiling=0.8)
    u = learn(shares, how)
    assert 0.2 <= u.value <= 0.8 and u.jobs == len(shares) and u.source == "learned"
    assert min(shares) <= quantile(shares, q) <= max(shares)


def test_each_pool_learns_from_its_own_jobs_and_a_fixed_setting_is_used_as_is() -> None:
    runs = [("a", 100.0, 1000.0)] * 4 + [("b", 900.0, 1000.0)] * 4 + [("b", 5.0, 0.0)]
    shares = Shares()
    for i, (pool, run_s, limit_s) in enumerate(runs):
        shares.add(str(i), 0.0, pool, run_s, limit_s)
    got = shares.learned(["a", "b", "c"], HOW)
    assert (got["a"].value, got["b"].value, got["b"].jobs) == (0.1, 0.9, 4)
    assert got["c"] == LimitUse(UNLEARNED, 0, "unlearned")
    assert fixed(0.4, ["a"]) == {"a": LimitUse(0.4, 0, "fixed")}
    assert got["a"].describe() == "0.10 learned from 4 job(s)"
    assert got["c"].describe() == "1 until enough jobs are seen (0 so far)"


def test_a_hold_that_the_limits_say_cannot_gather_passes_at_the_learned_share() -> None:
    """Two busy nodes free by their limits in 9,000 s; max_hold_s 3,600: at 1.0 the hold
    cannot gather its nodes in time; where jobs run a third of their limits it can."""
    now = 100_000.0
    k = ReservationKnobs(accumulate_after_s=600, max_hold_s=3600)
    nodes = tuple(NodeView(f"g-{i}", "gpu", NodeState.ALLOCATED, alloc_gpus=8,
                           free_at=now + 9000) for i in (1, 2))
    gang = (GangJob("7", "gpu", 2, 8, now - 1000, 10, "alice"),)

    def plan(learned: dict[str, float] | None, knobs: ReservationKnobs = k):  # type: ignore[no-untyped-def]
        return plan_holds(knobs, {"gpu": 8}, {"gpu": 4}, nodes, gang, (), frozenset(), now,
                          limit_use=learned)
    unlearned = plan(None)
    assert not unlearned.actions and "could not gather" in unlearned.skipped[0].reason
    assert [a.job_id for a in plan({"gpu": 1 / 3}).actions] == ["7"]
    # a fixed setting wins over what was learned
    assert not plan({"gpu": 1 / 3}, ReservationKnobs(accumulate_after_s=600, max_hold_s=3600,
                                                     limit_use=1.0)).actions


def _job(i: int, end: datetime, run_s: float, limit_s: int, pool: str = "gpu-spot") -> JobRow:
    return JobRow(job_id=str(i), pool=pool, user_name="u", num_nodes=1,
                  gpus_per_node=8, submitted_at=end - timedelta(seconds=run_s),
                  started_at=end - timedelta(seconds=run_s), ended_at=end, time_limit_s=limit_s)


def test_the_daemon_learns_from_the_window_and_reads_again_every_ten_minutes() -> None:
    d = base_config(store_url="sqlite://")
    d["reservations"] = {"limit_use_auto": {"min_jobs": 3, "window_days": 1}}
    cfg = parse_config(d)
    store = MemoryStore()
    now = datetime(2026, 12, 1, tzinfo=UTC)
    old = now - timedelta(days=2)  # outside the window: not counted
    store.add_job_starts([_job(1, old, 900, 1000), _job(2, now, 100, 1000),
                          _job(3, now, 300, 1000), _job(4, now, 200, 1000)])
    learner = LimitUseLearner(cfg, store)
    t, every = now.timestamp(), Learning().every_s
    assert learner.current(t)["gpu-spot"] == LimitUse(0.2, 3, "learned")
    store.add_job_starts([_job(5, now, 1000, 1000), _job(6, now, 1000, 1000)])
    assert learner.current(t + every - 1)["gpu-spot"].jobs == 3  # not yet
    assert learner.current(t + every)["gpu-spot"] == LimitUse(0.3, 5, "learned")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5 * 86400), st.integers(0, 3000),
                          st.integers(0, 2000), st.sampled_from(["gpu-spot", "gpu-od"])),
                max_size=60),
       st.lists(st.integers(1, 4 * 3600), min_size=1, max_size=40))
def test_reading_only_what_ended_since_learns_what_reading_the_whole_window_does(
        jobs: list[tuple[int, int, int, str]], steps: list[int]) -> None:
    """Jobs end (some recorded a pass late, as the ledger's missed ones are) while the daemon
    learns again at random times: the learner that keeps what it read and takes only what
    ended since its last read learns, every time it reads, what a learner reading the whole
    window afresh learns; asked again within `every_s` it answers what it learned last (a
    job recorded in between waits for the next read: CI found that case, steps 61 and 59)."""
    d = base_config(store_url="sqlite://")
    d["reservations"] = {"limit_use_auto": {"min_jobs": 2, "window_days": 1, "every_s": 60}}
    cfg = parse_config(d)
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    store = MemoryStore()
    kept = LimitUseLearner(cfg, store)
    pending = sorted(jobs)  # (end offset, run, limit, pool): recorded once their end is past
    now = t0
    read_at, learned = None, None
    for i, step in enumerate(steps):
        now += timedelta(seconds=step)
        late = timedelta(seconds=120)  # a run between two passes, recorded with its own end
        due = [j for j in pending if t0 + timedelta(seconds=j[0]) + late <= now]
        pending = pending[len(due):]
        store.add_job_starts([_job(i * 100 + k, t0 + timedelta(seconds=end), run, limit, pool)
                              for k, (end, run, limit, pool) in enumerate(due)])
        got = kept.current(now.timestamp())
        if read_at is not None and (now - read_at).total_seconds() < 60:
            assert got == learned  # (not read again yet)
            continue
        assert got == LimitUseLearner(cfg, store).current(now.timestamp())
        read_at, learned = now, got


@pytest.mark.parametrize(("edit", "needle"), [
    ({"limit_use": "sometimes"}, "limit_use"),
    ({"limit_use": 0}, "limit_use"),
    ({"limit_use_auto": {"floor": 0.8, "ceiling": 0.5}}, "floor (0.8) is above ceiling (0.5)"),
    ({"limit_use_auto": {"quantile": 1}}, "quantile"),
])
def test_bad_settings_are_refused_naming_the_value(edit: dict[str, object], needle: str
                                                   ) -> None:
    d = base_config(store_url="sqlite://")
    d["reservations"] = edit
    with pytest.raises(ConfigError) as e:
        parse_config(d)
    assert needle in str(e.value)


def test_auto_is_the_default() -> None:
    cfg = parse_config(base_config(store_url="sqlite://"))
    assert cfg.reservations.limit_use == "auto"
    assert cfg.reservations.limit_use_auto.learning() == Learning()


def test_the_simulator_reports_the_share_its_daemon_learned_and_when(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """60 one-node jobs of 10 minutes, one every 15: limits are 3x run times (the Slurm
    model's default), so the share learned once 50 have ended is a third."""
    import json

    from click.testing import CliRunner

    from slurmscale.cli import cli

    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,nodes\n" + "".join(
        f"j{i},{i * 900},600,8,1\n" for i in range(60)))
    r = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--max-nodes", "2",
                                 "--policy", "slurmscale", "--policy", "immediate", "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)["policies"]
    s = got["slurmscale"]
    assert s["limit_use"] == pytest.approx(1 / 3, abs=1e-3) and s["limit_use_jobs"] >= 50
    # the 50th job ends at 49 x 900 + 600 s plus its wait; learned at the next pass after it
    assert 49 * 900 + 600 <= s["limit_use_learned_at_s"] <= 49 * 900 + 600 + 900
    assert got["immediate"]["limit_use"] is None  # no holds, no share
    fixed = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--max-nodes", "2",
                                     "--policy", "slurmscale", "--json", "--no-accumulate"])
    assert json.loads(fixed.output)["policies"]["slurmscale"]["limit_use"] is None
