"""The simulator runs the real policy; the worked example and whole-trace invariants."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurmscale.policy.model import PoolKnobs
from slurmscale.sim.engine import FailureModel, SimCloud, Simulation, SpotModel, simulate
from slurmscale.sim.policies import POLICY_NAMES, builtin_policy
from slurmscale.sim.report import metrics
from slurmscale.sim.trace import TraceError, TraceJob, load_trace

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
BOOT = SimCloud(boot_s=300.0)


def worked_example(policy: str) -> float:
    """An empty pool (cooldown 10 min, boot 5 min) receives one 8-node gang job."""
    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=16, cooldown_s=600)
    r = simulate([TraceJob("gang", 0.0, 3600.0, 64, 8)], builtin_policy(policy, knobs), BOOT)
    assert r.jobs_completed == 1
    return r.gang_waits[0]


@pytest.mark.parametrize("policy", ["slurmscale", "slurmscale-governed"])
def test_worked_example_slurmscale_starts_the_gang_after_about_one_boot(policy: str) -> None:
    assert worked_example(policy) <= 6 * 60


def test_worked_example_naive_needs_about_one_cooldown_per_node() -> None:
    assert worked_example("naive") >= 60 * 60


@pytest.fixture(scope="module")
def itp_slice() -> list[TraceJob]:
    return load_trace(TRACES / "itp_cluster04_14d.csv")[:400]


def test_every_policy_runs_a_real_trace_slice_consistently(itp_slice) -> None:  # type: ignore[no-untyped-def]
    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=40)
    out = {p: metrics(simulate(itp_slice, builtin_policy(p, knobs), BOOT), BOOT)
           for p in POLICY_NAMES}
    busy = {m["busy_gpu_hours"] for m in out.values() if m["jobs_completed"] == 400}
    assert len(busy) == 1, "the same completed work costs the same busy GPU-hours"
    assert out["static"]["node_launches"] == 40
    assert out["static"]["idle_gpu_hours"] > out["slurmscale"]["idle_gpu_hours"]
    for m in out.values():
        assert m["jobs"] == 400 and m["node_launches"] >= 1
    again = metrics(simulate(itp_slice, builtin_policy("slurmscale", knobs), BOOT), BOOT)
    assert again == out["slurmscale"], "same trace, same policy, same result"


def test_gangs_larger_than_the_pool_never_start_and_the_run_still_ends() -> None:
    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=4)
    jobs = [TraceJob("huge", 0.0, 100.0, 64, 8), TraceJob("ok", 10.0, 100.0, 8, 1)]
    for p in POLICY_NAMES:
        r = simulate(jobs, builtin_policy(p, knobs), BOOT)
        assert r.jobs_completed == 1, p


def test_trace_errors_name_the_problem(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_s,gpus\n1,0,8\n")
    with pytest.raises(TraceError, match="lacks column"):
        load_trace(bad)
    bad.write_text("job_id,submit_s,duration_s,gpus,nodes\n1,zero,5,8,1\n")
    with pytest.raises(TraceError, match="line 2"):
        load_trace(bad)
    with pytest.raises(TraceError, match="cannot read trace"):
        load_trace(tmp_path / "missing.csv")


def test_carry_in_jobs_occupy_capacity_but_do_not_count_as_jobs() -> None:
    jobs = load_trace(TRACES / "itp_cluster04_14d_carryin.csv", carry_in=True)
    assert jobs and all(j.carry_in and j.submit_s == 0 for j in jobs)


def test_simulate_cli_prints_the_documented_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,nodes,extra\n"
                     "a,0,600,64,8,x\nb,30,300,1,1,y\n")
    p = subprocess.run([sys.executable, "-m", "slurmscale", "simulate", "--trace", str(trace),
                        "--max-nodes", "16", "--json", "--policy", "naive",
                        "--policy", "slurmscale"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert set(out["policies"]) == {"naive", "slurmscale"}
    assert set(out["policies"]["naive"]) == {
        "jobs", "jobs_completed", "wait_p50_s", "wait_p95_s", "gang_wait_p50_s",
        "gang_wait_p95_s", "busy_gpu_hours", "idle_gpu_hours", "cost_usd",
        "scale_up_actions", "scale_down_actions", "node_launches", "reservations_created",
        "reservation_idle_gpu_hours", "spot_node_hours", "on_demand_node_hours", "preemptions",
        "reclaims",
        "requeues", "jobs_failed", "lost_gpu_hours", "saved_gpu_hours", "restart_wait_p50_s",
        "restart_wait_p95_s",
        "reserved_node_hours_paid", "reserved_node_hours_used", "reservation_utilization",
        "jobs_killed_at_block_end", "gang_start_order", "gang_starts_one_launch",
        "gang_launches_max", "node_failures",
        "capacity_lost_gpu_hours", "limit_use", "limit_use_jobs", "limit_use_learned_at_s"}
    assert out["slurm_model"] == "slurm"
    assert out["policies"]["slurmscale"]["gang_start_order"] == ["a"]
    bad = subprocess.run([sys.executable, "-m", "slurmscale", "simulate", "--trace",
                          str(trace), "--policy", "magic"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "'magic'" in bad.stderr


def test_simulate_knobs_override_the_policy_and_bad_ones_are_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,nodes\n"
                     + "".join(f"j{i},{i * 2400},600,8,1\n" for i in range(6)))

    def sim(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "slurmscale", "simulate", "--trace",
                               str(trace), "--max-nodes", "4", "--json", "--policy",
                               "slurmscale", *extra], capture_output=True, text=True,
                              timeout=60)

    def idle(p: subprocess.CompletedProcess[str]) -> float:
        assert p.returncode == 0, p.stderr
        return float(json.loads(p.stdout)["policies"]["slurmscale"]["idle_gpu_hours"])

    # one job every 40 min: keeping a node idle 1,100 s between them costs more than 600 s
    assert idle(sim("--knob", "min_idle_s=1100", "--knob", "max_idle_s=1100")) > idle(sim())
    for arg, needle in (("min_idle_s=soon", "'soon'"), ("warp=9", "'warp=9'"),
                        ("min_idle_s=900", "min_idle_s (900)")):
        p = sim("--knob", arg)
        assert p.returncode == 2 and needle in p.stderr, (arg, p.stderr)


def _storm_jobs() -> list[TraceJob]:
    """Six single-node jobs and a 2-node gang, all running when the storm comes at 3,600 s."""
    return ([TraceJob(f"j{i}", 0.0, 4 * 3600.0, 8, 1) for i in range(6)]
            + [TraceJob("gang", 0.0, 4 * 3600.0, 16, 2)])


def _storm(buffer: float, seed: int = 0) -> dict[str, object]:
    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=8)
    spot = SpotModel(on_demand_nodes=8, buffer=buffer, storm_at_s=3600.0, storm_fraction=0.5,
                     storm_outage_s=3600.0, seed=seed)
    cloud = SimCloud(boot_s=300.0, spot_price_per_node_hour=40.0)
    r = simulate(_storm_jobs(), builtin_policy("slurmscale", knobs), cloud, spot)
    return metrics(r, cloud)


def test_a_storm_requeues_every_affected_job_and_none_fails() -> None:
    m = _storm(0.0)
    assert m["preemptions"] == 4  # half of the 8 live spot nodes
    assert 3 <= m["requeues"] <= 4  # a gang hit on both nodes requeues once
    assert m["jobs_failed"] == 0 and m["jobs_completed"] == 7
    assert m["lost_gpu_hours"] > 0
    # no buffer: restarts wait for Slurm's requeue delay and an on-demand boot
    assert m["restart_wait_p50_s"] == 120.0 + 300.0
    assert m["spot_node_hours"] > 0 and m["on_demand_node_hours"] > 0


def test_the_pending_gpus_kept_as_jobs_enter_start_and_requeue_are_what_is_pending() -> None:
    """The simulated Slurm's pending GPUs (the timeline's demand) are summed as jobs enter,
    start and are requeued, not walked each tick: after every requeue of a storm they are
    what is pending (fails if a requeue is not counted back in)."""
    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=8)
    spot = SpotModel(on_demand_nodes=8, storm_at_s=3600.0, storm_fraction=0.5,
                     storm_outage_s=3600.0)
    sim = Simulation(_storm_jobs(), builtin_policy("slurmscale", knobs),
                     SimCloud(boot_s=300.0), spot)
    slurm, requeue, requeued = sim.slurm, sim.slurm.requeue_job, []

    def checked(idx: int, now: float, preempted: bool = True) -> None:
        requeue(idx, now, preempted)
        assert slurm.pending_gpus == sum(j.gpus for j in slurm.pending.values())
        requeued.append(idx)
    slurm.requeue_job = checked  # type: ignore[method-assign]
    r = sim.run()
    assert requeued and r.jobs_completed == 7 and slurm.pending_gpus == 0


def test_the_on_demand_buffer_restarts_preempted_jobs_without_a_boot_and_costs_more() -> None:
    none, half = _storm(0.0), _storm(0.5)
    assert half["restart_wait_p95_s"] == 120.0  # only Slurm's requeue delay
    assert half["requeues"] == none["requeues"] and half["jobs_failed"] == 0
    assert half["cost_usd"] > none["cost_usd"]  # warm on-demand nodes are not free
    assert half["wait_p95_s"] < none["wait_p95_s"]


def test_interruptions_are_seeded_and_repeated_preemption_steers_to_on_demand() -> None:
    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=4)
    jobs = [TraceJob("long", 0.0, 20 * 3600.0, 8, 1)]
    spot = SpotModel(on_demand_nodes=2, interruption_rate=0.5, max_preemptions=2, seed=7,
                     reclaim_backoff_s=0.0)  # back to spot at once: only steering moves it
    cloud = SimCloud(spot_price_per_node_hour=40.0)
    a = metrics(simulate(jobs, builtin_policy("slurmscale", knobs), cloud, spot), cloud)
    b = metrics(simulate(jobs, builtin_policy("slurmscale", knobs), cloud, spot), cloud)
    assert a == b
    # at 0.5 per node-hour a 20 h job is hit twice within hours, then finishes on demand
    assert a["requeues"] == 2 and a["jobs_completed"] == 1 and a["jobs_failed"] == 0
    assert a["on_demand_node_hours"] >= 20


def test_a_storm_reaches_the_daemons_interruption_pass_through_the_simulated_ec2() -> None:
    """The warnings go on the event queue about the nodes' instances; the daemon's own pass
    evacuates each node (drain, requeue, preemption record, power down) and undrains it once
    powered down; the instances recorded for those nodes end."""
    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=8)
    spot = SpotModel(on_demand_nodes=8, storm_at_s=3600.0, storm_fraction=0.5,
                     storm_outage_s=3600.0)
    sim = Simulation(_storm_jobs(), builtin_policy("slurmscale", knobs),
                     SimCloud(spot_price_per_node_hour=40.0), spot)
    r = sim.run()
    d = sim.daemon
    assert d is not None and r.preemptions == 4
    assert d.events["node_evacuated"] == 4 and d.events["nodes_returned"] >= 1
    assert not d.queue.messages
    rows = d.store.preemptions()
    assert len(rows) == r.requeues  # one per job requeued (a gang once, whichever node)
    for p in rows:  # the instances the daemon recorded for those nodes, ended
        inst = d.store.instance(p.instance_id)
        assert inst is not None and inst.node == p.node and inst.state == "terminated"
    assert all(p.lifecycle == "spot" and p.kind == "EC2 Spot Instance Interruption Warning"
               for p in rows)
    assert not any(n.drain for n in sim.st.nodes)  # returned once powered down
    assert d.store.active_instances() == [] and d.ec2.find({}) == []  # all ended at the end


def test_a_spot_outage_reaches_the_daemons_launcher_as_ec2s_capacity_error() -> None:
    """During the outage EC2 answers a spot fleet with InsufficientInstanceCapacity: the
    daemon's launcher rolls the gang back and powers its nodes down (Slurm requeues the job),
    its capacity backoff holds the spot pool out, and the job runs on on-demand; nothing is
    lost and no instance is left running."""
    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=8)
    spot = SpotModel(on_demand_nodes=8, storm_at_s=3600.0, storm_fraction=0.5,
                     storm_outage_s=3600.0)
    late = [TraceJob("late", 3600.0 + 600.0, 3600.0, 16, 2)]  # after the reclaim backoff
    sim = Simulation(_storm_jobs() + late, builtin_policy("slurmscale", knobs),
                     SimCloud(spot_price_per_node_hour=40.0), spot)
    r = sim.run()
    d = sim.daemon
    assert d is not None
    assert d.events.get("launch_failed", 0) >= 1 and d.events.get("launched", 0) >= 3
    failed = [g for g in d.store.gangs() if g.status == "failed"]
    assert failed and {g.error_code for g in failed} == {"InsufficientInstanceCapacity"}
    assert r.jobs_failed == 0 and len(r.waits) == 8
    late_start = next(s for s, j in r.gang_starts if j == "late")
    assert late_start > 3600.0 + 600.0 + 120.0  # requeued once: Slurm's delay, then on-demand
    assert d.ec2.find({}) == [] and d.store.active_instances() == []


def _failing(policy: str, rate: float, repair_s: float = 4 * 3600.0) -> dict[str, object]:
    """Eight 1-node jobs of 6 h on 8 nodes, then eight more: failures hit the nodes up."""
    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=8)
    jobs = ([TraceJob(f"a{i}", 0.0, 6 * 3600.0, 8, 1) for i in range(8)]
            + [TraceJob(f"b{i}", 7 * 3600.0, 6 * 3600.0, 8, 1) for i in range(8)])
    r = simulate(jobs, builtin_policy(policy, knobs), BOOT,
                 failures=FailureModel(rate, repair_s, seed=3))
    return metrics(r, BOOT)


def test_failed_nodes_requeue_their_jobs_and_slurmscale_replaces_them_before_an_admin() -> None:
    none = _failing("slurmscale", 0.0)
    assert none["node_failures"] == 0 and none["capacity_lost_gpu_hours"] == 0
    ours, theirs = _failing("slurmscale", 0.05), _failing("immediate", 0.05)
    for m in (ours, theirs):
        assert m["jobs_completed"] == 16 and m["jobs_failed"] == 0
        assert m["node_failures"] >= 3 and m["requeues"] >= 1
    # replaced after the health grace (~2 min + a pass) vs down for the admin's 4 h
    assert ours["capacity_lost_gpu_hours"] / ours["node_failures"] < 8 * 0.25
    assert theirs["capacity_lost_gpu_hours"] / theirs["node_failures"] > 8 * 1.0
    assert ours == _failing("slurmscale", 0.05), "seeded: same failures, same result"


def test_a_gang_on_nodes_kept_from_two_launches_spans_two_and_a_fresh_one_spans_one() -> None:
    """Issue 43, item 5: each gang start counts the launches its nodes came from (one fleet
    in one cluster placement group packs close; kept nodes of other launches may not). Two
    1-node jobs power up one node each; a 2-node gang arriving while both are still kept
    starts on them (2 launches); a 4-node gang later needs 2 fresh nodes beside them (3)."""
    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=8, min_idle_s=3600,
                      max_idle_s=3600)
    jobs = [TraceJob("a", 0.0, 60.0, 8, 1), TraceJob("b", 1000.0, 60.0, 8, 1),
            TraceJob("gang", 2000.0, 60.0, 16, 2), TraceJob("fresh", 2500.0, 60.0, 32, 4)]
    r = simulate(jobs, builtin_policy("slurmscale", knobs), BOOT)
    assert r.jobs_completed == 4
    assert r.gang_spread == [2, 3], r.gang_spread
    m = metrics(r, BOOT)
    assert (m["gang_starts_one_launch"], m["gang_launches_max"]) == (0.0, 3)
    alone = simulate([TraceJob("g", 0.0, 60.0, 32, 4)], builtin_policy("slurmscale", knobs),
                     BOOT)
    assert alone.gang_spread == [1] and metrics(alone, BOOT)["gang_starts_one_launch"] == 1.0
