"""The clairvoyant bound: its offline cost on a hand-worked timeline, and the oracle run."""

from __future__ import annotations

import pytest

from slurmscale.policy.model import PoolKnobs
from slurmscale.sim.engine import SimCloud, simulate
from slurmscale.sim.oracle import node_up_s, offline_up_s
from slurmscale.sim.policies import builtin_policy
from slurmscale.sim.report import against_oracle, metrics
from slurmscale.sim.trace import TraceJob


def test_three_jobs_on_two_nodes_worked_by_hand() -> None:
    """Boot 300 s. Node A runs job 1 over [300, 1300) and job 3 over [1500, 2500): one boot
    before (300), the gap of 200 kept up (200 < a boot); node B runs job 2 over [300, 5000)
    and nothing after (the trailing gap costs nothing). Up: A 300 + 1000 + 200 + 1000 =
    2,500 s, B 300 + 4,700 = 5,000 s."""
    runs = {"a": [(1500.0, 2500.0), (300.0, 1300.0)], "b": [(300.0, 5000.0)]}
    assert node_up_s(runs["a"], 300.0) == 2500.0
    assert node_up_s(runs["b"], 300.0) == 5000.0
    assert offline_up_s(runs, 300.0) == 7500.0
    # a gap longer than a boot costs one boot (released, relaunched one boot early)
    assert node_up_s([(0.0, 100.0), (10_000.0, 10_100.0)], 300.0) == 300 + 100 + 300 + 100
    # runs sharing a node (single-node jobs packed) are one busy period
    assert node_up_s([(0.0, 100.0), (50.0, 200.0), (200.0, 250.0)], 300.0) == 300 + 250
    assert node_up_s([], 300.0) == 0.0


def test_the_oracle_waits_least_and_idles_least() -> None:
    """Two gangs an hour apart on 4 nodes: the oracle's waits are immediate's or shorter
    (nothing is released under a waiting job), and its offline idle is at most every
    policy's; each policy's ratio to it is >= 1."""
    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=4)
    jobs = [TraceJob("g1", 0.0, 1800.0, 32, 4), TraceJob("one", 100.0, 600.0, 8, 1),
            TraceJob("g2", 3 * 3600.0, 1800.0, 32, 4)]
    cloud = SimCloud(boot_s=300.0)
    figures = {p: metrics(simulate(jobs, builtin_policy(p, knobs), cloud), cloud)
               for p in ("immediate", "slurmscale", "oracle")}
    against_oracle(figures)
    o = figures["oracle"]
    assert o["jobs_completed"] == 3
    assert o["wait_p95_s"] <= figures["immediate"]["wait_p95_s"]
    for name, f in figures.items():
        assert f["idle_gpu_hours"] >= o["idle_gpu_hours"], name
        assert f["idle_vs_oracle"] >= 1.0 and f["cost_vs_oracle"] >= 1.0, name
    # the oracle's idle: a boot before each node's first run, the 3 h gap on g1's nodes
    # (longer than a boot) costs one boot each: 4 nodes x (300 + 300) s x 8 GPUs
    assert o["idle_gpu_hours"] == pytest.approx(4 * 600 * 8 / 3600, abs=0.2)
