"""The simulator's warm pool of stopped instances (issue 67, item 3): a released node's
instance is stopped while the pool holds fewer than its size, a launch starts stopped
instances first - all its nodes or none - in the warm boot time, a refused start boots the
launch cold whole, and the stopped time is costed at the volumes' price. With slurmscale's
policy it is the daemon's own warm pool (daemon/passes/warm_pool.py) doing it on the
simulated EC2; the engine boots a started node in the warm time."""

from __future__ import annotations

from dataclasses import replace

from slurmscale.policy.model import PoolKnobs
from slurmscale.sim.engine import SimCloud, Simulation, simulate
from slurmscale.sim.policies import builtin_policy
from slurmscale.sim.report import metrics
from slurmscale.sim.trace import TraceJob
from slurmscale.sim.world import WarmPool

COLD, WARM = 300.0, 60.0
KNOBS = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=8, cooldown_s=120, min_idle_s=60,
                  max_idle_s=120)


def _run(jobs: list[TraceJob], warm: WarmPool | None):  # type: ignore[no-untyped-def]
    cloud = SimCloud(boot_s=COLD, warm=warm)
    r = simulate(jobs, builtin_policy("slurmscale", KNOBS), cloud)
    return r, metrics(r, cloud)


def _apart(*sizes: int) -> list[TraceJob]:
    """Jobs of these node counts, each long after the last ended (its nodes released)."""
    return [TraceJob(f"j{k}", k * 4 * 3600.0, 600.0, 8 * n, n) for k, n in enumerate(sizes)]


def test_a_released_nodes_instance_waits_stopped_and_the_next_launch_starts_it_warm() -> None:
    cold, _ = _run(_apart(2, 2), None)
    warm, figures = _run(_apart(2, 2), WarmPool(size=2, boot_s=WARM))
    assert cold.waits[1] >= COLD and warm.waits[0] >= COLD, "the first launch boots cold"
    assert WARM <= warm.waits[1] < COLD, "the second starts the two stopped instances"
    assert warm.warm_starts == 2 and warm.warm_refused == 0
    # stopped from the first release to the second launch (about 4 h, two instances)
    assert 2 * 3 * 3600 < warm.stopped_node_s < 2 * 4 * 3600
    assert figures["stopped_node_hours"] == round(warm.stopped_node_s / 3600, 1)
    cold_cost = metrics(cold, SimCloud(boot_s=COLD))["cost_usd"]
    volumes = warm.stopped_node_s / 3600 * 0.055
    assert figures["cost_usd"] < cold_cost + volumes, "the shorter boot is billed less"


def test_a_gang_larger_than_the_pool_boots_cold_whole() -> None:
    r, _ = _run(_apart(2, 4), WarmPool(size=2, boot_s=WARM))
    assert r.waits[1] >= COLD and r.warm_starts == 0


def test_a_refused_start_boots_the_launch_cold_and_keeps_the_stopped_instances() -> None:
    r, _ = _run(_apart(2, 2, 2), WarmPool(size=2, boot_s=WARM, start_failure=1.0))
    assert all(w >= COLD for w in r.waits) and r.warm_starts == 0 and r.warm_refused == 2


def test_without_a_warm_pool_the_figures_carry_no_warm_keys() -> None:
    _, figures = _run(_apart(1), None)
    assert "warm_starts" not in figures and "stopped_node_hours" not in figures
    _, figures = _run(_apart(1), replace(WarmPool(size=1), boot_s=WARM))
    assert figures["warm_starts"] == 0


def test_it_is_the_daemons_own_warm_pool_that_stops_and_starts() -> None:
    sim = Simulation(_apart(2, 2), builtin_policy("slurmscale", KNOBS),
                     SimCloud(boot_s=COLD, warm=WarmPool(size=2, boot_s=WARM)))
    r = sim.run()
    assert sim.daemon is not None and sim.slurm.power.warm_pool is None
    assert sim.daemon.ec2.starts == 2 == r.warm_starts
    assert sim.daemon.events["warm_stopped"] >= 2 and sim.daemon.events["warm_started"] == 1
    assert sim.daemon.events["launch_requested"] == 1, "one CreateFleet: the first gang's"
