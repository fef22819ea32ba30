"""Nodes join only through the node bootstrap (slurmscale/node_init.py, reading the loopback
metadata emulator), on a real Slurm, moto behind the recording EC2 proxy:
(a) a node whose GPU check fails tags its instance; the daemon gives the node a fresh instance
    within two passes of the report, pinned where its gang is; the gang completes, Restarts=0
    (22.05 with the cluster's slurm.conf, 26.05 configless: slurmd fetches it from slurmctld);
(b) an instance whose node tag never appears (the daemon's CreateTags refused) is replaced
    after `join_timeout_s`, long before ResumeTimeout; the gang completes, Restarts=0;
(c) `max_boot_retries` spent: the node is powered down with the boot error as its reason, the
    job requeued once (never FAILED) and completed on a node that boots;
(d) an instance reboots (the bootstrap runs again, as the shipped unit runs it at every boot):
    under ReturnToService=2 its node rejoins on the same instance; under 1 (Slurm's default)
    slurmctld leaves it DOWN "Node unexpectedly rebooted" and the daemon replaces it;
and in each, nothing leaked: every instance that failed is terminated."""

from __future__ import annotations

import time

import pytest

from slurmscale.cloud.protocol import TAG_NODE
from slurmscale.localcluster.cluster import LocalCluster
from slurmscale.localcluster.options import PoolSpec
from slurmscale.localcluster.procs import wait_for
from slurmscale.policy.boots import TAG_BOOT_ERROR
from tests.integration.slurm_releases import slurm_root
from tests.support.ec2_proxy import EC2Proxy, Fault

pytestmark = pytest.mark.slurm

TICK = 2.0


