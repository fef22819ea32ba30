"""A spot interruption on a real Slurm: a running 2-node gang gets an EC2 Spot Instance
Interruption Warning (an SQS message in EventBridge's format, as the rule would deliver it) for
one of its nodes -> the job is requeued (restart count 1, never FAILED), the node drained and
powered down, its instance terminated, and the job completes on new capacity. Malformed and
foreign messages are dropped with an event."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

from slurmscale.cloud.protocol import TAG_NODE
from slurmscale.hostlists import expand
from slurmscale.localcluster.cluster import LocalCluster
from slurmscale.localcluster.procs import wait_for
from slurmscale.slurm.reasons import Why
from tests.support.eventbridge_messages import spot_warning

pytestmark = pytest.mark.slurm


def _instance_of(c: LocalCluster, node: str) -> str:
    for inst in c.cluster_instances(("running",)):
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        if tags.get(TAG_NODE) == node:
            return str(inst["InstanceId"])
    raise AssertionError(f"no running instance for {node}")


def test_a_spot_warning_requeues_the_gang_which_then_completes(make_cluster) -> None:  # type: ignore[no-untyped-def]
    spot_warning_scenario(make_cluster)


def spot_warning_scenario(make_cluster, slurm_root: str = "/") -> None:  # type: ignore[no-untyped-def]
    """(test_slurm_releases runs it on the newer Slurms.)"""
    # the warning puts gpu-spot in capacity backoff; this spot-only job waits it out
    c, _proxy = make_cluster(capacity={"unavailable_ttl_s": 5, "max_unavailable_ttl_s": 10},
                             slurm_root=slurm_root)
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 20")
    c.wait_job(job, {"RUNNING"}, 150)
    victim = expand(c.job(job)["NodeList"])[0]
    iid = _instance_of(c, victim)

    c.send_event("{this is not json")
    c.send_event(spot_warning("i-00000000000000fe"))  # not ours
    c.send_event(spot_warning(iid))

    wait_for("the job requeued once",
             lambda: c.job(job).get("Restarts") == "1", 60)
    info = c.node(victim)
    assert Why.INTERRUPTED.value in info.get("Reason", "") or "POWER" in info.get("State", ""), info
    wait_for(f"{iid} terminated", lambda: iid not in
             {i["InstanceId"] for i in c.cluster_instances(("pending", "running"))}, 120)
    state = c.wait_job(job, {"COMPLETED"}, 240)  # wait_job fails at once on FAILED
    assert state == "COMPLETED" and c.job(job)["Restarts"] == "1"

    events = c.events()
    kinds = [e["kind"] for e in events]
    assert kinds.count("event_dropped") == 2
    assert "job_requeued" in kinds and "node_evacuated" in kinds
    assert kinds.count("capacity_unavailable") == 1
    dropped = " ".join(e["message"] for e in events if e["kind"] == "event_dropped")
    assert "not JSON" in dropped and "i-00000000000000fe" in dropped
    # the interrupted node came back to service once powered down
    wait_for(f"{victim} undrained", lambda: "DRAIN" not in c.node(victim).get("State", ""), 120)


CHECKPOINTING_JOB = """#!/bin/bash
# saves its step on SIGUSR1 (as a training script does: PyTorch Lightning's SLURM plugin);
# a rerun that finds the save resumes from it
save={root}/ckpt-$SLURM_JOB_ID
if [ -f "$save" ]; then
    echo "resumed from $(cat "$save") after restart $SLURM_RESTART_COUNT" > "$save.resumed"
    exit 0
