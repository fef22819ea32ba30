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
    log = c.root / "log" / "slurmscale-daemon.log"
    wait_for("the daemon to fail writing the address",
             lambda: "nodeaddr=127.0.0.1" in log.read_text(), 120)
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
