"""The simulator runs the daemon's one reconcile loop, not a copy of part of it: every call
`Reconciler.tick` makes reaches the simulated world, and nothing in `slurmscale/sim` builds
a pass of its own."""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurmscale.daemon import reconcile
from slurmscale.policy.model import PoolKnobs
from slurmscale.sim.engine import SimCloud, Simulation, SpotModel
from slurmscale.sim.policies import builtin_policy
from slurmscale.sim.trace import TraceJob

SIM = Path(reconcile.__file__).parents[1] / "sim"
# what the simulator may take from the daemon: the loop itself, and the config's knobs
ALLOWED = {"slurmscale.daemon.reconcile", "slurmscale.daemon.queue.knobs"}


def _pass_calls() -> set[tuple[str, str]]:
    """(attribute, method) of every `self.<attribute>.<method>(...)` in `Reconciler.tick`
    and the helpers it calls on itself: the passes and what they are asked."""
    tree = ast.parse(Path(reconcile.__file__).read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Reconciler"]
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
    todo, seen, out = ["tick"], set(), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(methods[name]):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            target = node.func.value
            if isinstance(target, ast.Name) and target.id == "self":
                if node.func.attr in methods:
                    todo.append(node.func.attr)
            elif (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                  and target.value.id == "self" and target.attr not in ("store", "metrics")):
                out.add((target.attr, node.func.attr))
    return out


def test_nothing_in_the_simulator_builds_a_pass_of_its_own() -> None:
    for path in sorted(SIM.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "slurmscale.daemon"):
                assert node.module in ALLOWED, f"{path.name} imports {node.module}"


def test_every_call_of_the_reconcile_pass_reaches_the_simulated_world() -> None:
    """A spot storm over a gang and six jobs: each pass `tick` runs (requests, interruptions,
    sweep, boots, health, blocks, node upkeep, capacity, keep-up) is called by the
    simulation, so a pass added to `tick` is simulated without anyone wiring it."""
    calls = _pass_calls()
    assert {("requests", "handle_requests"), ("sweep", "run"), ("boots", "run"),
            ("health", "run"), ("blocks", "run"), ("keep_up", "run"),
            ("capacity", "run"), ("interruptions", "run")} <= calls
    knobs = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=8)
    spot = SpotModel(on_demand_nodes=8, storm_at_s=3600.0, storm_fraction=0.5,
                     storm_outage_s=3600.0)
    jobs = ([TraceJob(f"j{i}", 0.0, 4 * 3600.0, 8, 1) for i in range(6)]
            + [TraceJob("gang", 0.0, 4 * 3600.0, 16, 2)])
    sim = Simulation(jobs, builtin_policy("slurmscale", knobs),
                     SimCloud(spot_price_per_node_hour=40.0), spot)
    assert sim.daemon is not None
    rec = sim.daemon.reconciler
    # (the passes and adapters: slurmscale's own objects, not its bookkeeping sets)
    calls = {c for c in calls if type(getattr(rec, c[0])).__module__.startswith("slurmscale.")}
    counted: Counter[tuple[str, str]] = Counter()

    def spy(key: tuple[str, str], f: Callable[..., Any]) -> Callable[..., Any]:
        def call(*a: Any, **k: Any) -> Any:
            counted[key] += 1
            return f(*a, **k)
        return call

    for attr, method in calls:
        obj = getattr(rec, attr)
        setattr(obj, method, spy((attr, method), getattr(obj, method)))
    r = sim.run()
    assert r.jobs_completed == 7 and r.preemptions > 0
    assert sorted(c for c in calls if not counted[c]) == []
    # a pass every policy tick and one for every hook's poke: more passes than ticks
    ticks = counted[("capacity", "run")]
    assert ticks == counted[("sweep", "run")] == counted[("keep_up", "run")]
    assert sim.daemon.events["launched"] >= 1 and sim.daemon.events["node_evacuated"] >= 1
