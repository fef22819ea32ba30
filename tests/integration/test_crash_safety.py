"""The fault matrix: the daemon is killed with SIGKILL at each named point of launch and of
release (slurmscale/crashpoints.py, armed only in test mode), then restarted. Each time the
2-node gang completes, there is exactly one CreateFleet, and once the nodes are released no
instance is left running and the store agrees with EC2."""

from __future__ import annotations

import json
import time

import pytest

from slurmscale.crashpoints import POINTS
from slurmscale.localcluster.procs import wait_for
from slurmscale.store.repo import Store

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize("point", [p for p in POINTS if p.startswith(("launch:", "release:"))
                                   and p != "launch:between_fleets"])
def test_sigkill_at_each_point_then_restart(make_cluster, point: str) -> None:  # type: ignore[no-untyped-def]
    c, proxy = make_cluster(daemon_env={"SLURMSCALE_TEST_MODE": "1",
                                        "SLURMSCALE_CRASH_AT": point},
                            min_idle=1.0, max_idle=3.0)  # release soon after the job
    t0 = time.monotonic()
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 2")
    wait_for(f"the daemon killed at {point}", lambda: not c.procs.running("daemon"), 150)
    c.start_daemon()  # restarted without the crash point
    assert c.wait_job(job, {"COMPLETED"}, 240) == "COMPLETED"
    wait_for("every instance released",
             lambda: not c.cluster_instances(("pending", "running")), 180)
    assert len(proxy.fleet_calls()) == 1, "one launch, never a second for the same gang"
    assert c.cfg is not None

    def settled() -> dict[str, str] | None:
        """The store agrees with EC2: both instances terminated, no request left pending
        (a release cut off after its terminate is finished by the restarted daemon)."""
        store = Store(c.cfg.store_url)
        try:
            rows = {r.instance_id: r.state for r in store.instances()}
            pending = store.pending_requests()
        finally:
            store.close()
        return rows if not pending and set(rows.values()) == {"terminated"} else None

    rows = wait_for("the store to agree with EC2", settled, 60)
    assert isinstance(rows, dict) and len(rows) == 2, rows
    kinds = [e["kind"] for e in c.events()]
    print(f"crash matrix: {point:<26} job COMPLETED, 1 CreateFleet, 2 instances "
          f"terminated, recovered={'launch_recovered' in kinds} "
          f"({time.monotonic() - t0:.0f}s)")


def test_a_kill_between_the_fleets_of_a_gang_is_finished_by_the_restart(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """A 5-node gang in fleets of 2 (2+2+1), the daemon SIGKILLed as the first fleet answers:
    the restarted daemon takes the first fleet's instances (by the gang's tag) and sends the
    two parts never sent, each with its own ClientToken, pinned where the first went; no
    capacity error is recorded, the pool is not backed off, the job is never requeued."""
    c, proxy = make_cluster(daemon_env={"SLURMSCALE_TEST_MODE": "1",
                                        "SLURMSCALE_CRASH_AT": "launch:between_fleets"},
                            aws={"max_instances_per_fleet": 2})
    t0 = time.monotonic()
    job = c.sbatch("-N", "5", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 2")
    wait_for("the daemon killed between fleets", lambda: not c.procs.running("daemon"), 150)
    assert len(proxy.fleet_calls()) == 1
    c.start_daemon()  # restarted without the crash point
    assert c.wait_job(job, {"COMPLETED"}, 240) == "COMPLETED"
    took = time.monotonic() - t0
    assert c.job(job)["Restarts"] == "0"
    fleets = proxy.fleet_calls()
    sizes = [f.params["TargetCapacitySpecification.TotalTargetCapacity"] for f in fleets]
    tokens = [f.params["ClientToken"] for f in fleets]
    assert sizes == ["2", "2", "1"] and len(set(tokens)) == 3, (sizes, tokens)
    kinds = [e["kind"] for e in c.events()]
    assert "launch_recovered" in kinds
    assert "launch_failed" not in kinds and "nodes_powered_down" not in kinds
    assert json.loads(c.cli("status", "--json").stdout)["backoff"] == []
    print(f"kill between fleets -> gang completed {took:.0f}s after submission, "
          f"fleets {'+'.join(sizes)}, Restarts 0")