fi
trap 'echo "step $i" > "$save"' USR1
for i in $(seq 1 900); do sleep 1 & wait $!; done
"""


def test_a_spot_warning_signals_the_gang_which_saves_and_is_requeued_before_the_deadline(
        make_cluster) -> None:  # type: ignore[no-untyped-def]
    """The pool's grace_signal: on a spot warning the gang's batch script gets SIGUSR1 and
    writes its checkpoint; the daemon is SIGKILLed right after signalling (the warning's
    message not yet deleted, so it comes back); the restarted daemon signals no second time
    and requeues the gang at EC2's deadline less the margin; the rerun resumes from the
    checkpoint and completes. Restarts 1, never FAILED."""

    from slurmscale.cloud.eventbridge import EventKind, event_message
    from slurmscale.localcluster.options import PoolSpec

    margin = 80  # the requeue 40 s after the warning (EC2's deadline: 120 s after it)
    c, _proxy = make_cluster(
        pools=[PoolSpec("gpu-spot", "spot-", 4, extra={"grace_signal": {"margin_s": margin}}),
               PoolSpec("gpu-od", "od-", 2, capacity_type="on-demand")],
        capacity={"unavailable_ttl_s": 5, "max_unavailable_ttl_s": 10},
        cred_expire=15,  # the requeued job eligible again 15 s on (Slurm's default: 120)
        start_daemon=False)
    c.start_daemon({"SLURMSCALE_TEST_MODE": "1", "SLURMSCALE_CRASH_AT": "grace:after_signal"})
    script = c.root / "checkpointing.sh"
    script.write_text(CHECKPOINTING_JOB.format(root=c.root))
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--time=10", str(script))
    c.wait_job(job, {"RUNNING"}, 150)
    victim = expand(c.job(job)["NodeList"])[0]
    iid = _instance_of(c, victim)
    warned = datetime.now(UTC)
    c.send_event(event_message(EventKind.SPOT_WARNING, iid,
                               warned.isoformat(timespec="seconds").replace("+00:00", "Z"),
                               **{"instance-action": "terminate"}))
    save = c.root / f"ckpt-{job}"
    wait_for("the daemon killed right after the signal", lambda: not c.procs.running("daemon"),
             60)
    wait_for("the job's checkpoint written on its signal", save.exists, 20)
    assert c.job(job)["JobState"] == "RUNNING" and c.job(job)["Restarts"] == "0"
    c.start_daemon()  # without the crash point
    status = json.loads(c.cli("status", "--json").stdout)
    assert [(g["job_id"], g["node"]) for g in status["in_grace"]] == [(str(job), victim)]
    wait_for("the job requeued once", lambda: c.job(job).get("Restarts") == "1", 90)
    state = c.wait_job(job, {"COMPLETED"}, 240)  # wait_job fails at once on FAILED
    assert state == "COMPLETED" and c.job(job)["Restarts"] == "1"
    resumed = (c.root / f"ckpt-{job}.resumed").read_text()
    assert resumed.startswith("resumed from step ") and resumed.strip().endswith("restart 1")

    events = c.events()
    kinds = [e["kind"] for e in events]
    assert kinds.count("job_signalled") == 1, "signalled once, across the restart"
    assert kinds.count("job_requeued") == 1 and "job_left_in_grace" not in kinds
    (requeued,) = [datetime.fromisoformat(e["at"]) for e in events
                   if e["kind"] == "job_requeued"]
    after = (requeued - warned).total_seconds()
    assert 120 - margin - 1 <= after < 120, f"requeued {after:.1f}s after the warning"
    print(f"grace: SIGUSR1 written as {save.read_text().strip()!r}; requeued "
          f"{after:.1f}s after the warning (EC2's deadline {120 - after:.1f}s later); "
          f"{resumed.strip()}")



@pytest.mark.parametrize("ahead", [3600, -3600])
def test_a_host_clock_an_hour_off_aws_still_requeues_before_ec2s_deadline(
        make_cluster, ahead: int) -> None:  # type: ignore[no-untyped-def]
    """Issue 65: on a host whose clock was an hour behind (libfaketime), a spot warning's grace
    was written "requeued at ... (3648 s)" for a 2-minute notice. Here AWS's clock (the moto
    server's, under libfaketime) runs an hour ahead of the host's, as true time does on such a
    host: its answers' Date, its launch times and the warning's time. The daemon reads AWS's
    times by AWS's clock: the gang is requeued at EC2's deadline less the margin, and no
    instance is taken for a leak or a late boot on its launch time. An hour behind instead
    (the host ahead): the warning is not read as an hour old (requeued at once, its grace
    lost), nor a launch as an hour-old boot that never joined."""
    import time

    from slurmscale.cloud.eventbridge import EventKind, event_message
    from slurmscale.localcluster.options import PoolSpec

    margin = 80  # the requeue 40 s after the warning (EC2's deadline: 120 s after it)
    c, _proxy = make_cluster(
        pools=[PoolSpec("gpu-spot", "spot-", 4, extra={"grace_signal": {"margin_s": margin}}),
               PoolSpec("gpu-od", "od-", 2, capacity_type="on-demand")],
        capacity={"unavailable_ttl_s": 5, "max_unavailable_ttl_s": 10},
        cred_expire=15, aws_clock_ahead_s=ahead)
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--time=10", "--wrap",
                   "trap '' USR1; sleep 600")  # (stays on its node through its signal)
    c.wait_job(job, {"RUNNING"}, 150)
    iid = _instance_of(c, expand(c.job(job)["NodeList"])[0])
    warned = time.monotonic()
    aws_now = datetime.fromtimestamp(time.time() + ahead, UTC)
    c.send_event(event_message(EventKind.SPOT_WARNING, iid,
                               aws_now.isoformat(timespec="seconds").replace("+00:00", "Z"),
                               **{"instance-action": "terminate"}))
    wait_for("the job requeued", lambda: c.job(job).get("Restarts") == "1", 150)
    after = time.monotonic() - warned
    assert 120 - margin - 2 <= after < 120, f"requeued {after:.1f}s after the warning"
    events = c.events()
    (said,) = [e["message"] for e in events if e["kind"] == "job_signalled"]
    m = re.search(r"\((\d+)s, EC2's deadline", said)
    assert m is not None and int(m[1]) <= 120 - margin, said  # (before: 3648 s)
    kinds = {e["kind"] for e in events}
    assert not kinds & {"leak_terminated", "boot_failed", "node_replaced"}, kinds
