"""The simulator is parts side by side (issue 44): the shared state, the simulated Slurm and
its backfill, paid routing, the disruptions, the other policies and the engine are objects
built on one another, never classes that inherit one another (before, one object through a
six-level chain shared every attribute)."""

from __future__ import annotations

import ast
from pathlib import Path

SIM = Path(__file__).resolve().parents[2] / "slurmscale" / "sim"


def _inherited(sources: dict[str, str]) -> list[str]:
    """`module.Class(Base)` for every class that inherits a class defined in `sources`."""
    trees = {name: ast.parse(text) for name, text in sources.items()}
    ours = {n.name for t in trees.values() for n in ast.walk(t) if isinstance(n, ast.ClassDef)}
    out = []
    for name, tree in sorted(trees.items()):
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                out += [f"{name}.{node.name}({b.id})" for b in node.bases
                        if isinstance(b, ast.Name) and b.id in ours]
    return out


def test_no_part_of_the_simulator_inherits_another() -> None:
    sources = {p.stem: p.read_text() for p in SIM.glob("*.py")}
    assert _inherited(sources) == []


def test_the_rule_sees_a_chain() -> None:
    """(the rule can fail: the old shape is caught)"""
    assert _inherited({"state": "class SimState:\n    pass\n",
                       "scheduler": "class SlurmScheduler(SimState):\n    pass\n"}) == [
        "scheduler.SlurmScheduler(SimState)"]


def test_the_engine_builds_the_parts_on_one_state() -> None:
    from slurmscale.policy.model import PoolKnobs
    from slurmscale.sim.engine import SimCloud, Simulation
    from slurmscale.sim.policies import builtin_policy
    from slurmscale.sim.trace import TraceJob

    jobs = [TraceJob("a", 0.0, 600.0, 16, 2)]
    knobs = PoolKnobs("gpu", 8, 4)
    for name, daemon in (("slurmscale", True), ("naive", False)):
        sim = Simulation(jobs, builtin_policy(name, knobs), SimCloud())
        assert sim.slurm.st is sim.disruptions.st is sim.st
        assert sim.slurm.bf.slurm is sim.slurm
        assert (sim.daemon is not None) is daemon and (sim.others is None) is daemon
        assert sim.st.daemon is sim.daemon
        r = sim.run()
        assert r.jobs_completed == 1
