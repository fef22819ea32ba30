"""A step of the host's clock under load (issue 30, item 7): the daemon's timers run on its
steady time (slurmscale/timeframe.py), and Slurm's and the hooks' times, written by the host's
clock, are read into it. The same scripted hour runs three times: the host's clock steady, one
hour ahead from minute 5 on, one hour back from minute 5 on. Slurm's times (LastBusyTime, the
hooks' request times) follow the host's clock in each run, as on a host where slurmctld and
the daemon share it. Real Slurm is not used: stepping this machine's clock would step every
process on it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from slurmscale import timeframe
from slurmscale.audit import Kind
from slurmscale.config_file import parse_config
from slurmscale.daemon.passes.graces import Graces
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.model import QueueJob, SlurmNode
from slurmscale.spool import RequestKind, Spool
from slurmscale.store.memory import MemoryStore
from slurmscale.store.repo import Store
from slurmscale.store.rows import GraceRow, PreemptionCause
from slurmscale.timeframe import STEP_S, Frame
from tests.support.fakes import FakeCloud, FakeSlurm
from tests.unit.conftest import base_config

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC).timestamp()
TICK_S = 10.0
HOUR = 3600.0


def _node(name: str, state: str, last_busy: str = "") -> SlurmNode:
    return SlurmNode(name, state, name, name, partitions=("gpu-spot",), last_busy=last_busy)


MIN_IDLE_S = 120.0


def run(tmp_path, step_at_s: float | None, step_s: float, minutes: int = 60
        ) -> list[tuple[float, str, tuple[str, ...]]]:
    """The scripted hour; returns what the daemon did and when (true seconds from the start):
    Slurm calls and EC2 launches and terminations."""
    d = base_config(
        spool_dir=str(tmp_path / "spool"), socket_path=str(tmp_path / "sock"),
        hook_log_file=str(tmp_path / "hooks.log"),
        store_url=f"sqlite:///{tmp_path / 'state.db'}")
    for pool in d["pools"]:  # a release waits out an idle time that a step could cut short
        pool["policy"] = {"min_idle_s": MIN_IDLE_S}
    cfg = parse_config(d)
    store = Store(cfg.store_url)
    store.upgrade()
    true = [T0]

    def wall() -> float:  # the host's clock
        stepped = step_at_s is not None and true[0] - T0 >= step_at_s
        return true[0] + (step_s if stepped else 0.0)

    def host_text(t: float | None = None) -> str:  # as Slurm prints the host's time
        return datetime.fromtimestamp(wall() if t is None else t).isoformat(timespec="seconds")

    frame = Frame(wall=wall, mono=lambda: true[0] - T0 + 1000.0)
    before = timeframe.install(frame)
    try:
        cloud, slurm = FakeCloud(), FakeSlurm()
        for i in range(1, 9):
            slurm.table[f"spot-{i}"] = _node(f"spot-{i}", "IDLE+CLOUD+POWERED_DOWN")
        r = Reconciler(cfg, store, slurm, cloud,
                       clock=lambda: datetime.fromtimestamp(frame.now(), UTC))
        spool = Spool(cfg.spool_dir)
        done: list[tuple[float, str, tuple[str, ...]]] = []
        seen_calls = seen_launches = 0
        seen_gone: set[str] = set()

        def resume(job: int, nodes: list[str]) -> None:
            rf = json.dumps({"jobs": [{"job_id": job, "nodes": ",".join(nodes)}],
                             "all_nodes": ",".join(nodes)})
            spool.put(spool.new_request(RequestKind.RESUME, nodes, ",".join(nodes), rf,
                                        now=wall()))
            for n in nodes:
                slurm.table[n] = _node(n, "IDLE+CLOUD+POWERING_UP")

        def run_job(job: str, nodes: list[str]) -> None:
            for n in nodes:
                slurm.table[n] = _node(n, "ALLOCATED+CLOUD")
            slurm.queue.append(QueueJob(job, ("gpu-spot",), len(nodes), 8, 3600, host_text(),
                                        "", 1, "u", "RUNNING",
                                        nodelist=",".join(nodes)))

        def end_job(job: str, nodes: list[str]) -> None:
            slurm.queue = [j for j in slurm.queue if j.job_id != job]
            for n in nodes:
                if "POWERED_DOWN" not in slurm.table[n].state:
                    slurm.table[n] = _node(n, "IDLE+CLOUD", host_text())

        gang1, gang2, gang3 = ([f"spot-{i}" for i in range(1, 5)], ["spot-5", "spot-6"],
                               ["spot-7", "spot-8"])
        # the step comes at 300 s: gang 1's nodes are idle across it (idle timers), gang
        # 2's boot across it (the join timer), gang 3's request comes after it
        script = {
            0.0: lambda: resume(1, gang1),
            30.0: lambda: run_job("1", gang1),
            250.0: lambda: end_job("1", gang1),
            200.0: lambda: resume(2, gang2),
            350.0: lambda: run_job("2", gang2),
            500.0: lambda: end_job("2", gang2),
            1500.0: lambda: resume(3, gang3),
            1530.0: lambda: run_job("3", gang3),
            1600.0: lambda: end_job("3", gang3),
        }
        for k in range(int(minutes * 60 / TICK_S)):
            true[0] = T0 + k * TICK_S
            at = true[0] - T0
            if at in script:
                script[at]()
            r.tick()
            for op, args in slurm.calls[seen_calls:]:
                done.append((at, op, tuple(args)))
            for launch in cloud.launches[seen_launches:]:
                done.append((at, "launch", (launch["pool"], str(launch["count"]))))
            gone = {i.instance_id for i in cloud.instances.values() if i.state == "terminated"}
            done += [(at, "terminate", (i,)) for i in sorted(gone - seen_gone)]
            seen_calls, seen_launches, seen_gone = len(slurm.calls), len(cloud.launches), gone
        return done
    finally:
        timeframe.install(before)
        store.close()


def test_a_step_forward_of_an_hour_changes_nothing_the_daemon_does(tmp_path) -> None:  # type: ignore[no-untyped-def]
    steady = run(tmp_path / "a", None, 0.0)
    ahead = run(tmp_path / "b", 300.0, HOUR)
    assert any(op == "power_down" for _, op, _ in steady), "the script releases idle nodes"
    assert any(op == "launch" for _, op, _ in steady)
    assert ahead == steady


def test_a_step_back_of_an_hour_does_nothing_earlier_or_more(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Backwards, the last hour before the step and the first after it look alike: a time
    from before the step is read as the newer one, so a node idle since then is released
    later (by up to the step), none before its true idle time allows; every launch is the
    same, at the same time, and nothing is requeued or replaced."""
    steady = run(tmp_path / "a", None, 0.0)
    back = run(tmp_path / "b", 300.0, -HOUR, minutes=130)
    assert [d for d in back if d[1] == "launch"] == [d for d in steady if d[1] == "launch"]
    assert not [d for d in back if d[1] in ("requeue", "power_down_force")]

    def released(done: list[tuple[float, str, tuple[str, ...]]]) -> dict[str, float]:
        out: dict[str, float] = {}
        for at, op, args in done:
            for node in args if op == "power_down" else ():
                out.setdefault(node, at)
        return out
    was, now = released(steady), released(back)
    assert set(now) == set(was), "every node released, none more"
    # none before it has been idle min_idle_s by true time
    idle_from = {**dict.fromkeys(("spot-1", "spot-2", "spot-3", "spot-4"), 250.0),
                 "spot-5": 500.0, "spot-6": 500.0, "spot-7": 1600.0, "spot-8": 1600.0}
    assert all(now[n] >= idle_from[n] + MIN_IDLE_S for n in was), now
    # those idle across the step: later by up to the step; the others as without it
    assert all(now[n] - was[n] <= HOUR + 600 for n in was), (was, now)