def _live(c: LocalCluster) -> dict[str, str]:
    """instance -> its node tag, of every pending or running instance."""
    return {str(i["InstanceId"]): {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get(
        TAG_NODE, "") for i in c.cluster_instances(("pending", "running"))}


def _reports(proxy: EC2Proxy) -> list[tuple[float, str, str]]:
    """(time, instance, value) of each boot failure a bootstrap tagged."""
    return [(k.at, k.params["ResourceId.1"], k.params["Tag.1.Value"]) for k in proxy.calls
            if k.action == "CreateTags" and k.params.get("Tag.1.Key") == TAG_BOOT_ERROR]


def _boot_events(c: LocalCluster) -> list[dict]:
    return [e for e in c.events() if e["kind"] in ("boot_replaced", "boot_failed")]


@pytest.mark.parametrize("release", ["22.05", "26.05"])
def test_a_node_failing_its_gpu_check_gets_a_fresh_instance_and_its_gang_completes(
        make_cluster, release: str) -> None:
    configless = release != "22.05"
    c, proxy = make_cluster(tick_seconds=TICK, slurm_root=slurm_root(release),
                            configless=configless)
    for n in range(1, 9):  # whichever two nodes Slurm picks, each fails its first boot
        c.break_gpu(f"spot-{n}")
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 5")
    c.wait_job(job, {"RUNNING", "COMPLETED"}, 150)
    state = c.wait_job(job, {"COMPLETED"}, 120)
    assert state == "COMPLETED" and c.job(job)["Restarts"] == "0"
    reports = _reports(proxy)
    assert len(reports) == 2 and all(v.startswith("gpu-check: 7 GPU(s) seen by ")
                                     for _, _, v in reports)
    fleets = proxy.fleet_calls()
    assert [f.params["TargetCapacitySpecification.TotalTargetCapacity"] for f in fleets] == [
        "2", "1", "1"], "the gang's fleet, then one fresh instance per failed node"
    for (at, iid, _), fleet in zip(sorted(reports), fleets[1:], strict=True):
        lag = fleet.at - at
        print(f"{iid} reported -> fresh instance's CreateFleet: {lag:.1f} s")
        assert lag < 2 * TICK + 3, "within two passes of the report"
    events = _boot_events(c)
    assert [e["kind"] for e in events] == ["boot_replaced", "boot_replaced"]
    assert all("gpu-check" in e["message"] and "Slurm still waits" in e["message"]
               for e in events)
    failed = {iid for _, iid, _ in reports}
    assert not failed & set(_live(c)), "every instance that failed is terminated"
    st = c.cli("status").stdout
    assert "boot failures (24h): gpu-spot gpu-check 2" in st
    started = [line for p in (c.root / "log").glob("boot-i-*.out")
               for line in p.read_text().splitlines() if "starting " in line]
    assert len(started) == 2 and all(("--conf-server 127.0.0.1:" in line) == configless
                                     and ("-f " in line) != configless for line in started)


def test_an_instance_whose_node_tag_never_appears_is_replaced_after_the_join_timeout(
        make_cluster) -> None:
    c, proxy = make_cluster(tick_seconds=TICK, resume_timeout=300, pools=[
        PoolSpec("gpu-spot", "spot-", 4, extra={"join_timeout_s": 20})])
    # EC2 refuses the daemon's first CreateTags (the node tag): that instance never learns
    # its node, and its bootstrap waits (tag_timeout 60 s, past the join timeout)
    proxy.faults.append(Fault("CreateTags", "api_error", code="UnauthorizedOperation",
                              message="You are not authorized to perform this operation.",
                              status=400))
    t0 = time.monotonic()
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 3")
    wait_for("a join-timeout replacement", lambda: _boot_events(c), 90)
    waited = time.monotonic() - t0
    (ev,) = _boot_events(c)
    assert ev["kind"] == "boot_replaced" and "join-timeout" in ev["message"]
    print(f"submitted -> replaced after the join timeout: {waited:.1f} s (ResumeTimeout 300)")
    assert 20 <= waited < 60
    assert c.wait_job(job, {"COMPLETED"}, 150) == "COMPLETED"
    assert c.job(job)["Restarts"] == "0"
    assert _reports(proxy) == []  # the bootstrap was still waiting for its tag


def test_retries_spent_power_the_node_down_with_the_reason_and_the_job_requeues_once(
        make_cluster) -> None:
    c, proxy = make_cluster(tick_seconds=TICK, cred_expire=10, pools=[
        PoolSpec("gpu-spot", "spot-", 4, extra={"max_boot_retries": 1})])
    c.break_gpu("spot-1", boots=2)  # its first two boots fail, the third is sound
    job = c.sbatch("-N", "1", "--gres=gpu:8", "-p", "gpu-spot", "-w", "spot-1",
                   "--wrap", "sleep 2")
    wait_for("the node given up on", lambda: any(
        e["kind"] == "boot_failed" for e in _boot_events(c)), 120)
    assert {e["node"] for e in _boot_events(c)} == {"spot-1"}
    kinds = [e["kind"] for e in _boot_events(c)]
    assert kinds == ["boot_replaced", "boot_failed"]
    (gave_up,) = [e for e in _boot_events(c) if e["kind"] == "boot_failed"]
    assert "gpu-check" in gave_up["message"] and "1 fresh instance(s) failed too" in \
        gave_up["message"]
    wait_for("the job requeued", lambda: c.job(job).get("Restarts") == "1", 60)
    # requeued, it waits for spot-1 to power down and up again: its third boot is sound
    assert c.wait_job(job, {"COMPLETED"}, 240) == "COMPLETED"
    assert c.job(job)["Restarts"] == "1"
    failed = {iid for _, iid, _ in _reports(proxy)}
    assert len(failed) == 2 and not failed & set(_live(c))


@pytest.mark.parametrize("return_to_service", [2, 1])
def test_a_rebooted_instance_rejoins_or_is_replaced_as_slurm_leaves_it(
        make_cluster, return_to_service: int) -> None:  # type: ignore[no-untyped-def]
    c, _proxy = make_cluster(
        pools=[PoolSpec("gpu-od", "od-", 2, capacity_type="on-demand")], tick_seconds=TICK,
        min_idle=600, max_idle=900, suspend_time=1200,
        slurm_conf_extra=[f"ReturnToService={return_to_service}"])
    first = c.sbatch("-N", "1", "-p", "gpu-od", "--gres=gpu:8", "-w", "od-1", "--wrap", "true")
    c.wait_job(first, {"COMPLETED"}, 180)
    assert c.agent is not None
    before = c.agent.reboot("od-1", down_s=8)  # down long enough for slurmctld to notice
    again = c.sbatch("-N", "1", "-p", "gpu-od", "--gres=gpu:8", "-w", "od-1", "--wrap", "true")
    c.wait_job(again, {"COMPLETED"}, 240)
    kinds = [e["kind"] for e in c.events()]
    after = {n: i for i, n in _live(c).items()}["od-1"]
    if return_to_service == 2:
        assert after == before and "node_replaced" not in kinds, kinds
        print("reboot, ReturnToService=2: od-1 rejoined on its instance")
        return
    (ev,) = [e for e in c.events() if e["kind"] == "node_replaced"]
    assert "unexpected-reboot" in ev["message"] and "Node unexpectedly rebooted" in ev["message"]
    assert after != before and before not in _live(c), "the rebooted instance terminated"
    print(f"reboot, ReturnToService=1: od-1 replaced ({before} -> {after})")
