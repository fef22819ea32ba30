"""Saved work in the simulator (issue 43, item 2): a trace job that checkpoints resumes a
run cut short from its last save; one that saves on a signal, on a spot pool whose daemon
has a grace_signal, loses only the time from the signal to its requeue. The same storm
(half the spot nodes taken at 3,600 s) with and without."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurmscale.policy.model import PoolKnobs
from slurmscale.sim.engine import SimCloud, Simulation, SpotModel
from slurmscale.sim.policies import builtin_policy
from slurmscale.sim.trace import TraceJob

KNOBS = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=8)
HOUR = 3600.0


def storm(jobs: list[TraceJob], grace_margin_s: float | None = None) -> Simulation:
    spot = SpotModel(on_demand_nodes=8, storm_at_s=HOUR, storm_fraction=0.5,
                     storm_outage_s=HOUR, grace_margin_s=grace_margin_s)
    sim = Simulation(jobs, builtin_policy("slurmscale", KNOBS),
                     SimCloud(spot_price_per_node_hour=40.0), spot)
    sim.run()
    return sim


def jobs(gang: bool = True, **saving: object) -> list[TraceJob]:
    """Six single-node jobs (and a 2-node gang), 4 hours each, all running at the storm."""
    base = ([TraceJob(f"j{i}", 0.0, 4 * HOUR, 8, 1) for i in range(6)]
            + ([TraceJob("gang", 0.0, 4 * HOUR, 16, 2)] if gang else []))
    return [replace(j, **saving) for j in base]  # type: ignore[arg-type]


def test_without_saves_an_interrupted_run_is_lost_whole() -> None:
    sim = storm(jobs())
    r = sim.st.result
    assert r.requeues >= 1 and r.saved_gpu_s == 0
    assert r.lost_gpu_s > 0 and r.jobs_failed == 0


def test_a_checkpointing_job_loses_only_the_time_since_its_last_save() -> None:
    plain, saving = storm(jobs(gang=False)), storm(jobs(gang=False, checkpoint_s=1800.0))
    assert saving.st.result.requeues == plain.st.result.requeues >= 1
    # every lost run (8 GPUs) started after its boot and was cut at about 3,600 s: at most
    # 1,800 s of it since its last save
    per_run = saving.st.result.lost_gpu_s / (8 * saving.st.result.requeues)
    assert 0 < per_run <= 1800.0 + 1
    assert saving.st.result.saved_gpu_s > 0
    assert saving.st.result.lost_gpu_s < plain.st.result.lost_gpu_s / 2
    lost_plus_saved = saving.st.result.lost_gpu_s + saving.st.result.saved_gpu_s
    assert lost_plus_saved == pytest.approx(plain.st.result.lost_gpu_s, rel=0.01)
    assert saving.st.result.jobs_completed == plain.st.result.jobs_completed == 6


def test_a_job_that_saves_on_the_signal_loses_only_its_grace() -> None:
    """With the daemon's grace_signal (margin 40 s) the interrupted jobs are signalled on the
    warning, save, and are requeued 80 s later, before EC2's deadline: each loses those 80 s
    A gang's requeue is the same, for all its nodes (the last check, with the gang)."""
    plain = storm(jobs(gang=False))
    signalled = storm(jobs(gang=False, saves_on_signal=True), grace_margin_s=40.0)
    d = signalled.daemon
    assert d is not None
    assert d.events["job_signalled"] >= 1 and d.events["job_requeued"] >= 1
    assert d.events["job_left_in_grace"] == 0
    r = signalled.st.result
    assert r.requeues == plain.st.result.requeues and r.jobs_completed == 6
    per_run = r.lost_gpu_s / (8 * r.requeues)
    assert per_run <= 80.0 + 2 * signalled.st.cloud.tick_s, per_run
    assert r.lost_gpu_s < plain.st.result.lost_gpu_s / 10
    with_gang = storm(jobs(saves_on_signal=True), grace_margin_s=40.0)
    assert with_gang.st.result.jobs_completed == 7 and with_gang.st.result.saved_gpu_s > 0
    # no signal without the pool's grace_signal, whatever the jobs do
    unsignalled = storm(jobs(saves_on_signal=True))
    assert unsignalled.st.result.saved_gpu_s == 0
    assert unsignalled.daemon is not None and unsignalled.daemon.events["job_signalled"] == 0
