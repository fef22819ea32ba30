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
import yaml

from slurmscale.api_client import call
from slurmscale.localcluster.cluster import LocalCluster
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


def _statements(pg: LocalPostgres, session: str, after: float) -> list[str]:
    """The statement log's lines (`log_statement = mod`: every write, DDL included) from
    sessions whose application_name ends in `session`, logged after `after` (epoch s)."""
    found = []
    for line in (pg.root / "postgres.out").read_text(errors="replace").splitlines():
        stamp, _, rest = line.partition(" [")
        name, _, said = rest.partition("] ")
        try:
            at = float(stamp)
        except ValueError:
            continue  # (a statement's own continuation lines)
        if name.endswith(session) and at > after and said.startswith(
                ("LOG:  statement:", "LOG:  execute")):
            found.append(line)
    return found


def _recording_slurm_calls(c: LocalCluster) -> Path:
    """Every Slurm command the daemons run, recorded (when, the calling daemon's PID, what)
    by a `slurm.command_prefix` that then runs the real command."""
    record = c.root / "slurm-calls.log"
    record.touch(mode=0o666)
    os.chmod(record, 0o666)  # (the daemons run as SlurmUser)
    wrapper = c.root / "record-slurm"
    wrapper.write_text(f'#!/bin/sh\necho "$(date +%s.%N) $PPID $*" >> {record}\nexec "$@"\n')
    os.chmod(wrapper, 0o755)
    data = yaml.safe_load(c.cfg_path.read_text())
    data["slurm"]["command_prefix"] = [str(wrapper), *data["slurm"]["command_prefix"]]
    c.cfg_path.write_text(yaml.safe_dump(data, sort_keys=False))
    return record


def _slurm_calls(record: Path, pid: int, after: float) -> list[str]:
    return [line for line in record.read_text().splitlines()
            if line.split()[1] == str(pid) and float(line.split()[0]) > after]


def test_a_leader_frozen_in_a_spot_grace_is_replaced_and_the_gang_requeued_in_time(
        make_cluster, postgres: LocalPostgres) -> None:
    """Issue 65: a SIGSTOPped leader kept its PostgreSQL session, so the lock: the standby never
    led and the spot warning that came meanwhile went unhandled past EC2's deadline. Here the
    leader is frozen for 60 s as the warning comes: the standby cuts its session off after
    `leader_stale_s`, leads, signals the gang and requeues it at EC2's deadline less the margin;
    thawed, the old leader stands by. What it does then is read where it would show: the
    database's statement log (every write, by session name), the EC2 proxy's record (every
    call, by user agent) and a record of every Slurm command (by the calling PID) hold nothing
    of it after the thaw, while all three hold its work before the freeze and the new
    leader's after (so they would show it)."""
    import signal
    import time
    from datetime import UTC

    import psycopg

    from slurmscale.cloud.eventbridge import EventKind, event_message
    from slurmscale.hostlists import expand
    from slurmscale.localcluster.options import PoolSpec
    from tests.integration.test_interruptions import _instance_of

    with psycopg.connect(postgres.url.replace("postgresql+psycopg", "postgresql"),
                         autocommit=True) as db:
        db.execute("ALTER SYSTEM SET log_statement = 'mod'")
        db.execute("ALTER SYSTEM SET log_line_prefix = '%n [%a] '")
        db.execute("SELECT pg_reload_conf()")
    margin, stale = 80, 9.0  # the requeue 40 s after the warning (EC2's deadline: 120 s)
    c, proxy = make_cluster(
        store_url=postgres.url, tick_seconds=TICK, daemon={"leader_stale_s": stale},
        pools=[PoolSpec("gpu-spot", "spot-", 4, extra={"grace_signal": {"margin_s": margin}}),
               PoolSpec("gpu-od", "od-", 2, capacity_type="on-demand")],
        capacity={"unavailable_ttl_s": 5, "max_unavailable_ttl_s": 10}, cred_expire=15,
        start_daemon=False)
    slurm_calls = _recording_slurm_calls(c)
    sock_a = c.start_daemon()
    wait_for("the first daemon to lead", lambda: _role(sock_a) == "leader", 4 * TICK)
    sock_b = c.start_daemon(name="daemon-b")
    assert _role(sock_a) == "leader" and _role(sock_b) == "standby"
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--time=10", "--wrap",
                   "trap '' USR1; sleep 600")  # (stays on its node through its signal)
    c.wait_job(job, {"RUNNING"}, 150)
    iid = _instance_of(c, expand(c.job(job)["NodeList"])[0])
    pid_a, pid_b = (c.procs.procs[n].pid for n in ("daemon", "daemon-b"))
    a, b = f":{pid_a}", f":{pid_b}"
    agent = {a: f"({os.uname().nodename}{a})", b: f"({os.uname().nodename}{b})"}
    os.kill(pid_a, signal.SIGSTOP)
    frozen = time.time()
    try:
        warned = time.monotonic()
        c.send_event(event_message(EventKind.SPOT_WARNING, iid,
                                   datetime.now(UTC).isoformat(timespec="seconds")
                                   .replace("+00:00", "Z"), **{"instance-action": "terminate"}))
        wait_for("the standby to lead", lambda: _role(sock_b) == "leader", stale + 4 * TICK)
        led = time.monotonic() - warned
        wait_for("the gang requeued", lambda: c.job(job).get("Restarts") == "1", 120)
        requeued = time.monotonic() - warned
        while time.monotonic() - warned < 60:  # frozen 60 s in all
            time.sleep(1)
    finally:
        os.kill(pid_a, signal.SIGCONT)
        thawed = time.time()
    wait_for("the thawed leader to stand by", lambda: _role(sock_a) == "standby", 6 * TICK)
    assert led <= stale + 3 * TICK, f"the standby led {led:.1f}s after the freeze"
    assert 120 - margin - 2 <= requeued < 120, f"requeued {requeued:.1f}s after the warning"
    wait_for("the new leader's writes and calls after the thaw", lambda: (
        _statements(postgres, b, thawed + 2 * TICK)
        and any(x.agent.endswith(agent[b]) for x in proxy.calls if x.at > thawed + 2 * TICK)
        and _slurm_calls(slurm_calls, pid_b, thawed + 2 * TICK)), 6 * TICK)
    # (the thawed daemon's next pass would have come by now: it stood by instead)
    assert (_statements(postgres, a, 0) and _slurm_calls(slurm_calls, pid_a, 0)
            and any(x.agent.endswith(agent[a]) for x in proxy.calls if x.at < frozen)), \
        "the records miss the leader's work before the freeze"
    wrote = _statements(postgres, a, frozen)
    called = [f"{x.action} at thaw{x.at - thawed:+.1f}s" for x in proxy.calls
              if x.agent.endswith(agent[a]) and x.at > frozen]
    ran = _slurm_calls(slurm_calls, pid_a, frozen)
    assert not wrote, f"the thawed leader wrote to the store: {wrote}"
    assert not called, f"the thawed leader called EC2: {called}"
    assert not ran, f"the thawed leader ran Slurm commands: {ran}"
    kinds = [e["kind"] for e in c.events()]
    assert kinds.count("job_signalled") == 1 and kinds.count("job_requeued") == 1, kinds
    assert c.job(job).get("Restarts") == "1" and _role(sock_b) == "leader"
    took = [e["message"] for e in c.events() if e["kind"] == "leader_acquired"][-1]
    assert "was silent" in took, took
    print(f"HA: leader frozen; standby led {led:.1f}s after, requeued {requeued:.1f}s after "
          "the warning; the thawed leader stood by: 0 store writes, 0 EC2 calls, 0 Slurm "
          "commands after it")
