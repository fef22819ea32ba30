"""The simulated Slurm under a Capacity Block pool's window reservations and a partition set
DOWN, as slurmctld schedules under them (its reservation and partition rules; the calls are
the ones the contract checks against slurmctld: tests/support/slurm_contract.py): no job
started or planned whose time limit reaches a window on its nodes, none started in a DOWN
partition, a job of two partitions started in the one that is UP."""

from __future__ import annotations

import pytest

from slurmscale.policy.model import PoolKnobs
from slurmscale.sim.engine import SimCloud, Simulation, SpotModel
from slurmscale.sim.model_view import EPOCH
from slurmscale.sim.policies import builtin_policy
from slurmscale.sim.trace import TraceJob
from slurmscale.slurm.protocol import SlurmError

KNOBS = PoolKnobs("gpu", 8, 2)


def _sim(jobs: list[TraceJob], spot: SpotModel | None = None) -> Simulation:
    sim = Simulation(jobs, builtin_policy("slurmscale", KNOBS), SimCloud(boot_s=300.0), spot)
    assert sim.daemon is not None
    sim.daemon.slurm.begin_pass(0.0)
    return sim


def test_no_job_starts_whose_time_limit_reaches_a_window_on_its_nodes() -> None:
    # n-1 closed from 3600 s to 10800 s: a 1-hour job fits before the window, a 2-hour one
    # does not, a 2-node gang is planned after it
    jobs = [TraceJob("long", 0.0, 600.0, 8, 1, time_limit_s=7200.0),
            TraceJob("short", 0.0, 600.0, 8, 1, time_limit_s=3600.0),
            TraceJob("gang", 0.0, 600.0, 16, 2, time_limit_s=7200.0)]
    sim = _sim(jobs)
    slurm = sim.daemon.slurm  # type: ignore[union-attr]
    slurm.create_window_reservation("w", ["n-1"], ["root"], EPOCH + 3600.0, EPOCH + 10800.0)
    assert sim.slurm.by_name["n-1"].windows == ((3600.0, 10800.0),)
    for i in (0, 1):  # the long job first: it may not take n-1, the first powered-down node
        sim.slurm.submit(i, 0.0)
    sim.slurm.schedule(0.0)
    on = {sim.slurm.jobs[i].job_id: [n.name for n, _ in p] for i, p in sim.slurm.placed.items()}
    assert on == {"long": ["n-2"], "short": ["n-1"]}, on
    sim.slurm.submit(2, 0.0)
    # backfill plans the gang (squeue's StartTime) after the window, not across it
    sim.slurm.bf.estimate(0.0, 0.0)
    # (n-2 is free from 7200 s, n-1 from the window's end)
    assert sim.slurm.bf.expected[2] == 10800.0, sim.slurm.bf.expected
    # once the window is gone the model forgets it, and Slurm lists no reservation
    slurm.begin_pass(10800.0)
    assert slurm.reservations() == [] and sim.slurm.by_name["n-1"].windows == ()
    assert not sim.slurm.windowed


def test_window_reservations_on_one_node_may_not_overlap() -> None:
    sim = _sim([TraceJob("a", 0.0, 60.0, 8, 1)])
    slurm = sim.daemon.slurm  # type: ignore[union-attr]
    slurm.create_window_reservation("w", ["n-1"], ["root"], EPOCH + 3600.0, EPOCH + 7200.0)
    with pytest.raises(SlurmError, match="overlaps"):
        slurm.create_window_reservation("x", ["n-1", "n-2"], ["root"], EPOCH + 7000.0,
                                        EPOCH + 9000.0)
    with pytest.raises(SlurmError, match="overlaps"):  # a hold on its node for those hours
        slurm.create_reservation("hold", ["n-1"], ["ana"], 7200.0)
    slurm.create_window_reservation("x", ["n-1"], ["root"], EPOCH + 7200.0, EPOCH + 9000.0)
    assert sim.slurm.by_name["n-1"].windows == ((3600.0, 7200.0), (7200.0, 9000.0))
    with pytest.raises(SlurmError, match="Invalid reservation name"):
        slurm.update_window_reservation("none", ["n-1"], None, EPOCH + 9000.0)


def test_a_down_partition_starts_nothing_and_a_job_of_two_runs_in_the_other() -> None:
    sim = _sim([TraceJob("a", 0.0, 600.0, 8, 1)], SpotModel(on_demand_nodes=2))
    slurm = sim.daemon.slurm  # type: ignore[union-attr]
    assert slurm.partition_states() == {"gpu": "UP", "gpu-od": "UP"}
    slurm.set_partition_state("gpu", "DOWN")
    assert slurm.partition_states() == {"gpu": "DOWN", "gpu-od": "UP"}
    with pytest.raises(SlurmError, match="Invalid partition"):
        slurm.set_partition_state("nowhere", "UP")
    sim.slurm.submit(0, 0.0)
    sim.slurm.schedule(0.0)
    assert [n.pool for n, _ in sim.slurm.placed[0]] == ["gpu-od"]
