"""The job's signal before an interruption's requeue (issue 43, item 1): a pool with a
`grace_signal` signals the jobs on a node EC2 warned it takes back, and requeues what is
still there at the warning's deadline less the margin; a job that leaves first is not
requeued; the grace is in the store, so a daemon killed during it signals once and requeues
on time after its restart."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from slurmscale.config import GraceSignal
from slurmscale.daemon.passes.evacuation import Lost
from slurmscale.daemon.passes.interruptions import InterruptionPass
from slurmscale.lifecycles import IllegalTransition
from slurmscale.model import SlurmNode
from slurmscale.slurm.reasons import Why
from slurmscale.store.rows import GraceRow, PreemptionCause, utc
from tests.support.eventbridge_messages import spot_warning
from tests.support.fakes import FakeSlurm, pass_context
from tests.unit.test_interruptions import T0, spot_world

MARGIN_S = 40.0
REQUEUE_AT = T0 + timedelta(seconds=120 - MARGIN_S)  # the warning's time is T0


@pytest.fixture
def graced(tmp_path):  # type: ignore[no-untyped-def]
    cfg, store, slurm, q = spot_world(tmp_path, grace_signal={"margin_s": MARGIN_S})
    events: list[tuple[str, str]] = []

    def new_pass() -> InterruptionPass:  # (a daemon's, or the one after its restart)
        return InterruptionPass(pass_context(cfg, store, slurm,
                                             lambda k, m, **_: events.append((k, m)), queue=q))
    yield new_pass, slurm, q, store, events
    store.close()


def ops(slurm: FakeSlurm) -> list[str]:
    return [c[0] for c in slurm.calls]


def test_a_job_still_there_at_the_deadline_less_the_margin_is_signalled_then_requeued(
        graced) -> None:  # type: ignore[no-untyped-def]
    new_pass, slurm, q, store, events = graced
    p = new_pass()
    q.bodies.append(spot_warning("i-0000000000000001"))
    p.run(T0 + timedelta(seconds=2))
    assert ("signal", ["42", "USR1", "batch"]) in slurm.calls
    assert ops(slurm).index("drain") < ops(slurm).index("signal")
    assert "requeue" not in ops(slurm) and not slurm.powered_down
    assert q.deleted == ["0"], "handled: the store carries the grace on"
    assert [k for k, _ in events] == ["job_signalled"]
    assert "requeued at 12:01:20Z (78s" in events[0][1]
    p.run(REQUEUE_AT - timedelta(seconds=1))
    assert "requeue" not in ops(slurm)
    p.run(REQUEUE_AT)
    assert ("requeue", ["42"]) in slurm.calls and ops(slurm).count("signal") == 1
    assert [k for k, _ in events] == ["job_signalled", "job_requeued", "node_evacuated"]
    assert "1 job(s) requeued" in events[-1][1]
    assert slurm.powered_down[0][1].startswith(Why.INTERRUPTED.value)
    (pre,) = store.preemptions("42")
    assert pre.kind == "EC2 Spot Instance Interruption Warning"
    (g,) = store.graces(open_only=False)
    assert (g.state, utc(g.ended_at)) == ("requeued", REQUEUE_AT)
    p.run(REQUEUE_AT + timedelta(seconds=5))
    assert ops(slurm).count("requeue") == 1 and len(store.preemptions("42")) == 1


def test_a_job_that_leaves_in_its_grace_is_not_requeued(graced) -> None:  # type: ignore[no-untyped-def]
    """It saved its work and ended (or requeued itself, as PyTorch Lightning does on
    SIGUSR1): no requeue, no lost run; the node is powered down at once."""
    new_pass, slurm, q, store, events = graced
    p = new_pass()
    q.bodies.append(spot_warning("i-0000000000000001"))
    p.run(T0)
    slurm.queue = []  # ended
    p.run(T0 + timedelta(seconds=30))
    assert "requeue" not in ops(slurm) and not store.preemptions("42")
    assert [k for k, _ in events] == ["job_signalled", "job_left_in_grace", "node_evacuated"]
    assert "left spot-1 30s after its SIGUSR1, 50s before its requeue" in events[1][1]
    assert [n for n, _ in slurm.powered_down] == [["spot-1"]]
    (g,) = store.graces(open_only=False)
    assert g.state == "ended"


def test_a_daemon_killed_in_the_grace_signals_once_and_requeues_on_time_after_its_restart(
        graced) -> None:  # type: ignore[no-untyped-def]
    """Killed after the signal, before the message was deleted: the message comes back to
    the new daemon, which finds the grace in the store: no second signal, the requeue at
    the same time."""
    new_pass, slurm, q, store, events = graced
    first = new_pass()
    q.bodies.append(spot_warning("i-0000000000000001"))
    first.queue = None  # (its pass reads no message: the delete is lost with it)
    first.evacuate(store.instance("i-0000000000000001"),  # type: ignore[arg-type]
                   Lost(PreemptionCause.INTERRUPTED, "EC2 Spot Instance Interruption Warning",
                        "2026-11-29T12:00:00Z", "interrupted"),
                   T0, deadline=T0 + timedelta(seconds=120))
    assert ops(slurm).count("signal") == 1
    second = new_pass()
    second.run(T0 + timedelta(seconds=20))  # the message again
    assert q.deleted == ["0"] and ops(slurm).count("signal") == 1
    assert "requeue" not in ops(slurm)
    second.run(REQUEUE_AT)
    assert ops(slurm).count("requeue") == 1 and ops(slurm).count("signal") == 1
    assert [n for n, _ in slurm.powered_down] == [["spot-1"]]


def test_a_late_warning_or_a_refused_signal_requeues_at_once(graced) -> None:  # type: ignore[no-untyped-def]
    new_pass, slurm, q, _store, events = graced
    p = new_pass()
    q.bodies.append(spot_warning("i-0000000000000001"))
    p.run(REQUEUE_AT + timedelta(seconds=1))  # read after the time a grace would have ended
    assert "signal" not in ops(slurm) and ("requeue", ["42"]) in slurm.calls
    assert [k for k, _ in events][:1] == ["job_requeued"]


def test_a_signal_slurm_refuses_requeues_at_once(graced) -> None:  # type: ignore[no-untyped-def]
    new_pass, slurm, q, store, events = graced
    p = new_pass()

    def refuse(job_id: str, signal: str, full: bool) -> None:
        from slurmscale.slurm.protocol import SlurmError
        raise SlurmError(["scancel"], 1, "Access/permission denied")
    slurm.signal_job = refuse  # type: ignore[method-assign]
    q.bodies.append(spot_warning("i-0000000000000001"))
    p.run(T0)
    assert [k for k, _ in events][:2] == ["signal_failed", "job_requeued"]
    assert ("requeue", ["42"]) in slurm.calls and not store.graces()


def test_a_grace_moves_only_along_its_table(graced) -> None:  # type: ignore[no-untyped-def]
    new_pass, _slurm, q, store, _events = graced
    q.bodies.append(spot_warning("i-0000000000000001"))
    new_pass().run(T0)
    (g,) = store.graces()
    g.state = "requeued"
    store.put_grace(g)
    g.state = "ended"
    with pytest.raises(IllegalTransition):
        store.put_grace(g)


@pytest.mark.parametrize("bad", [{"signal": "KILL"}, {"signal": "NOPE"}, {"margin_s": 120},
                                 {"margin_s": -1}, {"target": "steps"}])
def test_a_grace_signal_that_cannot_work_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        GraceSignal(**bad)  # type: ignore[arg-type]


def test_a_gang_warned_on_two_nodes_is_signalled_once_and_requeued_once(graced) -> None:  # type: ignore[no-untyped-def]
    from slurmscale.store.rows import InstanceRow

    new_pass, slurm, q, store, events = graced
    store.add_instances([InstanceRow(instance_id="i-0000000000000002", node="spot-2",
                                     pool="gpu-spot", gang_id="g", instance_type="p5.48xlarge",
                                     lifecycle="spot", launch_template_version="3",
                                     state="running", launched_at=T0)])
    slurm.table["spot-2"] = SlurmNode("spot-2", "ALLOCATED+CLOUD", "127.0.0.1", "spot-2")
    p = new_pass()
    q.bodies += [spot_warning("i-0000000000000001"), spot_warning("i-0000000000000002")]
    p.run(T0)
    assert ops(slurm).count("signal") == 1 and len(store.graces()) == 2
    p.run(REQUEUE_AT)
    assert ops(slurm).count("requeue") == 1
    assert sorted(n for ns, _ in slurm.powered_down for n in ns) == ["spot-1", "spot-2"]
    kinds = [k for k, _ in events]
    assert kinds.count("job_signalled") == 1 and kinds.count("job_requeued") == 1
    assert "job_left_in_grace" not in kinds and store.graces() == []


def test_a_graces_step_is_decided_from_what_slurm_shows() -> None:
    from slurmscale.daemon.passes.graces import GraceStep, step
    from slurmscale.store.rows import GraceRow

    g = GraceRow(job_id="42", node="spot-1", instance_id="i-1", pool="gpu-spot",
                 signal="USR1", signalled_at=T0, requeue_at=REQUEUE_AT, state="signalled",
                 cause="interrupted", kind="k")
    before = REQUEUE_AT - timedelta(seconds=1)
    assert step(g, {"42"}, False, before) is GraceStep.WAIT
    assert step(g, {"42"}, False, REQUEUE_AT) is GraceStep.REQUEUE
    assert step(g, {"7"}, False, before) is GraceStep.LEFT
    assert step(g, {"42"}, True, REQUEUE_AT) is GraceStep.REQUEUED  # (requeued off another node)


def test_an_instance_gone_in_the_grace_has_its_jobs_requeued_at_once(graced) -> None:  # type: ignore[no-untyped-def]
    """EC2 took the instance before the deadline (no notice is exact): the job is requeued
    as for any instance gone, not left waiting for a requeue time that no longer matters."""
    from slurmscale.cloud.protocol import CloudInstance

    new_pass, slurm, q, store, events = graced
    p = new_pass()
    q.bodies.append(spot_warning("i-0000000000000001"))
    p.run(T0)
    gone = CloudInstance("i-0000000000000001", "terminated", {},
                         state_reason="Server.SpotInstanceTermination")
    assert p.sweep([gone], T0 + timedelta(seconds=10), store.active_instances()) == 1
    assert ops(slurm).count("requeue") == 1 and ops(slurm).count("signal") == 1
    p.run(T0 + timedelta(seconds=12))
    assert store.graces() == [] and ops(slurm).count("requeue") == 1
    (g,) = store.graces(open_only=False)
    assert g.state == "requeued"
    assert [n for n, _ in slurm.powered_down] == [["spot-1"]]
    assert "job_left_in_grace" not in [k for k, _ in events]


def test_plan_lists_the_jobs_in_their_grace_from_the_daemon_and_from_a_snapshot(
        graced) -> None:  # type: ignore[no-untyped-def]
    """`plan` (the daemon's, and `--live`'s from the store's snapshot read in another
    process) lists each job in its grace and when it is requeued."""
    from slurmscale.daemon.passes.capacity import current_plan
    from slurmscale.daemon.passes.holds import limit_use_runs_since
    from slurmscale.daemon.plan_view import plan_data
    from slurmscale.store.snapshot import StoreSnapshot

    new_pass, slurm, q, store, _ = graced
    q.bodies.append(spot_warning("i-0000000000000001"))
    new_pass().run(T0)
    cfg = new_pass().cfg
    snap = StoreSnapshot.from_plain(StoreSnapshot.read(
        store, 0.0, limit_use_runs_since(cfg, T0.timestamp())).to_plain())
    for source in (store, snap):
        data = plan_data(current_plan(cfg, slurm, source, T0.timestamp()), "live")
        assert [(g["job_id"], g["node"], g["cause"], g["requeue_at"])
                for g in data["in_grace"]] == [
            ("42", "spot-1", "interrupted", REQUEUE_AT.timestamp())]


def test_the_report_counts_graces_used_and_the_jobs_that_left_within_them(
        graced, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """One job requeued at its grace's end, one that left within it (two warnings): the
    report's graces say so per pool and cause, in JSON, CSV, text and HTML."""
    from slurmscale.report.compute import build_report
    from slurmscale.report.render import to_csv, to_html, to_text

    new_pass, slurm, q, store, _ = graced
    p = new_pass()
    q.bodies.append(spot_warning("i-0000000000000001"))
    p.run(T0)
    p.run(REQUEUE_AT)  # requeued at the end of its grace
    g = store.graces(open_only=False)[0]
    store.put_grace(GraceRow(
        job_id="43", node="spot-2", instance_id="i-0000000000000002", pool="gpu-spot",
        signal="USR1", signalled_at=T0, requeue_at=REQUEUE_AT, state="signalled",
        cause=g.cause, kind=g.kind))
    slurm.queue = []
    p.run(T0 + timedelta(seconds=50))  # 43 left 50 s after its signal
    r = build_report(p.cfg, store, T0 - timedelta(hours=1), T0 + timedelta(hours=1))
    (x,) = r.graces
    assert (x.pool, x.cause, x.signalled, x.left_in_grace, x.requeued, x.in_grace) == (
        "gpu-spot", "interrupted", 2, 1, 1, 0)
    assert x.p50_grace_s == 50.0
    assert "graces,gpu-spot/interrupted,left_in_grace,1" in to_csv(r)
    assert "Jobs signalled" in to_text(r)
    assert "left in their grace" in to_html(r, {}, {}, (0.0, 1.0))