def test_the_clock_without_steps_is_the_wall_clock_and_follows_its_slew() -> None:
    t = [T0]
    m = [50.0]
    f = Frame(wall=lambda: t[0], mono=lambda: m[0])
    assert f.now() == T0
    t[0] += 10.5
    m[0] += 10.0  # NTP slewing the wall clock: followed, no era
    assert f.now() == T0 + 10.5 and not f.eras
    assert f.from_host(T0) == T0 and f.to_host(T0) == T0


@given(st.lists(st.tuples(st.floats(1, 600), st.floats(-2 * HOUR, 2 * HOUR)), max_size=5))
def test_a_time_written_after_a_forward_step_is_read_exactly(steps: list[tuple[float, float]]
                                                               ) -> None:
    """Forward steps: every host time, written in any era, reads back as the steady time at
    which it was written. (Backward steps: such a time reads no older than it is.)"""
    true, m = [T0], [0.0]
    offset = [0.0]
    f = Frame(wall=lambda: true[0] + offset[0], mono=lambda: m[0])
    written: list[tuple[float, float]] = []  # (host time, steady time when written)
    for gap, step in steps:
        true[0] += gap
        m[0] += gap
        written.append((true[0] + offset[0], f.now()))
        if abs(step) > STEP_S:
            offset[0] += step
            f.now()
    for host, steady in written:
        got = f.from_host(host)
        if all(s >= -STEP_S for _, s in steps):
            assert abs(got - steady) < 1e-6, (host, steady, got)
        else:
            assert got >= steady - 1e-6, "read younger, never older"


