from __future__ import annotations

from typing import Any

import pytest

from slurmscale.config import Config
from slurmscale.config_file import parse_config
from slurmscale.policy.reservations import GangJob, earliest_plan


def base_config(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "cluster_name": "unit",
        "pools": [
            {"name": "gpu-spot", "partition": "gpu-spot", "node_prefix": "spot-",
             "max_nodes": 8, "gpus_per_node": 8, "instance_types": ["p5.48xlarge"],
             "capacity_type": "spot", "launch_template": {"name": "gpu", "version": 3},
             "subnets": ["subnet-1"]},
            {"name": "gpu-od", "partition": "gpu-od", "node_prefix": "od-",
             "max_nodes": 2, "gpus_per_node": 8, "instance_types": ["p5.48xlarge"],
             "capacity_type": "on-demand", "launch_template": {"id": "lt-1", "version": "2"},
             "subnets": ["subnet-1", "subnet-2"]},
        ],
    }
    d.update(over)
    return d


def with_earliest_plans(jobs: tuple[GangJob, ...], seen: dict[str, float]
                        ) -> tuple[GangJob, ...]:
    """The plain computation the queue view's kept plans are held to: each pending gang
    with the earliest start backfill has planned for it so far (`seen`, updated here; jobs
    gone or started are forgotten)."""
    out = tuple(earliest_plan(j, seen) for j in jobs)
    pending = {j.job_id for j in out if j.pending}
    for gone in [i for i in seen if i not in pending]:
        del seen[gone]
    return out


@pytest.fixture
def cfg(tmp_path) -> Config:  # type: ignore[no-untyped-def]
    d = base_config(spool_dir=str(tmp_path / "spool"),
                    socket_path=str(tmp_path / "sock"),
                    hook_log_file=str(tmp_path / "hooks.log"),
                    store_url=f"sqlite:///{tmp_path / 'state.db'}")
    return parse_config(d)


@pytest.fixture(autouse=True, scope="session")
def _view_checks_itself() -> Any:
    """Every snapshot the daemon's kept queue view builds in the unit tests (and the golden
    simulator runs they start) is compared with a rebuild (daemon/queue/view_check.py)."""
    import os

    from slurmscale.daemon.queue.view_check import ENV

    before = os.environ.get(ENV)
    os.environ[ENV] = "1"
    yield
    if before is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = before


@pytest.fixture(autouse=True)
def _a_host_clock_that_does_not_step() -> Any:
    """Each test reads times in a frame of its own whose wall clock is the monotonic clock
    from the test's start: a step of this machine's clock while the suite runs (NTP setting
    it; seen here, some 26 s) would otherwise be noticed by the process's frame
    (slurmscale/timeframe.py) as the daemon notices it, and move the times of every later
    test in that worker (a spot warning's deadline read 26 s early). The clock-step tests
    install frames of their own over it."""
    import time

    from slurmscale import timeframe

    base = time.time() - time.monotonic()
    before = timeframe.install(timeframe.Frame(wall=lambda: time.monotonic() + base))
    yield
    timeframe.install(before)
