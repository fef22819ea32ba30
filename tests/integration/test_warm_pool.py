"""Warm pools of stopped instances on real Slurm with moto (issue 67, item 2): a released
gang's instances stopped into the pool and the next gang started from them without a
CreateFleet; a start EC2 refuses (InsufficientInstanceCapacity, injected at the proxy in
EC2's error shape) puts the started one back and launches the gang cold, whole; a daemon
killed between the starts leaves no instance running untracked."""

from __future__ import annotations

import json

import pytest

from slurmscale.hostlists import expand
from slurmscale.localcluster.options import PoolSpec
from slurmscale.localcluster.procs import wait_for
from slurmscale.store.repo import Store
from tests.support.ec2_proxy import Fault

pytestmark = pytest.mark.slurm

POOLS = [PoolSpec("gpu-od", "od-", 4, capacity_type="on-demand",
                  extra={"warm_pool": {"size": 2}})]


def _calls(proxy, action: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The instance ids of the calls of `action` EC2 answered."""
    return [v for c in proxy.calls if c.action == action and c.status == 200
            for k, v in c.params.items() if k.startswith("InstanceId.")]


def _gang_then_into_the_pool(c, proxy) -> list[str]:  # type: ignore[no-untyped-def]
    """A 2-node gang runs and completes; its idle nodes are released: both instances
    stopped into the pool. Returns their ids."""
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-od", "--wrap", "sleep 2")
    assert c.wait_job(job, {"COMPLETED"}, 180) == "COMPLETED"
    wait_for("both instances stopped into the warm pool",
             lambda: len(c.cluster_instances(("stopped",))) == 2
             and not c.cluster_instances(("pending", "running")), 120)
    return sorted(i["InstanceId"] for i in c.cluster_instances(("stopped",)))


def _warm_rows(c) -> list[str]:  # type: ignore[no-untyped-def]
    store = Store(c.cfg.store_url)
    try:
        return sorted(r.instance_id for r in store.warm_instances())
    finally:
        store.close()


def test_a_released_gang_is_stopped_and_the_next_gang_starts_from_it(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, proxy = make_cluster(pools=POOLS, min_idle=1.0, max_idle=3.0, metrics=True)
    warm = _gang_then_into_the_pool(c, proxy)
    assert sorted(_calls(proxy, "StopInstances")) == warm
    assert _warm_rows(c) == warm
    assert json.loads(c.cli("status", "--json").stdout)["warm_pools"] == [
        {"pool": "gpu-od", "stopped": 2, "size": 2}]
    assert "warm pools (stopped instances kept for the next resumes): gpu-od 2/2" in \
        c.cli("status").stdout
    wait_for("the warm pool's gauge exported",
             lambda: 'slurmscale_warm_instances{pool="gpu-od"} 2.0' in c.scrape(), 30)
    fleets = len(proxy.fleet_calls())
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-od", "--wrap", "sleep 30")
    c.wait_job(job, {"RUNNING"}, 120)
    assert len(proxy.fleet_calls()) == fleets, "no CreateFleet: started from the pool"
    assert sorted(_calls(proxy, "StartInstances")) == warm
    running = {i["InstanceId"]: {t["Key"]: t["Value"] for t in i["Tags"]}
               for i in c.cluster_instances(("running",))}
    assert sorted(running) == warm
    assert sorted(t["slurmscale:node"] for t in running.values()) == \
        sorted(expand(c.job(job)["NodeList"])), "each started as the node it runs as"
    kinds = [e["kind"] for e in c.events()]
    assert "warm_stopped" in kinds and "warm_started" in kinds
    rep = json.loads(c.cli("report", "--since", "1h", "--format", "json").stdout)
    assert [w["pool"] for w in rep["warm_pools"]] == ["gpu-od"]
    assert rep["warm_pools"][0]["instances"] == 2
    # the warm start's time to run shown apart from the cold launch it is measured against
    assert {t["kind"] for t in rep["time_to_run"]} == {"gang", "warm gang"}, rep["time_to_run"]
    (warm_ttr,) = [t for t in rep["time_to_run"] if t["kind"] == "warm gang"]
    boot = {ph["phase"]: ph for ph in warm_ttr["phases"]}["boot"]
    # from the start (EC2's LaunchTime after a start) to the bootstrap: the agent's delay
    assert boot["n"] == 2 and boot["median_s"] < 20, boot
    print(f"warm pool: gang of 2 stopped into the pool ({', '.join(warm)}), the next gang "
          "RUNNING on them with no CreateFleet")


def test_a_refused_start_puts_the_started_back_and_the_gang_launches_cold(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, proxy = make_cluster(pools=POOLS, min_idle=1.0, max_idle=3.0)
    warm = _gang_then_into_the_pool(c, proxy)
    fleets = len(proxy.fleet_calls())
    # the second start finds no capacity (EC2: "If you get an InsufficientInstanceCapacity
    # error when you try to launch an instance or restart a stopped instance..."); enough
    # times to outlast botocore's own retries of that one call
    proxy.faults.append(Fault("StartInstances", "api_error", status=500, skip=1, times=20))
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-od", "--wrap", "sleep 30")
    c.wait_job(job, {"RUNNING"}, 150)
    assert len(proxy.fleet_calls()) == fleets + 1, "the gang launched cold, in one fleet"
    (started,) = _calls(proxy, "StartInstances")
    assert started in warm and _calls(proxy, "StopInstances")[-1] == started
    wait_for("the started one stopped again",
             lambda: sorted(i["InstanceId"] for i in c.cluster_instances(("stopped",)))
             == warm, 60)
    assert _warm_rows(c) == warm
    running = sorted(i["InstanceId"] for i in c.cluster_instances(("running",)))
    assert len(running) == 2 and not set(running) & set(warm)
    assert c.job(job)["Restarts"] == "0"
    assert "warm_start_refused" in [e["kind"] for e in c.events()]


def test_a_daemon_killed_between_the_starts_is_finished_by_the_restart(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """One instance started, the other still stopped, both tagged with the gang and its
    nodes: the restarted daemon finds them by the gang's tag among the warm instances and
    makes the start not made; the gang runs on them whole, no CreateFleet, the job never
    requeued, nothing running that the store does not track."""
    c, proxy = make_cluster(pools=POOLS, min_idle=1.0, max_idle=3.0,
                            daemon_env={"SLURMSCALE_TEST_MODE": "1",
                                        "SLURMSCALE_CRASH_AT": "warm:between_starts"})
    warm = _gang_then_into_the_pool(c, proxy)
    fleets = len(proxy.fleet_calls())
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-od", "--wrap", "sleep 20")
    wait_for("the daemon killed between the starts", lambda: not c.procs.running("daemon"),
             120)
    assert len(_calls(proxy, "StartInstances")) == 1
    c.start_daemon()  # restarted without the crash point
    c.wait_job(job, {"RUNNING"}, 120)
    assert sorted(_calls(proxy, "StartInstances")) == warm, "the start not made, made"
    assert len(proxy.fleet_calls()) == fleets
    assert c.job(job)["Restarts"] == "0"
    assert c.cfg is not None
    store = Store(c.cfg.store_url)
    try:
        active = {r.instance_id: r.node for r in store.active_instances()}
    finally:
        store.close()
    running = {i["InstanceId"] for i in c.cluster_instances(("pending", "running"))}
    assert running == set(active) == set(warm), (running, active)
    assert sorted(active.values()) == sorted(expand(c.job(job)["NodeList"]))
    kinds = [e["kind"] for e in c.events()]
    assert "launch_recovered" in kinds and "launch_failed" not in kinds
    print(f"warm pool, killed between the starts of {warm}: the restart started the other, "
          "the gang RUNNING on both, no CreateFleet, Restarts 0")
