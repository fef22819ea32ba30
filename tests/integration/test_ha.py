"""HA on PostgreSQL: two daemons share one store; one leads (advisory lock), the other stands
by. Killing the leader in the middle of a launch hands over within two ticks, and the new
leader recovers that launch instead of launching again. The database restarting costs a
pause, never a termination, and the daemon catches up."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from slurmscale.api_client import call
from slurmscale.localcluster.postgres import LocalPostgres
from slurmscale.localcluster.procs import wait_for
from tests.support.postgres import start_postgres

pytestmark = pytest.mark.slurm

TICK = 3.0


@pytest.fixture
def postgres() -> Iterator[LocalPostgres]:
    pg = start_postgres("ss-pg-")
    yield pg
    pg.remove()


def _role(sock: Path) -> str | None:
    code, body = call(str(sock), "GET", "/v1/health", timeout=2)
    return body.get("role") if code == 200 else None


def _at(event: dict) -> float:
    return datetime.fromisoformat(event["at"]).timestamp()


def test_killing_the_leader_mid_launch_hands_over_without_a_second_launch(
        make_cluster, postgres: LocalPostgres) -> None:
    # daemon A leads and dies with SIGKILL right after CreateFleet, before recording it
    c, proxy = make_cluster(store_url=postgres.url, tick_seconds=TICK,
                            daemon_env={"SLURMSCALE_TEST_MODE": "1",
                                        "SLURMSCALE_CRASH_AT": "launch:after_fleet"})
    sock_a = c.root / "run" / "slurmscale.sock"
    sock_b = c.start_daemon(name="daemon-b")
    assert _role(sock_a) == "leader" and _role(sock_b) == "standby"

    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 2")
    wait_for("the leader killed after CreateFleet", lambda: not c.procs.running("daemon"), 120)
    # the crash point fires as CreateFleet returns, so the request's arrival is just before the
    # kill: the handover measured from it is an upper bound (events --json times to the ms)
    killed_at = proxy.fleet_calls()[0].at
    wait_for("the standby to take over", lambda: _role(sock_b) == "leader", 6 * TICK)

    assert c.wait_job(job, {"COMPLETED"}, 240) == "COMPLETED"
    assert len(proxy.fleet_calls()) == 1, "the new leader recovered the launch, no second one"
    events = c.events()
    kinds = [e["kind"] for e in events]
    assert "launch_recovered" in kinds
    took_over = [e for e in events if e["kind"] == "leader_acquired"][-1]
    handover = _at(took_over) - killed_at
    assert 0 < handover <= 2 * TICK, f"handover took {handover:.1f}s (tick {TICK}s)"

    # the old leader comes back as the standby: the lease is B's until B dies
    c.start_daemon()
    wait_for("the restarted daemon to tick", lambda: _role(sock_a) == "standby", 3 * TICK)
    assert _role(sock_b) == "leader"
    assert kinds.count("leader_acquired") == 2
    print(f"HA: leader SIGKILLed after CreateFleet, standby led {handover:.1f}s later "
          f"(tick {TICK:.0f}s), 1 CreateFleet, job COMPLETED")


SECRET = "s3cr3t-Pw0rd"


def test_the_database_restarting_pauses_the_daemon_and_terminates_nothing(
        make_cluster, postgres: LocalPostgres, request: pytest.FixtureRequest) -> None:
    # the test server trusts loopback, so any password works: it is here to be looked for in
    # every log and output afterwards, connection failures included. It reaches the daemon
    # the recommended way, from a 0600 file, and goes into every connection URL from there.
    # (the daemon runs as SlurmUser, as the shipped unit runs it: the file is that user's)
    secret_dir = Path(tempfile.mkdtemp(prefix="ss-secret-"))
    request.addfinalizer(lambda: shutil.rmtree(secret_dir, ignore_errors=True))
    os.chmod(secret_dir, 0o755)
    secret_file = secret_dir / "db-password"
    secret_file.write_text(SECRET + "\n")
    os.chmod(secret_file, 0o600)
    slurm = pwd.getpwnam("slurm")
    os.chown(secret_file, slurm.pw_uid, slurm.pw_gid)
    c, proxy = make_cluster(store_url=postgres.url, tick_seconds=TICK,
                            extra_config={"store_password_file": str(secret_file)})
    sock = c.root / "run" / "slurmscale.sock"
    first = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 600")
    c.wait_job(first, {"RUNNING"}, 150)
    running = {i["InstanceId"] for i in c.cluster_instances()}
    assert len(running) == 2

    postgres.stop()
    wait_for("the daemon to stand by without its database",
             lambda: _role(sock) == "standby", 6 * TICK)
    # a request arrives while the store is down: the hook spools it, nothing is lost
    second = c.sbatch("-N", "1", "--gres=gpu:8", "-p", "gpu-od", "--wrap", "sleep 1")
    hook_log = c.root / "log" / "slurmscale-hooks.log"
    wait_for("the resume hook to spool the request",
             lambda: hook_log.exists() and "od-1" in hook_log.read_text(), 60)
    assert c.procs.running("daemon"), "the daemon died with its database"
    assert {i["InstanceId"] for i in c.cluster_instances()} == running, \
        "nothing terminated while the store was down"
    assert len(proxy.fleet_calls()) == 1, "nothing launched without the store"

    postgres.restart()
    wait_for("the daemon to lead again", lambda: _role(sock) == "leader", 6 * TICK)
    assert c.wait_job(second, {"COMPLETED"}, 180) == "COMPLETED"
    assert c.job_state(first) == "RUNNING"
    assert running <= {i["InstanceId"] for i in c.cluster_instances()}
    c.slurm("scancel", str(first))
    outputs = [c.cli(*args).stdout for args in (("status", "--json"), ("events", "--json"),
                                                 ("status",), ("plan",))]
    logs = [f.read_text(errors="replace") for f in (c.root / "log").iterdir() if f.is_file()]
    daemon_log = (c.root / "log" / "slurmscale-daemon.log").read_text()
    assert "lost the leader lease" in daemon_log, "the outage is in the log searched"
    leaked = [t[:200] for t in outputs + logs if SECRET in t]
    assert not leaked, f"the store password appeared in: {leaked}"
    print("database restart: daemon stood by, 0 instances terminated, the request spooled "
          "meanwhile launched after the restart")

