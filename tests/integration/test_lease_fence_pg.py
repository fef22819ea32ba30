"""A leader that loses its lease in the middle of a pass calls neither EC2 nor Slurm again, and
the standby that takes over carries on from the store: the same capacity backoff, the gang the
old leader left half-launched finished. On a real PostgreSQL (Debian's server, as in
production HA): the lease is its advisory lock, and the loss is the server ending the lock's
session (`pg_terminate_backend`, what a failover or an idle-session kill does)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from sqlalchemy import create_engine, text

from slurmscale.cloud.protocol import TAG_CLUSTER, TAG_NODE, CloudInstance, CloudProvider
from slurmscale.config_file import parse_config
from slurmscale.daemon.fence import Fence, LeaseLost
from slurmscale.daemon.leadership import PgAdvisoryLease, holder_silence
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.localcluster.postgres import DB_USER, LocalPostgres
from slurmscale.model import LaunchResult, SlurmNode
from slurmscale.slurm.protocol import SlurmClient
from slurmscale.spool import RequestKind, Spool
from slurmscale.store.repo import Store
from slurmscale.store.rows import InstanceRow, TimerKind
from tests.support.fakes import FakeCloud, FakeSlurm
from tests.support.postgres import start_postgres
from tests.unit.conftest import base_config

pytestmark = pytest.mark.slurm  # (root: the server runs as Debian's postgres user)

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


class Calls:
    """Every call made through the adapters it wraps, in order."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def wrap(self, target: object, name: str) -> Any:
        calls = self

        class Recorded:
            def __getattr__(self, attr: str) -> Any:
                value = getattr(target, attr)
                if not callable(value):
                    return value

                def call(*a: Any, **k: Any) -> Any:
                    calls.made.append(f"{name}.{attr}")
                    return value(*a, **k)
                return call
        return Recorded()


class CutOffCloud(FakeCloud):
    """EC2 as a fake; the moment a launch has answered, the server ends the leader's lease
    session (`cut`)."""

    cut: Any = None

    def launch(self, *a: Any, **k: Any) -> LaunchResult:
        out = super().launch(*a, **k)
        if self.cut is not None:
            self.cut()
        return out


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    pg = start_postgres("ss-pg-fence-")
    yield pg
    pg.remove()


def _resume(spool: Spool, nodes: list[str], job: int) -> None:
    rf = json.dumps({"jobs": [{"job_id": job, "nodes": ",".join(nodes)}],
                     "all_nodes": ",".join(nodes)})
    spool.put(spool.new_request(RequestKind.RESUME, nodes, ",".join(nodes), rf,
                                now=T0.timestamp()))


