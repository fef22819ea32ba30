"""The simulated Slurm and the unit tests' FakeSlurm pass the contract real slurmctld passes
(`tests/integration/test_slurm_contract.py`): the calls the daemon's capacity passes make, and
what the next read shows."""

from __future__ import annotations

from datetime import datetime

from slurmscale.model import PriorityWeights, QueueJob, SlurmNode
from slurmscale.policy.model import PoolKnobs
from slurmscale.sim.engine import SimCloud, Simulation
from slurmscale.sim.model_view import EPOCH, stamp
from slurmscale.sim.policies import builtin_policy
from slurmscale.sim.trace import TraceJob
from tests.support.fakes import FakeSlurm
from tests.support.slurm_contract import Harness, check_contract, check_priorities


def test_the_simulated_slurm_keeps_the_slurm_contract() -> None:
    # the trace's own id for the job is not Slurm's: Slurm numbers jobs as they come (1)
    sim = Simulation([TraceJob("trace-7", 0.0, 600.0, 16, 2, user="ana")],
                     builtin_policy("slurmscale", PoolKnobs("gpu", 8, 4)), SimCloud())
    assert sim.daemon is not None
    sim.submit(0, 0.0)
    slurm = sim.daemon.slurm
    slurm.begin_pass(0.0)
    check_contract(Harness(slurm, ("n-1", "n-2"), "gpu", "1", "ana", lambda: EPOCH + slurm.now,
                           tells_changes=True))


def test_the_simulated_slurm_lists_priority_factors_as_sprio_does() -> None:
    jobs = [TraceJob("gang", 0.0, 600.0, 16, 2, user="ana"),
            TraceJob("one", 0.0, 600.0, 8, 1, user="bo"),
            TraceJob("later", 0.0, 600.0, 8, 1, user="bo")]
    sim = Simulation(jobs, builtin_policy("slurmscale", PoolKnobs("gpu", 8, 4)), SimCloud())
    assert sim.daemon is not None
    for i in range(3):
        sim.submit(i, 0.0)
    sim.slurm.eligible_at[2] = 3600.0  # requeued: waits for its BeginTime
    slurm = sim.daemon.slurm
    slurm.begin_pass(0.0)
    # (Slurm's ids: 1 gang, 2 one, 3 later)
    check_priorities(slurm, {"1": ("gpu",), "2": ("gpu",)}, {"3"},
                     PriorityWeights(1000.0, 7 * 86400.0))


def test_the_unit_tests_fake_slurm_keeps_the_slurm_contract() -> None:
    """`FakeSlurm` (tests/support/fakes.py), which the daemon's unit tests run against, is
    held to the same contract."""
    down = "IDLE+CLOUD+POWERED_DOWN"
    slurm = FakeSlurm(
        table={n: SlurmNode(n, down, n, n, partitions=("gpu",)) for n in ("gpu-1", "gpu-2")},
        queue=[QueueJob("7", ("gpu",), 2, 8, 3600, "2026-11-29T11:00:00", "Resources", 100,
                        "ana", "PENDING")])
    check_contract(Harness(slurm, ("gpu-1", "gpu-2"), "gpu", "7", "ana",
                           datetime.fromisoformat(slurm.now_text).timestamp))


def test_every_queue_read_of_a_simulated_run_says_exactly_what_changed() -> None:
    """The contract's change account (check_changes) over a whole run with a storm: jobs
    submitted, started (CONFIGURING while their nodes boot), ended, requeued off interrupted
    nodes, pointed at holds; each of the daemon's reads against the one before it."""
    from slurmscale.sim.engine import SpotModel
    from tests.support.slurm_contract import check_changes

    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=6)
    jobs = [TraceJob(f"j{i}", 300.0 * i, 1800.0 + 600.0 * (i % 4), 8 * (1 + i % 2),
                     1 + 2 * (i % 3 == 0), user=("ana", "bo")[i % 2]) for i in range(24)]
    spot = SpotModel(on_demand_nodes=4, storm_at_s=3600.0, storm_fraction=0.5)
    sim = Simulation(jobs, builtin_policy("slurmscale", knobs),
                     SimCloud(spot_price_per_node_hour=40.0), spot)
    assert sim.daemon is not None
    slurm, reads = sim.daemon.slurm, []
    read = slurm.active_jobs

    booting = []  # (a job still CONFIGURING at the next read: its line is the same)

    def checked() -> list[QueueJob]:
        reads.append(read())
        if len(reads) > 1:
            check_changes(reads[-2], reads[-1])
            was = {j.job_id: j for j in reads[-2] if j.state == "CONFIGURING"}
            for j in reads[-1]:
                if j.job_id in was and j.state == "CONFIGURING":
                    booting.append(j is was[j.job_id])
        return reads[-1]
    slurm.active_jobs = checked  # type: ignore[method-assign]
    r = sim.run()
    assert r.requeues > 0 and r.jobs_completed == len(jobs)
    # (the run read a queue that changed, and said so: starts, ends, requeues)
    states = {j.state for rd in reads for j in rd.changed}  # type: ignore[attr-defined]
    assert {"PENDING", "RUNNING", "CONFIGURING"} <= states, states
    assert sum(len(rd.dropped) for rd in reads) > len(jobs)  # type: ignore[attr-defined]
    assert booting and all(booting)  # (a boot spans passes: the same record each of them)


def test_the_simulated_squeue_shows_each_change_of_a_pending_line_and_keeps_the_rest() -> None:
    """A read with nothing changed gives back the very records of the last (most reads:
    the adapter compares what the lines are made of, whole); each change of what a pending
    line shows - its priority, backfill's expected start, its reservation, its BeginTime
    passing - is in the next read, and only that job's record is new."""
    jobs = [TraceJob(f"j{i}", 0.0, 600.0, 16, 2, user="ana") for i in range(3)]
    sim = Simulation(jobs, builtin_policy("slurmscale", PoolKnobs("gpu", 8, 4)), SimCloud())
    assert sim.daemon is not None
    for i in range(3):
        sim.submit(i, 0.0)
    slurm = sim.daemon.slurm
    slurm.begin_pass(0.0)

    def read() -> dict[str, QueueJob]:
        return {j.job_id: j for j in slurm.active_jobs()}

    def only_new(before: dict[str, QueueJob], after: dict[str, QueueJob]) -> set[str]:
        return {i for i, j in after.items() if j is not before[i]}
    first = read()
    assert only_new(first, read()) == set()
    sim.slurm.shown[0] += 5  # a priority calculation
    after = read()
    assert only_new(first, after) == {"1"} and after["1"].priority == first["1"].priority + 5
    sim.slurm.bf.expected[1] = 3600.0  # a backfill plan
    again = read()
    assert only_new(after, again) == {"2"} and again["2"].expected_start == stamp(3600.0)
    slurm.create_reservation("r", ["n-1", "n-2"], ["ana"], 3600.0)
    slurm.set_job_reservation("3", "r")
    held = read()
    assert only_new(again, held) == {"3"} and held["3"].reservation == "r"
    sim.slurm.eligible_at[0] = 600.0  # requeued: waits for its BeginTime
    waiting = read()
    assert only_new(held, waiting) == {"1"} and waiting["1"].reason == "BeginTime"
    slurm.begin_pass(601.0)  # (the clock alone)
    assert read()["1"].reason == "Resources"