def test_aws_event_times_are_read_as_true_times_into_the_steady_time() -> None:
    """An event's time (a block's Expiration Warning, AWS Health's start) is AWS's true time:
    after the host's clock stepped an hour ahead, it is read an hour back into the daemon's
    steady time, as EC2's reservation and launch times are."""
    from slurmscale.cloud.eventbridge import aws_time

    t = [T0]
    f = Frame(wall=lambda: t[0], mono=lambda: 0.0)
    before = timeframe.install(f)
    try:
        assert aws_time("2026-11-29T12:00:00Z") == T0
        t[0] += HOUR  # (the host's clock steps: monotonic unmoved)
        f.now()
        assert aws_time("2026-11-29T12:00:00Z") == T0 - HOUR
        assert aws_time("Sun, 29 Nov 2026 12:00:00 GMT") == T0 - HOUR
    finally:
        timeframe.install(before)


def test_the_audit_log_is_in_the_hosts_time_after_a_step_while_the_timers_are_not(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A VM paused and resumed steps its wall clock forward (seen in CI: +4 s, then +11 s):
    the daemon's timers run on unmoved, but the audit log is read beside slurmctld's log, so
    its times are the host's clock of the moment, not the steady time that lags it."""
    d = base_config(
        spool_dir=str(tmp_path / "spool"), socket_path=str(tmp_path / "sock"),
        hook_log_file=str(tmp_path / "hooks.log"),
        store_url=f"sqlite:///{tmp_path / 'state.db'}")
    cfg = parse_config(d)
    store = Store(cfg.store_url)
    store.upgrade()
    wall, mono = [T0], [1000.0]
    frame = Frame(wall=lambda: wall[0], mono=lambda: mono[0])
    before = timeframe.install(frame)
    try:
        r = Reconciler(cfg, store, FakeSlurm(), FakeCloud())  # the daemon's own clock
        wall[0] += 15.0 + 10.0  # paused 15 s, then 10 s on
        mono[0] += 10.0
        r.tick()
        r.event(Kind.LAUNCH_REQUESTED, "a launch after the step")
        assert r.clock().timestamp() == T0 + 10.0, "the timers' steady time: unmoved"
        events = store.events(datetime.fromtimestamp(T0 - 60, UTC), 10)
        kinds = {e.kind: e.at.timestamp() for e in events}
        assert kinds[Kind.CLOCK_STEP] == T0 + 25.0
        assert kinds[Kind.LAUNCH_REQUESTED] == T0 + 25.0
    finally:
        timeframe.install(before)
        store.close()


# --- AWS's deadlines across a host clock that is off (issue 65, item 6) ---------------------


def _frame(host_minus_true: float, true_now: list[float]) -> Frame:
    """A daemon's frame on a host whose clock reads `host_minus_true` off true time."""
    f = Frame(wall=lambda: true_now[0] + host_minus_true, mono=lambda: true_now[0] - T0)
    f.learns_true = True
    return f


def _grace(requeue_at: float, signalled_at: float) -> GraceRow:
    return GraceRow(job_id="7", node="spot-1", instance_id="i-1", pool="gpu-spot",
                    signal="USR1", signalled_at=datetime.fromtimestamp(signalled_at, UTC),
                    requeue_at=datetime.fromtimestamp(requeue_at, UTC), state="signalled",
                    cause=PreemptionCause.INTERRUPTED.value, kind="spot")


def _graces(cfg_store: MemoryStore) -> Graces:
    from slurmscale.daemon.executor.effects import Effects

    cfg = parse_config(base_config())
    event = lambda *a, **k: None  # noqa: E731
    return Graces(cfg, cfg_store, Effects(FakeSlurm(), cfg_store, event), event)


def test_aws_answers_give_true_time_on_a_host_an_hour_off() -> None:
    """A host clock an hour behind (stepped before the daemon started: the steady frame
    cannot see it): a spot warning issued now is read as now once an AWS answer has given
    true time, not an hour ahead (before: a 2-minute notice became a 3,648 s grace)."""
    true_now = [T0]
    f = _frame(-HOUR, true_now)
    before = timeframe.install(f)
    try:
        now = f.now()
        assert abs(f.from_true(T0) - (now + HOUR)) < 1  # unmeasured: the host's clock
        f.learn_true(T0)  # an answer's Date header
        assert abs(f.from_true(T0 + 120) - (now + 120)) <= 1
        learnt = f.true_offset
        true_now[0] += 0.9
        f.learn_true(T0)  # (a second's jitter of the header is not taken as a step)
        assert f.true_offset == learnt
        right = _frame(0.0, true_now)  # a host that agrees with AWS to a second
        right.learn_true(true_now[0] - 0.7)
        assert right.true_offset is None  # (its own clock kept: no Date-header rounding)
        f.learns_true = False  # (a command, a test: nothing learnt)
        f.learn_true(T0 + HOUR)
        assert f.true_offset == learnt
    finally:
        timeframe.install(before)


def test_a_warning_never_gets_more_than_ecs_notice_from_the_pass_that_reads_it() -> None:
    """Unmeasured host skew (no AWS answer yet): a warning stamped an hour ahead of the
    host's clock still leaves at most 120 s."""
    from slurmscale.cloud.eventbridge import Ec2Event, EventKind
    from slurmscale.daemon.passes.evacuation import Evacuate, on_event
    from slurmscale.store.rows import InstanceRow

    now = datetime.fromtimestamp(T0, UTC)
    ahead = datetime.fromtimestamp(T0 + HOUR, UTC).isoformat().replace("+00:00", "Z")
    inst = InstanceRow(instance_id="i-1", node="spot-1", pool="gpu-spot", gang_id="g",
                       instance_type="p5.48xlarge", lifecycle="spot",
                       launch_template_version="3", state="running", launched_at=now)
    out = on_event(Ec2Event(kind=EventKind.SPOT_WARNING, instance_id="i-1", time=ahead),
                   inst, now)
    assert isinstance(out, Evacuate) and out.deadline is not None
    assert (out.deadline - now).total_seconds() == 120


def test_a_grace_read_after_a_restart_across_a_step_keeps_its_deadline() -> None:
    """The daemon that signalled ran on a right clock; the host's clock was then set an hour
    back and the daemon restarted: its grace, stored in true time, is read 50 s ahead, not
    3,650 s (before); unmeasured, it is clamped to EC2's notice from now."""
    store = MemoryStore()
    true_now = [T0]
    before = timeframe.install(_frame(0.0, true_now))
    try:
        g = _grace(T0 + 50, T0 - 60)
        from slurmscale.daemon.passes.graces import stored
        g.requeue_at, g.signalled_at = stored(g.requeue_at), stored(g.signalled_at)
        store.put_grace(g)
        restarted = _frame(-HOUR, true_now)  # a new process on the corrected clock
        timeframe.install(restarted)
        now = datetime.fromtimestamp(restarted.now(), UTC)
        (clamped,) = _graces(store).open(now)  # no AWS answer yet
        assert (clamped.requeue_at - now).total_seconds() == 120
        restarted.learn_true(T0)
        (read,) = _graces(store).open(now)
        assert abs((read.requeue_at - now).total_seconds() - 50) <= 1
    finally:
        timeframe.install(before)