def test_a_leader_cut_off_mid_pass_stops_calling_and_the_standby_carries_on(
        postgres: LocalPostgres, tmp_path: Path) -> None:
    cfg = parse_config(base_config(spool_dir=str(tmp_path / "spool"),
                                   socket_path=str(tmp_path / "sock"),
                                   hook_log_file=str(tmp_path / "hooks.log"),
                                   store_url=postgres.url))
    spool = Spool(cfg.spool_dir)
    cloud, slurm, calls = CutOffCloud(), FakeSlurm(), Calls()
    admin = create_engine(postgres.url)

    def cut() -> None:
        with admin.connect() as c:
            ended = c.execute(text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'slurmscale-lease %'")).scalars().all()
        assert ended == [True]
        calls.made.append("-- the lease's session ended --")

    def leader(lease: PgAdvisoryLease, now: datetime) -> tuple[Reconciler, Store]:
        store = Store(cfg.store_url)
        store.upgrade()
        return Reconciler(cfg, store, cast(SlurmClient, calls.wrap(slurm, "Slurm")),
                          cast(CloudProvider, calls.wrap(cloud, "EC2")), clock=lambda: now,
                          fence=Fence(lease.held)), store

    lease_a = PgAdvisoryLease(cfg.store_url, cfg.cluster_name)
    assert lease_a.hold()
    a, store_a = leader(lease_a, T0)
    # a first pass: spot has no capacity, the pool goes into capacity backoff (on its row)
    cloud.give = 0
    _resume(spool, ["spot-1", "spot-2"], 1)
    a.tick()
    backoff = store_a.offering("gpu-spot")
    assert backoff is not None and backoff.until_s > T0.timestamp()
    # the next: an on-demand gang; its launch answers, then the lease's session ends
    cloud.give, cloud.cut = None, cut
    _resume(spool, ["od-1", "od-2"], 2)
    with pytest.raises(LeaseLost, match="lease is gone"):
        a.tick()
    after = calls.made[calls.made.index("-- the lease's session ended --") + 1:]
    assert after == [], f"called after the lease was lost: {after}"
    (gang,) = [g for g in store_a.gangs() if g.nodes == "od-[1-2]"]
    assert gang.status == "launching"  # recorded, launched, not finished: the next leader's
    store_a.close()

    # the standby takes the lock at once (the server let it go with the session)
    cloud.cut = None
    lease_b = PgAdvisoryLease(cfg.store_url, cfg.cluster_name)
    assert lease_b.hold()
    b, store_b = leader(lease_b, T0 + timedelta(seconds=30))
    again = store_b.offering("gpu-spot")
    assert again is not None
    assert (again.until_s, again.repeats) == (backoff.until_s, backoff.repeats)
    b.tick()
    done = store_b.get_gang(gang.id)
    assert done is not None and done.status == "launched"
    assert sorted(i.node for i in store_b.active_instances()) == ["od-1", "od-2"]
    assert len(cloud.running()) == 2  # the old leader's instances, not a second launch
    assert slurm.addresses["od-1"][0] == "10.0.0.1"
    store_b.close()
    lease_b.release()
    lease_a.release()
    admin.dispose()


def test_a_standby_taking_over_mid_grace_acts_when_the_leader_would_have(
        postgres: LocalPostgres, tmp_path: Path) -> None:
    """The leader saw a node drained by a health check at T0 (grace 300 s) and lost its lease
    at T0 + 100 s (the server ended its session) without noticing. The standby takes over:
    the old leader's writes are refused by the store (its epoch is no longer the latest),
    and the standby replaces the node at T0 + 300 s, the moment the leader would have, not a
    grace after the take-over: the grace timer is on a row."""
    url = postgres.url.rsplit("/", 1)[0] + "/midgrace"
    subprocess.run([str(postgres.bin / "createdb"), "-h", "127.0.0.1", "-p",
                    str(postgres.port), "-U", DB_USER, "midgrace"], check=True,
                   capture_output=True, text=True)
    d = base_config(spool_dir=str(tmp_path / "spool"), socket_path=str(tmp_path / "sock"),
                    hook_log_file=str(tmp_path / "hooks.log"), store_url=url)
    d["health"] = {"replace_on_reasons": ["NHC"], "grace_s": 300, "status_interval_s": 0}
    cfg = parse_config(d)
    iid = "i-0000000000000001"
    slurm = FakeSlurm(table={"spot-1": SlurmNode("spot-1", "IDLE+CLOUD+DRAIN", "10.0.0.1",
                                                 "spot-1", "NHC: gpu fell off the bus")})
    cloud = FakeCloud(instances={iid: CloudInstance(iid, "running", {
        TAG_CLUSTER: cfg.cluster_name, TAG_NODE: "spot-1"})})
    now = [T0]

    def leader(who: str) -> tuple[Reconciler, Store, PgAdvisoryLease]:
        lease = PgAdvisoryLease(url, cfg.cluster_name)
        assert lease.hold()
        store = Store(url)
        store.upgrade()
        store.lead(cfg.cluster_name, who, now[0])
        return Reconciler(cfg, store, slurm, cloud, clock=lambda: now[0],
                          fence=Fence(lease.held)), store, lease

    a, store_a, lease_a = leader("host-a:1")
    store_a.add_instances([InstanceRow(
        instance_id=iid, node="spot-1", pool="gpu-spot", gang_id="g1",
        instance_type="p5.48xlarge", lifecycle="spot", launch_template_version="3",
        subnet_id="subnet-1", state="running", launched_at=T0 - timedelta(hours=1))])
    a.tick()
    now[0] = T0 + timedelta(seconds=100)
    a.tick()
    assert slurm.powered_down == []
    admin = create_engine(postgres.url)
    with admin.connect() as c:
        assert c.execute(text(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name "
            "LIKE 'slurmscale-lease %' AND datname = 'midgrace'")).scalars().all() == [True]
    admin.dispose()

    b, store_b, lease_b = leader("host-b:2")
    with pytest.raises(LeaseLost, match="epoch 1"):  # (the old leader, not told yet)
        store_a.end_timers(TimerKind.UNHEALTHY, ["gpu-1"])
    now[0] = T0 + timedelta(seconds=299)
    b.tick()
    assert slurm.powered_down == []
    now[0] = T0 + timedelta(seconds=300)
    b.tick()
    assert [names for names, _ in slurm.powered_down] == [["spot-1"]]
    (r,) = store_b.replacements()
    assert r.detected_at.timestamp() == T0.timestamp()
    for s in (store_a, store_b):
        s.close()
    lease_b.release()
    lease_a.release()


FROZEN_LEADER = """
import sys, time
from slurmscale.daemon.leadership import PgAdvisoryLease, holder_silence
lease = PgAdvisoryLease(sys.argv[1], "frozen", stale_s=6)
assert lease.hold()
print("leading", flush=True)
while lease.held():  # (a pass that asks every 8 s: only the lease's own beat says more)
    time.sleep(8)
print("stood by", flush=True)
"""


def test_a_frozen_leader_is_cut_off_and_a_standby_leads(postgres: LocalPostgres) -> None:
    """Issue 65: a SIGSTOPped leader kept its lease session, and so the lock, for as long as
    it was frozen; the standby never led. Now its lease beats from a thread of its own: while
    it runs (however long its passes wait) the standby stays standby; frozen longer than
    leader_stale_s, its session is ended by the standby, which leads, and the thawed leader's
    next question fails: it stands by."""
    import os
    import signal
    import sys
    import time

    child = subprocess.Popen([sys.executable, "-c", FROZEN_LEADER, postgres.url],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "leading\n"
        standby = PgAdvisoryLease(postgres.url, "frozen", stale_s=6)
        end = time.monotonic() + 10  # running: never cut off, though 6 s pass
        while time.monotonic() < end:
            assert not standby.hold(), "a leader that runs was cut off"
            silent = holder_silence(postgres.url, "frozen")
            assert silent is not None and silent < 3, silent  # (what `status` reads)
            time.sleep(0.5)
        os.kill(child.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        time.sleep(3)
        assert (holder_silence(postgres.url, "frozen") or 0) >= 2
        while not standby.hold():
            assert time.monotonic() - frozen_at < 20, "the frozen leader was never cut off"
            time.sleep(0.5)
        assert time.monotonic() - frozen_at >= 5  # (its last beat was up to 1 s before)
        assert standby.took_over is not None and "was silent" in standby.took_over
        os.kill(child.pid, signal.SIGCONT)
        assert child.stdout.readline() == "stood by\n"
        assert child.wait(timeout=10) == 0
        assert standby.held()
        standby.release()
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait()


def test_a_pass_that_hangs_gives_its_lease_up(postgres: LocalPostgres) -> None:
    """A pass running longer than leader_stale_s (hung in a call): the leader's beat stops and
    its lease's session closes, so a standby leads at once, and the hung pass's next outside
    call finds the lease gone."""
    import time

    leader = PgAdvisoryLease(postgres.url, "hung", stale_s=6)
    standby = PgAdvisoryLease(postgres.url, "hung", stale_s=6)
    assert leader.hold()
    leader.busy(True)
    started = time.monotonic()
    while not standby.hold():
        assert time.monotonic() - started < 15, "the hung pass kept its lease"
        time.sleep(0.5)
    assert time.monotonic() - started >= 5
    assert standby.took_over is None  # (given up, not cut off)
    assert not leader.held()
    leader.busy(False)
    leader.release()
    standby.release()
