"""What an outside chaos and bad-input audit broke, on a real Slurm (issue 14): each test
failed before its fix."""

from __future__ import annotations

import json

import pytest

from slurmscale.localcluster.procs import wait_for
from tests.support.ec2_proxy import Fault

pytestmark = pytest.mark.slurm

GANG = ("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 1")


def test_a_bad_spool_file_is_set_aside_and_jobs_still_run(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Before: a valid-JSON file with received_at 1e20 made every pass fail (OverflowError
    in the store), and a job sat CONFIGURING until the file was deleted by hand."""
    c, proxy = make_cluster()
    spool = c.root / "slurmscale" / "spool"
    bad = spool / "incoming" / "1796026821727-57652a53acac.json"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text(json.dumps({"id": "1796026821727-57652a53acac", "kind": "resume",
                               "nodes": ["spot-3"], "hostlist": "spot-3",
                               "resume_file": None, "received_at": 1e20}))
    job = c.sbatch(*GANG)
    c.wait_job(job, {"COMPLETED"}, 180)
    assert (spool / "rejected" / bad.name).exists() and not bad.exists()
    kinds = [e["kind"] for e in c.events()]
    assert kinds.count("spool_rejected") == 1 and "launched" in kinds


def test_a_node_name_slurm_cannot_have_launches_nothing(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Before: `slurmscale resume 'spot-１'` (a full-width digit) exited 0, the daemon
    launched an instance for a node Slurm does not have, and it ran on for good."""
    c, proxy = make_cluster()
    for expr in ("spot-\uff11", "spot-\u0663", "spot-\u00b2"):
        p = c.cli("resume", expr)
        assert p.returncode == 2 and "Traceback" not in p.stderr, (expr, p.stderr)
    c.events()  # a pass has run
    assert proxy.fleet_calls() == [] and not c.cluster_instances()


def test_an_address_lost_to_a_slurmctld_outage_is_written_again(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Before: with slurmctld down while a gang's CreateFleet was in flight, both
    `scontrol update nodeaddr=` calls failed and were never retried: slurmctld could not
    reach the nodes, the job was requeued and a second CreateFleet followed. (Here the local
    cluster's slurm.conf gives every node NodeHostname=localhost, which slurmctld can still
    reach, so the job would run without the fix too: what fails without it is the address.)"""
    c, proxy = make_cluster()
    proxy.faults.append(Fault("CreateFleet", "delay", seconds=6))
    job = c.sbatch(*GANG)
    wait_for("the CreateFleet in flight",
             lambda: any(x.action == "CreateFleet" for x in proxy.calls), 90)
    c.stop_slurmctld()
    wait_for("the answer back and the address writes failed", lambda: any(
        x.action == "CreateFleet" and x.status == 200 for x in proxy.calls), 30)
    # (the gang's one update fails, then each node's: an event per node)
    wait_for("the daemon to fail writing the addresses", lambda: len([
        e for e in c.events() if e["kind"] == "slurm_update_failed"
        and "nodeaddr=" in e["message"]]) == 2, 120)
    c.start_slurmctld()
    c.wait_job(job, {"COMPLETED"}, 240)
    assert len(proxy.fleet_calls()) == 1, "no second launch"
    assert c.job(job)["Restarts"] == "0", c.job(job)
    events = c.events()
    failed = {e["node"] for e in events
              if e["kind"] == "slurm_update_failed" and "nodeaddr=" in e["message"]}
    fixed = {e["node"] for e in events if e["kind"] == "node_address_fixed"}
    assert failed and failed <= fixed, (failed, fixed)
    for n in ("spot-1", "spot-2"):
        assert c.node(n)["NodeAddr"] == "127.0.0.1"


def test_a_second_daemon_on_the_same_config_never_takes_the_leaders_socket(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Before: a second daemon on the same SQLite config bound the leader's socket (answering
    health checks as if it led) and removed it on stop: the leader led on with no socket."""
    import os
    import sys

    from slurmscale.localcluster.cluster import AWS_ENV

    c, proxy = make_cluster()
    sock = c.root / "run" / "slurmscale.sock"
    inode = sock.stat().st_ino
    env = {**os.environ, **AWS_ENV, "SLURMSCALE_CONFIG": str(c.cfg_path)}
    c.procs.start("daemon-b", [sys.executable, "-m", "slurmscale", "--config",
                               str(c.cfg_path), "daemon"], env=env)
    out = c.root / "log" / "daemon-b.out"
    wait_for("the second daemon to stand by without the socket", lambda: out.exists()
             and "served by another live daemon" in out.read_text(), 60)
    status = json.loads(c.cli("status", "--json").stdout)
    assert status["daemon"]["role"] == "leader", status["daemon"]
    c.procs.stop("daemon-b")
    assert sock.is_socket() and sock.stat().st_ino == inode, "the leader's socket is untouched"
    status = json.loads(c.cli("status", "--json").stdout)
    assert status["daemon"]["reachable"] and status["daemon"]["role"] == "leader"
    job = c.sbatch(*GANG)
    c.wait_job(job, {"COMPLETED"}, 180)
    assert "daemon not reachable" not in (c.root / "log" / "slurmscale-hooks.log").read_text()


def test_a_spot_warning_that_arrives_while_slurmctld_is_down_is_not_lost(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Before: the message was deleted although handling it failed (Slurm unreachable): the
    two-minute warning was lost and the job died with the node instead of being requeued."""
    from slurmscale.cloud.protocol import TAG_NODE
    from slurmscale.hostlists import expand
    from tests.support.eventbridge_messages import spot_warning

    c, _proxy = make_cluster(capacity={"unavailable_ttl_s": 5, "max_unavailable_ttl_s": 10})
    # long enough to still run when SQS gives the kept message back (visibility timeout 30 s)
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 150")
    c.wait_job(job, {"RUNNING"}, 150)
    victim = expand(c.job(job)["NodeList"])[0]
    iid = next(i["InstanceId"] for i in c.cluster_instances(("running",))
               if {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get(TAG_NODE) == victim)
    c.stop_slurmctld()
    c.send_event(spot_warning(iid))
    log = c.root / "log" / "slurmscale-daemon.log"
    wait_for("the warning read and kept", lambda: f"EC2 event for {iid} not handled yet"
             in log.read_text(), 60)
    c.start_slurmctld()

    def requeued() -> bool:  # a requeue counts its restart while the job is still
        j = c.job(job)       # COMPLETING (its processes killed), then pends again
        return j.get("Restarts") == "1" and j.get("JobState") in (
            "PENDING", "CONFIGURING", "RUNNING")
    wait_for("the job requeued once and back in the queue", requeued, 120)
    # (the node is powered down once Slurm has finished completing the job there: a pass on)
    wait_for("the node evacuated", lambda: "node_evacuated" in [e["kind"] for e in c.events()],
             90)
    kinds = [e["kind"] for e in c.events()]
    assert kinds.count("job_requeued") == 1 and kinds.count("node_evacuated") == 1
    c.slurm("scancel", str(job))


def test_a_node_slurm_gave_up_booting_returns_to_service_and_status_says_so(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Issue 64: a resume hook slurmctld could not run (exit 126) leaves the node
    DOWN+CLOUD+POWERED_DOWN+NOT_RESPONDING "ResumeTimeout reached" for good on real 22.05:
    a 4-node job on the 4-node pool then waits for ever. The daemon powers the node down again
    (it returns to idle~) and the job runs, with no hand command; `status` leads with it."""
    from slurmscale.localcluster.options import PoolSpec

    c, _ = make_cluster(pools=[PoolSpec("gpu-spot", "spot-", 4)], resume_timeout=20,
                        start_daemon=False, daemon={"lost_node_grace_s": 2})
    env_file = c.root / "hooks" / "hooks.env"
    good = env_file.read_text()
    env_file.write_text(good.replace("SLURMSCALE_PYTHON=", "SLURMSCALE_PYTHON=/nonexistent/"))
    c.slurm("scontrol", "update", "nodename=spot-3", "state=power_up")
    wait_for("Slurm to give up on spot-3",
             lambda: c.node("spot-3").get("State", "").startswith("DOWN+"), timeout=90)
    assert c.node("spot-3")["Reason"].startswith("ResumeTimeout reached")
    env_file.write_text(good)
    job = c.sbatch("-N", "4", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "true")
    c.start_daemon()
    assert c.wait_job(job, {"COMPLETED"}, timeout=240) == "COMPLETED"
    (e,) = [e for e in c.events() if e["kind"] == "node_stuck"]
    assert e["node"] == "spot-3" and "ResumeTimeout reached" in e["message"]
    out = c.cli("status")
    assert "NODES RAN INTO RESUMETIMEOUT (1h): spot-3" in out.stdout, out.stdout
