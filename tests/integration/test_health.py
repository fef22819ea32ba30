"""Unhealthy nodes replaced on a real Slurm, moto behind the EC2 proxy:
(a) an idle node the site's health check drained (an NHC-style reason) is replaced: its
    instance terminated within two passes, the node back in service; an admin's drain on
    another node untouched; (d) the same node unhealthy again past `max_replacements` is left
    drained for an admin, its instance kept;
(b) a running 2-node gang whose node's slurmd dies: requeued once (never FAILED), the node
    replaced, the gang completes on fresh instances, nothing leaked;
(c) a scheduled retirement for an instance of a running job (DescribeInstanceStatus through
    the proxy, and the same as an AWS Health message on the queue): drained at once, nothing
    new starts there, the instance replaced once the job ends."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from slurmscale.cloud.protocol import TAG_NODE
from slurmscale.hostlists import expand
from slurmscale.localcluster.cluster import LocalCluster
from slurmscale.localcluster.procs import wait_for
from slurmscale.slurm.reasons import Why
from tests.integration.slurm_releases import slurm_root
from tests.support.eventbridge_messages import health_message

pytestmark = pytest.mark.slurm

TICK = 2.0


def _instances(c: LocalCluster) -> dict[str, str]:
    """node -> its pending or running instance."""
    out = {}
    for inst in c.cluster_instances(("pending", "running")):
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        out[tags.get(TAG_NODE, "")] = str(inst["InstanceId"])
    return out


def _passes(c: LocalCluster, n: int, timeout: float = 60) -> None:
    """Wait until the daemon has completed `n` more passes (its last pass's time, in status)."""
    seen: set[str] = set()

    def more() -> bool:
        d = json.loads(c.cli("status", "--json").stdout)
        seen.add(str((d["daemon"].get("last_tick") or {}).get("at")))
        return len(seen) > n
    wait_for(f"{n} more passes", more, timeout)


def _no_leaks(c: LocalCluster) -> None:
    """Every instance up belongs to a node Slurm has up (not powered down)."""
    for node, iid in _instances(c).items():
        st = c.node(node).get("State", "")
        assert node and "POWERED_DOWN" not in st, f"{iid} runs for {node!r} ({st})"


CHECK = """#!/bin/sh
# A site's GPU health check that fails on demand: slurmd runs it (HealthCheckProgram) every
# HealthCheckInterval; a flag file for this node makes it drain the node as NHC would.
f="{flags}/fail-$SLURMD_NODENAME"
[ -e "$f" ] || exit 0
rm -f "$f"
SLURM_CONF={conf} exec /usr/bin/scontrol update nodename="$SLURMD_NODENAME" state=drain \\
    reason="NHC: check_nv_healthmon: GPU 3 Xid 79 (fallen off the bus)"
"""


def test_a_health_check_drain_is_replaced_an_admin_drain_is_not_and_a_loop_is_stopped(
        make_cluster, tmp_path) -> None:
    check = tmp_path / "gpu-health-check"
    c, _proxy = make_cluster(
        tick_seconds=TICK, min_idle=600, max_idle=600, suspend_time=1200,
        extra_config={"health": {"replace_on_reasons": ["NHC"], "grace_s": 0,
                                 "max_replacements": 1, "check_program": str(check),
                                 "check_interval_s": 2}})
    assert f"HealthCheckProgram={check}" in c.slurmscale_conf.read_text()  # rendered by slurm-conf
    check.write_text(CHECK.format(flags=tmp_path, conf=c.conf))
    check.chmod(0o755)
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "true")
    c.wait_job(job, {"COMPLETED"}, 150)
    a, b = expand(c.job(job)["NodeList"])
    before = _instances(c)
    (tmp_path / f"fail-{a}").touch()
    c.slurm("scontrol", "update", f"nodename={b}", "state=drain", "reason=bad cable, ticket 4411")
    wait_for(f"the health check drains {a}", lambda: "DRAIN" in c.node(a).get("State", ""), 30)
    t0 = time.monotonic()
    wait_for(f"{before[a]} terminated", lambda: before[a] not in _instances(c).values(), 60)
    took = time.monotonic() - t0
    print(f"NHC drain -> instance terminated: {took:.1f} s (tick {TICK:g} s)")
    assert took <= 2 * TICK + 4, took  # two passes, and the suspend hook's own latency
    wait_for(f"{a} back in service, powered down", lambda: (lambda st: "DRAIN" not in st and (
        "POWERED_DOWN" in st))(c.node(a).get("State", "").split("+")), 60)
    nb = c.node(b)
    assert "DRAIN" in nb["State"] and nb["Reason"].startswith("bad cable"), nb
    assert _instances(c).get(b) == before[b]
    (ev,) = [e for e in c.events() if e["kind"] == "node_replaced"]
    assert a in ev["message"] and "health-check" in ev["message"]

    # (d) the fresh node fails its health check again: replaced once already -> left
    job2 = c.sbatch("-N", "1", "--gres=gpu:8", "-p", "gpu-spot", "-w", a, "--wrap", "true")
    c.wait_job(job2, {"COMPLETED"}, 150)
    fresh = _instances(c)[a]
    assert fresh != before[a]
    (tmp_path / f"fail-{a}").touch()
    wait_for(f"{a} left for an admin", lambda: c.node(a).get("Reason", "").startswith(
        Why.REPLACE_LOOP.value), 30)
    _passes(c, 3)  # (the claim is that nothing happens: three more passes)
    assert _instances(c).get(a) == fresh and "DRAIN" in c.node(a)["State"]
    loop = [e for e in c.events() if e["kind"] == "node_replace_loop"]
    assert len(loop) == 1 and "pool gpu-spot is losing nodes" in loop[0]["message"]
    st = json.loads(c.cli("status", "--json").stdout)
    assert [r["node"] for r in st["replacing"]] == [a] and st["replaced_24h"] == 1
    assert "unhealthy nodes (replaced in 24h: 1)" in c.cli("status").stdout


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_a_gang_whose_node_dies_is_requeued_once_and_completes_on_fresh_instances(
        make_cluster, release: str) -> None:
    c, _proxy = make_cluster(tick_seconds=TICK, slurmd_timeout=10, cred_expire=10,
                             metrics=True, slurm_root=slurm_root(release),
                             extra_config={"health": {"grace_s": 4}})
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 30")
    c.wait_job(job, {"RUNNING"}, 150)
    victim = expand(c.job(job)["NodeList"])[0]
    dead = _instances(c)[victim]
    assert c.agent is not None
    c.agent.crash(victim)
    t0 = time.monotonic()
    wait_for(f"{dead} terminated", lambda: dead not in _instances(c).values(), 90)
    print(f"slurmd killed -> instance terminated: {time.monotonic() - t0:.1f} s")
    wait_for("the job requeued", lambda: c.job(job).get("Restarts") == "1", 60)
    state = c.wait_job(job, {"COMPLETED"}, 300)  # fails at once on FAILED / NODE_FAIL
    print(f"slurmd killed -> gang completed: {time.monotonic() - t0:.1f} s")
    assert state == "COMPLETED" and c.job(job)["Restarts"] == "1"
    (ev,) = [e for e in c.events() if e["kind"] == "node_replaced"]
    assert victim in ev["message"] and "not-responding" in ev["message"]
    wait_for(f"{victim} back in service", lambda: not ({"DRAIN", "DOWN"} & set(
        c.node(victim).get("State", "").split("+"))), 60)
    m = c.scrape()
    assert 'slurmscale_node_replacements_total{cause="not-responding",pool="gpu-spot"} 1.0' in m
    (x,) = json.loads(c.cli("report", "--since", "1h", "--format", "json").stdout)[
        "replacements"]
    assert (x["pool"], x["cause"], x["replaced"]) == ("gpu-spot", "not-responding", 1)
    assert x["p50_to_fresh_s"] is not None and x["lost_gpu_hours"] > 0
    print(f"report: detection -> fresh instance {x['p50_to_fresh_s']:.0f} s, "
          f"{x['lost_gpu_hours']:.3f} GPU-h lost")
    _no_leaks(c)


