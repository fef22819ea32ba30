"""The simulator with capacity paid whether used or not: a Capacity Block's window used to
its end with no job killed, an ODCR used first or not at all; numbers worked out by hand."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from slurmscale.audit import Kind
from slurmscale.cloud.protocol import TAG_NODE
from slurmscale.policy.model import PoolKnobs
from slurmscale.sim.daemon import RESERVATION_ID, block_id
from slurmscale.sim.engine import BlockSpec, PaidCapacity, SimCloud, Simulation, simulate
from slurmscale.sim.policies import builtin_policy
from slurmscale.sim.report import metrics
from slurmscale.sim.trace import TraceJob

CLOUD = SimCloud(boot_s=300.0, price_per_node_hour=100.0)
KNOBS = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=4)
# a 2-node block for one hour from t=600
BLOCK = PaidCapacity(blocks=(BlockSpec(600.0, 4200.0, 2),))
# time limits equal to the run times: Slurm checks a job's limit against the block's end
JOBS = [
    TraceJob("A", 600.0, 1800.0, 16, 2, time_limit_s=1800.0),  # boots into the block at 600,
    # ends 2700
    TraceJob("B", 3000.0, 1800.0, 8, 1, time_limit_s=1800.0),  # would outlast the block
    # (ends 4800 > 4200)
    TraceJob("C", 3700.0, 300.0, 16, 2, time_limit_s=300.0),  # fits what is left of the
    # block (ends 4000)
]


def test_a_block_is_used_to_its_end_and_no_job_outlasts_it() -> None:
    r = simulate(JOBS, builtin_policy("slurmscale", KNOBS), CLOUD, paid=BLOCK)
    m = metrics(r, CLOUD)
    assert r.jobs_completed == 3 and m["jobs_killed_at_block_end"] == 0
    # paid: 2 nodes x 1 h. Used: A's 2 nodes x 1800 s and C's 2 x 300 s = 4200 node-s; the
    # block nodes are kept idle between A and C (paid whether used or not), so C starts on
    # them in the block's last minutes; they are powered down at its end.
    assert m["reserved_node_hours_paid"] == 2.0
    assert m["reserved_node_hours_used"] == 1.2  # 4200 / 3600, rounded
    assert m["reservation_utilization"] == round(4200 / 7200, 3)
    assert r.paid_node_s == 2 * 3600, "both block nodes up from 600 to the end at 4200"
    # C started at once on the kept block nodes: no boot
    assert sorted(r.waits) == [0.0, 300.0, 300.0]
    # B ran on normal capacity: booted at 3000, ran to 5100, then idle until released
    assert m["on_demand_node_hours"] > 0.5


def test_the_daemon_routes_gangs_into_the_block_and_keeps_its_windows_in_slurm() -> None:
    """The block is the daemon's, as on EC2 (no routing of the engine's): its block pass holds
    the block pool's closed spans in the simulated Slurm and only then opens the block
    partition (slurm.conf starts it DOWN); Slurm starts A and C on block nodes (PriorityTier),
    B, whose limit reaches the close, elsewhere; the resume hook's launches go into the block
    (SimEc2's instances carry its id) and the engine counts a node as paid from its instance."""
    sim = Simulation(JOBS, builtin_policy("slurmscale", KNOBS), CLOUD, paid=BLOCK)
    assert sim.daemon is not None
    slurm = sim.daemon.slurm
    assert slurm.partition_states() == {"gpu": "UP", "gpu-block": "DOWN"}
    r = sim.run()
    events = sim.daemon.events
    assert events[Kind.BLOCK_RESERVATION] >= 2 and events[Kind.BLOCK_PARTITION_OPENED] == 1
    assert slurm.partition_states()["gpu-block"] == "UP"
    assert {x.name for x in slurm.reservations()} == {"slurmscale-block-gpu-block-after"}
    into = Counter((i.reservation, i.tags[TAG_NODE][:3])
                   for i in sim.daemon.ec2.instances.values())
    # A's 2 nodes, then C on the same 2 kept block nodes; B on a main pool node
    assert into == {(block_id(0), "cb-"): 2, ("", "n-1"): 1}, into
    assert r.paid_node_s == 2 * 3600 and r.jobs_completed == 3


def test_slurms_own_power_saving_releases_the_paid_block_early() -> None:
    r = simulate(JOBS, builtin_policy("immediate", KNOBS), CLOUD, paid=BLOCK)
    m = metrics(r, CLOUD)
    # A's nodes idle from 2700, released after SuspendTime (600 s) at 3300: only A's work
    assert m["reserved_node_hours_used"] == 1.0 and m["reservation_utilization"] == 0.5
    assert r.paid_node_s == 2 * 2700
    # C no longer fits the block (a boot from 3700 ends past 4200): normal capacity, a boot
    # (up at 4000) and slurmctld's next 30 s check (4020)
    assert sorted(r.waits) == [300.0, 300.0, 320.0]
    assert m["jobs_killed_at_block_end"] == 0


def test_an_odcr_used_first_saves_the_on_demand_hours_it_covers() -> None:
    jobs = [TraceJob("g", 0.0, 3600.0, 16, 2), TraceJob("s", 0.0, 3600.0, 8, 1)]
    pol = builtin_policy("slurmscale", KNOBS)
    first = metrics(simulate(jobs, pol, CLOUD, paid=PaidCapacity(2)), CLOUD)
    unused = metrics(simulate(jobs, pol, CLOUD, paid=PaidCapacity(2, use_reserved=False)),
                     CLOUD)
    # the 2-node gang fits the reservation whole; the single job runs on demand either way
    assert first["reserved_node_hours_used"] > 0 == unused["reserved_node_hours_used"]
    assert first["on_demand_node_hours"] < unused["on_demand_node_hours"]
    assert first["cost_usd"] < unused["cost_usd"]
    assert first["reserved_node_hours_paid"] == unused["reserved_node_hours_paid"] > 0


def test_a_gang_larger_than_the_free_paid_capacity_goes_whole_to_normal_capacity() -> None:
    jobs = [TraceJob("g", 0.0, 600.0, 24, 3)]
    m = metrics(simulate(jobs, builtin_policy("slurmscale", KNOBS), CLOUD,
                         paid=PaidCapacity(2)), CLOUD)
    assert m["reserved_node_hours_used"] == 0.0 and m["on_demand_node_hours"] > 0


def test_the_daemons_own_route_puts_a_gang_into_the_odcr_and_the_engine_reads_it() -> None:
    """Without blocks the ODCR is the daemon's: its launch pass routes the 2-node gang into the
    reservation (SimEc2's instances carry its id), the 3-node one whole to normal capacity,
    and the engine counts a node as paid from its instance, not from a model of its own."""
    jobs = [TraceJob("g2", 0.0, 1800.0, 16, 2), TraceJob("g3", 0.0, 1800.0, 24, 3)]
    sim = Simulation(jobs, builtin_policy("slurmscale", PoolKnobs(name="gpu", gpus_per_node=8,
                                                                   max_nodes=5)),
                     CLOUD, paid=PaidCapacity(2))
    r = sim.run()
    assert sim.daemon is not None
    into = Counter(i.reservation for i in sim.daemon.ec2.instances.values())
    assert into == {RESERVATION_ID: 2, "": 3}, into
    # the gang's nodes were paid from their launch to their release, and only those
    assert r.paid_node_s > 0 and r.paid_busy_gpu_s == 16 * 1800.0
    # each gang's job by Slurm's number for it (the resume file's, as squeue's: the next test)
    assert {g.job_ids for g in sim.daemon.store.gangs()} == {"[1]", "[2]"}


@pytest.mark.parametrize(("arg", "words"), [
    ("10:5:2", "START_S < END_S"), ("0:100", "START_S:END_S:NODES"),
    ("0:inf:2", "finite"), ("0:100:99", "--max-nodes"), ("a:b:c", "START_S:END_S:NODES")])
def test_bad_capacity_blocks_are_named(tmp_path, arg: str, words: str) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,nodes\nj,0,60,8,1\n")
    p = subprocess.run([sys.executable, "-m", "slurmscale", "simulate", "--trace", str(trace),
                        "--max-nodes", "4", "--capacity-block", arg], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize(("row", "words"), [
    ("j,inf,60,8,1", "finite"), ("j,0,1e300,8,1", "finite"), ("j,nan,60,8,1", "finite"),
    ("j,0,60,8,1000000", "more than any cluster")])
def test_trace_rows_out_of_range_are_named_not_simulated_for_minutes(tmp_path, row: str,
                                                                     words: str) -> None:
    """Before: submit_s=inf or duration_s=1e300 hung `simulate` for minutes; nan passed."""
    trace = tmp_path / "t.csv"
    trace.write_text(f"job_id,submit_s,duration_s,gpus,nodes\n{row}\n")
    p = subprocess.run([sys.executable, "-m", "slurmscale", "simulate", "--trace", str(trace),
                        "--max-nodes", "4"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and words in p.stderr and "line 2" in p.stderr, p.stderr


def test_a_non_utf8_trace_and_a_plot_into_nowhere_are_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "t.csv"
    trace.write_bytes(b"job_id,submit_s,duration_s,gpus,nodes\n\xff\xfe,0,60,8,1\n")
    p = subprocess.run([sys.executable, "-m", "slurmscale", "simulate", "--trace", str(trace)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "not UTF-8" in p.stderr and "Traceback" not in p.stderr
    trace.write_text("job_id,submit_s,duration_s,gpus,nodes\nj,0,60,8,1\n")
    p = subprocess.run([sys.executable, "-m", "slurmscale", "simulate", "--trace", str(trace),
                        "--plot", str(tmp_path / "no" / "such" / "x.png")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "does not exist" in p.stderr and "Traceback" not in p.stderr


def test_ec2s_early_terminations_kill_jobs_under_the_old_margin_and_none_under_the_new() -> None:
    """EC2 begins terminating a block's instances 30 minutes before its end (AWS user guide,
    "Monitor Capacity Blocks using EventBridge"). A 2-hour block, a job whose limit ends 15
    minutes before the block does: with the old margin (SuspendTimeout + 300 s, 7 minutes)
    Slurm starts it in the block and EC2 kills it; with the new default margin (30 min +
    SuspendTimeout + 300 s) it never starts there and runs on normal capacity instead."""
    block = (BlockSpec(600.0, 600.0 + 7200.0, 2),)
    # starts when the block opens (its boot done at 900), limit ends at 900 + 6000 = 6900,
    # 15 minutes before the block's end (7800); the job really runs its whole limit
    jobs = [TraceJob("L", 600.0, 6000.0, 16, 2, time_limit_s=6000.0)]
    old = simulate(jobs, builtin_policy("slurmscale", KNOBS), CLOUD,
                   paid=PaidCapacity(blocks=block, block_margin_s=420.0, block_lead_s=1800.0))
    new = simulate(jobs, builtin_policy("slurmscale", KNOBS), CLOUD,
                   paid=PaidCapacity(blocks=block, block_margin_s=2220.0, block_lead_s=1800.0))
    assert old.jobs_killed_at_block_end == 1
    assert new.jobs_killed_at_block_end == 0 and new.jobs_completed == 1
    # AWS's end as the model had it: taken back at the end, the old margin was enough
    at_end = simulate(jobs, builtin_policy("slurmscale", KNOBS), CLOUD,
                      paid=PaidCapacity(blocks=block, block_margin_s=420.0))
    assert at_end.jobs_killed_at_block_end == 0


def test_an_interruptible_reservations_reclaims_requeue_jobs_and_are_counted() -> None:
    """An interruptible ODCR's owner takes reserved nodes back at a rate: their jobs requeue
    (nothing lost for good, every job still completes) and the reclaims are counted, seeded."""
    jobs = [TraceJob(f"j{i}", 600.0 * i, 3000.0, 16, 2, time_limit_s=6000.0)
            for i in range(8)]
    calm = simulate(jobs, builtin_policy("slurmscale", KNOBS), CLOUD, paid=PaidCapacity(2))
    rough = simulate(jobs, builtin_policy("slurmscale", KNOBS), CLOUD,
                     paid=PaidCapacity(2, reclaim_rate=0.5, seed=3))
    again = simulate(jobs, builtin_policy("slurmscale", KNOBS), CLOUD,
                     paid=PaidCapacity(2, reclaim_rate=0.5, seed=3))
    assert calm.reclaims == 0 and rough.reclaims > 0
    assert rough.jobs_completed == calm.jobs_completed == 8
    assert metrics(rough, CLOUD)["reclaims"] == rough.reclaims == again.reclaims
    assert rough.lost_gpu_s > calm.lost_gpu_s


def test_a_job_reclaimed_max_reclaims_times_leaves_the_interruptible_reservation(
        tmp_path) -> None:
    """At a reclaim rate where a long gang on the reservation loses nearly every run (4 nodes,
    6 reclaims per node-hour: one every 2.5 minutes), it would never end there: after
    `max_reclaims` it launches on normal capacity and completes. (Before, the simulation
    never ended: run as a process, so that a relapse fails at the deadline. The daemon's route
    counts the job's reclaims by the id the resume hook gives it, which the simulated squeue
    must give too: when they differed, this run never ended either.)"""
    import json

    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,nodes,time_limit_s\n"
                     "long,0,14400,32,4,18000\n")
    out = subprocess.run([sys.executable, "-m", "slurmscale", "simulate", "--trace",
                          str(trace), "--policy", "slurmscale", "--reserved-nodes", "4",
                          "--reclaim-rate", "6", "--seed", "1", "--json"],
                         capture_output=True, text=True, timeout=60, check=True)
    r = json.loads(out.stdout)["policies"]["slurmscale"]
    assert r["jobs_completed"] == 1 and r["reclaims"] >= 2, r


def test_a_reclaim_rate_without_a_reservation_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,nodes\nj,0,60,8,1\n")
    out = subprocess.run([sys.executable, "-m", "slurmscale", "simulate", "--trace",
                          str(trace), "--reclaim-rate", "0.1"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "--reclaim-rate" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_a_plot_without_matplotlib_is_refused_before_the_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Before: the whole simulation ran, then a traceback (ModuleNotFoundError)."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,nodes\nj,0,60,8,1\n")
    code = ("import sys; sys.modules['matplotlib'] = None; "
            "import slurmscale.sim.engine as e; e.simulate = None; "  # (the run never starts)
            "from slurmscale.entry import main; sys.argv[0] = 'slurmscale'; main()")
    p = subprocess.run([sys.executable, "-c", code, "simulate", "--trace", str(trace),
                        "--plot", str(tmp_path / "x.png")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "--plot" in p.stderr and "matplotlib" in p.stderr
    assert len([line for line in p.stderr.splitlines() if line.startswith("Error")]) == 1