def test_a_scheduled_retirement_drains_at_once_and_replaces_when_the_job_ends(
        make_cluster) -> None:
    c, proxy = make_cluster(tick_seconds=TICK, extra_config={
        "health": {"status_interval_s": 2, "event_lead_s": 600}})
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 60")
    c.wait_job(job, {"RUNNING"}, 150)
    a, b = expand(c.job(job)["NodeList"])
    iid = _instances(c)[a]
    start = datetime.now(UTC) + timedelta(days=2)
    proxy.scheduled[iid] = ("instance-retirement", start.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                            "The instance is running on degraded hardware")
    c.send_event(health_message("AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED", [iid],
                                datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                start.strftime("%a, %d %b %Y %H:%M:%S GMT")))
    t0 = time.monotonic()
    wait_for(f"{a} drained", lambda: c.node(a).get("Reason", "").startswith(
        Why.SCHEDULED.value), 30)
    print(f"scheduled event -> node drained: {time.monotonic() - t0:.1f} s")
    assert c.job_state(job) == "RUNNING"  # the running job is left to finish
    other = c.sbatch("-N", "1", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 1")
    c.wait_job(other, {"RUNNING", "COMPLETING", "COMPLETED"}, 60)
    assert c.job_state(job) == "RUNNING" and iid in _instances(c).values()
    assert a not in expand(c.job(other)["NodeList"])  # nothing new starts on it
    c.wait_job(job, {"COMPLETED"}, 120)
    wait_for(f"{iid} terminated", lambda: iid not in _instances(c).values(), 60)
    assert c.job(job)["Restarts"] == "0"
    (ev,) = [e for e in c.events() if e["kind"] == "node_replaced"]
    assert a in ev["message"] and "scheduled-event" in ev["message"]
    assert any(e["kind"] == "scheduled_event" for e in c.events())
    _no_leaks(c)
