"""Unhealthy nodes: the verdicts (pure, with properties), AWS Health's scheduled changes parsed
at the boundary, and the health pass on a fake Slurm and cloud with the real store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmscale.cloud.eventbridge import EventError, EventKind, parse_events
from slurmscale.cloud.protocol import CloudInstance
from slurmscale.config import HealthSettings
from slurmscale.config_file import parse_config
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.passes.health import HealthPass, health_knobs
from slurmscale.daemon.passes.interruptions import InterruptionPass
from slurmscale.model import InstanceHealth, QueueJob, ScheduledEvent, SlurmNode
from slurmscale.policy.health import Cause, HealthStep, HealthWatch
from slurmscale.slurm import reasons
from slurmscale.slurm.reasons import Why
from slurmscale.store.repo import Store
from slurmscale.store.rows import InstanceRow, TimerKind, utc
from tests.support.eventbridge_messages import health_message
from tests.support.fakes import FakeCloud, FakeQueue, FakeSlurm
from tests.unit.conftest import base_config

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
IID = "i-0000000000000001"


class Running(NamedTuple):
    """A running instance as the verdicts read it (the daemon gives the store's row)."""

    instance_id: str
    pool: str


RUN = {"spot-1": Running(IID, "gpu-spot")}
SETTINGS = health_knobs(HealthSettings(replace_on_reasons=["NHC", r"Xid \d+"], grace_s=60))


def node(state: str, reason: str = "") -> SlurmNode:
    return SlurmNode("spot-1", state, "127.0.0.1", "spot-1", reason)


def steps(watch: HealthWatch, n: SlurmNode, t: float, statuses: dict | None = None,
          recent: dict | None = None) -> list[tuple[Cause, HealthStep]]:
    return [(v.cause, v.step) for v in watch.verdicts([n], RUN, statuses or {}, recent or {},
                                                      t)]


def test_an_impaired_instance_is_replaced_at_once() -> None:
    w = HealthWatch(SETTINGS)
    bad = {IID: InstanceHealth(IID, system_status="impaired")}
    assert steps(w, node("ALLOCATED+CLOUD"), 0, bad) == [(Cause.IMPAIRED, HealthStep.REPLACE)]
    assert steps(w, node("ALLOCATED+CLOUD"), 0, {IID: InstanceHealth(IID)}) == []


def test_a_node_slurm_downed_as_unexpectedly_rebooted_is_replaced_at_once() -> None:
    """ReturnToService 0 or 1 (Slurm's default) leaves a node DOWN when its slurmd registers
    after a reboot slurmctld did not order: Slurm's reason, not an admin's; left alone, the
    node would hold its instance for nothing."""
    w = HealthWatch(SETTINGS)
    rebooted = node("DOWN+CLOUD", "Node unexpectedly rebooted")
    assert steps(w, rebooted, 0) == [(Cause.REBOOTED, HealthStep.REPLACE)]
    assert steps(w, node("DOWN+CLOUD", "rebooted for a BIOS update"), 0) == [], "an admin's"


def test_a_health_check_drain_waits_out_the_grace_and_an_admin_drain_is_never_touched() -> None:
    w = HealthWatch(SETTINGS)
    nhc = node("IDLE+CLOUD+DRAIN", "NHC: check_nv_gpu: Xid 79 on GPU 3")
    assert steps(w, nhc, 1000) == [(Cause.HEALTH_CHECK, HealthStep.WAIT)]
    assert steps(w, nhc, 1059) == [(Cause.HEALTH_CHECK, HealthStep.WAIT)]
    assert steps(w, nhc, 1060) == [(Cause.HEALTH_CHECK, HealthStep.REPLACE)]
    admin = node("IDLE+CLOUD+DRAIN", "bad cable, ticket 4411")
    impaired = {IID: InstanceHealth(IID, instance_status="impaired")}
    assert steps(HealthWatch(SETTINGS), admin, 0, impaired) == []
    assert steps(HealthWatch(SETTINGS), node("DOWN+CLOUD", "maintenance"), 0) == []


def test_not_responding_must_last_the_grace_across_passes() -> None:
    w = HealthWatch(SETTINGS)
    gone = node("IDLE+CLOUD+NOT_RESPONDING")
    assert steps(w, gone, 0) == [(Cause.NOT_RESPONDING, HealthStep.WAIT)]
    assert steps(w, node("IDLE+CLOUD"), 30) == []  # it answered again: the grace restarts
    assert steps(w, gone, 40) == [(Cause.NOT_RESPONDING, HealthStep.WAIT)]
    assert steps(w, node("DOWN+CLOUD", "Not responding"), 100) == [
        (Cause.NOT_RESPONDING, HealthStep.REPLACE)]


def test_nodes_without_an_instance_in_transition_or_ours_already_are_left_alone() -> None:
    w = HealthWatch(SETTINGS)
    bad = {IID: InstanceHealth(IID, system_status="impaired")}
    assert steps(w, node("IDLE+CLOUD+POWERED_DOWN+NOT_RESPONDING"), 0, bad) == []
    assert steps(w, node("IDLE+CLOUD+POWERING_UP"), 0, bad) == []
    lost = reasons.reason(Why.INTERRUPTED, "2026-11-30T12:00:00Z (terminate)")
    assert steps(w, node("IDLE+CLOUD+DRAIN", lost), 0, bad) == []
    assert steps(w, node("IDLE+CLOUD+DRAIN", reasons.reason(Why.REPLACE_LOOP, "3")), 0,
                 bad) == []
    assert w.verdicts([node("IDLE+CLOUD+NOT_RESPONDING")], {}, {}, {}, 0) == []


def test_a_scheduled_event_drains_then_replaces_once_idle_or_before_the_event() -> None:
    w = HealthWatch(SETTINGS)  # event_lead_s 900
    ev = ScheduledEvent("instance-retirement", 10_000.0, "scheduled retirement")
    st_ = {IID: InstanceHealth(IID, events=(ev,))}
    w.statuses_read(st_.values())
    busy = node("MIXED+CLOUD")
    (v,) = w.verdicts([busy], RUN, st_, {}, 0)
    assert (v.cause, v.step) == (Cause.SCHEDULED, HealthStep.DRAIN)
    assert v.detail == "instance-retirement from 1970-01-01T02:46:40+00:00"
    drained = reasons.reason(Why.SCHEDULED, v.detail)
    assert steps(w, node("MIXED+CLOUD+DRAIN", drained), 9_099, st_) == [
        (Cause.SCHEDULED, HealthStep.WAIT)]
    assert steps(w, node("MIXED+CLOUD+DRAIN", drained), 9_100, st_) == [
        (Cause.SCHEDULED, HealthStep.REPLACE)]
    assert steps(w, node("IDLE+CLOUD+DRAIN", drained), 0, st_) == [
        (Cause.SCHEDULED, HealthStep.REPLACE)]
    # the memory lost (a restart before the status read): drained by us, idle -> replaced
    assert steps(HealthWatch(SETTINGS), node("IDLE+CLOUD+DRAIN", drained), 0) == [
        (Cause.SCHEDULED, HealthStep.REPLACE)]
    # EC2 lists it no more (canceled): an undrained node is left alone
    w.statuses_read([InstanceHealth(IID)])
    assert steps(w, busy, 0, {IID: InstanceHealth(IID)}) == []


def test_a_node_replaced_too_often_is_left_for_an_admin() -> None:
    w = HealthWatch(SETTINGS)  # max_replacements 3
    bad = {IID: InstanceHealth(IID, instance_status="impaired")}
    assert steps(w, node("IDLE+CLOUD"), 0, bad, {"spot-1": 2}) == [
        (Cause.IMPAIRED, HealthStep.REPLACE)]
    assert steps(w, node("IDLE+CLOUD"), 0, bad, {"spot-1": 3}) == [
        (Cause.IMPAIRED, HealthStep.LEAVE)]


STATES = st.sets(st.sampled_from(["DRAIN", "NOT_RESPONDING", "COMPLETING", "POWERED_DOWN",
                                  "POWERING_UP", "RESERVED"]))


@settings(max_examples=300, deadline=None)
@given(base=st.sampled_from(["IDLE", "MIXED", "ALLOCATED", "DOWN"]), flags=STATES,
       why=st.text(min_size=1, max_size=30), status=st.sampled_from(
           ["ok", "impaired", "insufficient-data", "initializing"]),
       t=st.floats(0, 1e6), recent=st.integers(0, 5))
def test_an_admins_drain_is_never_acted_on_and_replacing_respects_the_guard(
        base: str, flags: set[str], why: str, status: str, t: float, recent: int) -> None:
    w = HealthWatch(SETTINGS)
    n = node("+".join([base, "CLOUD", *sorted(flags)]), why)
    out = w.verdicts([n], RUN, {IID: InstanceHealth(IID, instance_status=status)},
                     {"spot-1": recent}, t)
    admins = (reasons.ours(why) is None and not why.startswith("Not responding")
              and not any(p.search(why) for p in w.patterns))
    if admins and (n.flags & {"DRAIN", "DOWN"}):
        assert out == []
    for v in out:
        assert v.step is not HealthStep.REPLACE or recent < SETTINGS.max_replacements


def test_aws_health_scheduled_changes_parse_one_event_per_instance() -> None:
    body = health_message("AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                          ["i-0123456789abcdef0", "i-0123456789abcdef1"],
                          "2026-11-30T10:00:00Z", "Tue, 01 Dec 2026 10:00:00 GMT")
    evs = parse_events(body)
    assert [e.instance_id for e in evs] == ["i-0123456789abcdef0", "i-0123456789abcdef1"]
    assert {e.kind for e in evs} == {EventKind.SCHEDULED}
    assert evs[0].scheduled == ScheduledEvent(
        "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
        datetime(2026, 12, 1, 10, tzinfo=UTC).timestamp(), "AWS Health")
    data = json.loads(body)
    data["detail"]["eventTypeCategory"] = "issue"
    with pytest.raises(EventError, match="not an EC2 scheduled change"):
        parse_events(json.dumps(data))
    data = json.loads(body)
    data["detail"]["affectedEntities"], data["resources"] = [{"entityValue": "vol-1"}], []
    with pytest.raises(EventError, match="names no EC2 instance"):
        parse_events(json.dumps(data))


@pytest.fixture
def world(tmp_path):  # type: ignore[no-untyped-def]
    w = _world(tmp_path)
    yield w
    w[4].close()


def _world(tmp_path, grace_s: float = 0, **spot_pool: object):  # type: ignore[no-untyped-def]
    d = base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}")
    d["health"] = {"replace_on_reasons": ["NHC"], "grace_s": grace_s, "status_interval_s": 60}
    (spot,) = [p for p in d["pools"] if p["name"] == "gpu-spot"]
    spot.update(spot_pool)
    cfg = parse_config(d)
    store = Store(cfg.store_url)
    store.upgrade()
    store.add_instances([InstanceRow(
        instance_id=IID, node="spot-1", pool="gpu-spot", gang_id="g",
        instance_type="p5.48xlarge", lifecycle="spot", launch_template_version="3",
        state="running", launched_at=T0)])
    slurm = FakeSlurm(table={"spot-1": SlurmNode("spot-1", "ALLOCATED+CLOUD", "127.0.0.1",
                                                 "spot-1")})
    slurm.queue = [QueueJob("42", ("gpu-spot",), 2, 8, 3600, "2026-11-30T11:00:00", "None",
                            100, "alice", "RUNNING", nodelist="spot-[1-2]")]
    cloud = FakeCloud(instances={IID: CloudInstance(IID, "running", {})})
    now = [T0]
    events: list[tuple[str, str]] = []
    q = FakeQueue()
    ctx = PassContext(cfg, store, slurm, cloud, lambda: now[0],
                      lambda k, m, **_: events.append((k, m)), q)
    ip = InterruptionPass(ctx)
    hp = HealthPass(ctx, ip)
    return hp, ip, slurm, cloud, store, events, now, q


def test_the_pass_replaces_an_impaired_node_requeues_its_gang_and_records_it(world) -> None:  # type: ignore[no-untyped-def]
    hp, _, slurm, cloud, store, events, now, _ = world
    cloud.health[IID] = InstanceHealth(IID, system_status="impaired")
    hp.run(slurm.nodes(), None)
    ops = [c[0] for c in slurm.calls]
    assert ("requeue", ["42"]) in slurm.calls and "power_down_force" in ops
    assert slurm.powered_down[0][1].startswith(
        "slurmscale: unhealthy, replaced: ec2-status-check: EC2 status checks: system impaired")
    (r,) = store.replacements()
    assert (r.node, r.cause, r.jobs_requeued, r.gpus, r.left) == (
        "spot-1", "ec2-status-check", 1, 8, False)
    (pre,) = store.preemptions("42")
    assert pre.kind == "unhealthy:ec2-status-check"
    assert "node_replaced" in [k for k, _ in events]
    # EC2 is read at most every status_interval_s
    now[0] = T0 + timedelta(seconds=30)
    hp.run(slurm.nodes(), None)
    assert cloud.health_reads == 1


def test_a_standby_that_takes_over_replaces_when_the_leader_would_have(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The grace of a node drained by a health check is on the store: the leader saw it at
    T0 and died at T0 + 200 s; the standby's first pass at T0 + 299 s still waits, and its
    pass at T0 + 300 s (grace 300 s) replaces it, the detection dated T0 (not a whole grace
    after the take-over, as when the timer was the leader's memory)."""
    hp, ip, slurm, cloud, store, events, now, _ = _world(tmp_path, grace_s=300)
    try:
        slurm.table["spot-1"] = SlurmNode("spot-1", "IDLE+CLOUD+DRAIN", "127.0.0.1",
                                          "spot-1", "NHC: nvidia-smi failed")
        slurm.queue = []
        hp.run(slurm.nodes(), None)
        now[0] = T0 + timedelta(seconds=200)
        hp.run(slurm.nodes(), None)
        assert slurm.powered_down == []
        standby = HealthPass(hp.ctx, ip)  # (a new daemon's pass on the same store)
        now[0] = T0 + timedelta(seconds=299)
        standby.run(slurm.nodes(), None)
        assert slurm.powered_down == []
        now[0] = T0 + timedelta(seconds=300)
        standby.run(slurm.nodes(), None)
        assert [n for n, _ in slurm.powered_down] == [["spot-1"]]
        (r,) = store.replacements()
        assert utc(r.detected_at) == T0
        slurm.table["spot-1"] = SlurmNode("spot-1", "IDLE+CLOUD+POWERING_DOWN", "127.0.0.1",
                                          "spot-1")
        now[0] = T0 + timedelta(seconds=310)
        standby.run(slurm.nodes(), None)
        assert store.timers(TimerKind.UNHEALTHY) == {}  # (the node's wait ended with it)
    finally:
        store.close()


def test_a_node_past_the_guard_is_drained_for_an_admin_not_replaced(world) -> None:  # type: ignore[no-untyped-def]
    hp, _, slurm, cloud, store, events, now, _ = world
    hp.cfg = hp.cfg.model_copy(update={"max_replacements": 1})
    hp.watch.settings = hp.cfg
    slurm.table["spot-1"] = SlurmNode("spot-1", "IDLE+CLOUD+DRAIN", "127.0.0.1", "spot-1",
                                      "NHC: nvidia-smi failed")
    slurm.queue = []
    hp.run(slurm.nodes(), None)
    assert len(store.replacements()) == 1 and slurm.powered_down
    # a fresh instance for the node, unhealthy again: left for an admin
    iid2 = "i-0000000000000002"
    store.mark_terminated([IID], T0)
    store.add_instances([InstanceRow(
        instance_id=iid2, node="spot-1", pool="gpu-spot", gang_id="g2",
        instance_type="p5.48xlarge", lifecycle="spot", launch_template_version="3",
        state="running", launched_at=T0)])
    slurm.powered_down.clear()
    slurm.table["spot-1"] = SlurmNode("spot-1", "IDLE+CLOUD+DRAIN", "127.0.0.1", "spot-1",
                                      "NHC: nvidia-smi failed")
    now[0] = T0 + timedelta(seconds=600)
    hp.run(slurm.nodes(), None)
    assert slurm.powered_down == []
    assert slurm.table["spot-1"].reason.startswith("slurmscale: replaced too often 1 time(s)")
    msg = dict(events)["node_replace_loop"]
    assert "pool gpu-spot is losing nodes" in msg
    assert [r.left for r in store.replacements()] == [False, True]
    hp.run(slurm.nodes(), None)  # left alone from now on
    assert len(store.replacements()) == 2


def test_slurm_refusing_one_nodes_replacement_stops_no_other(world) -> None:  # type: ignore[no-untyped-def]
    """Slurm's refusals are outcomes said where they are applied (effects.py), so the pass
    has no catch of its own between nodes: one node's refused power-down is said and
    retried, and the next node is replaced on the same pass."""
    from dataclasses import replace

    from slurmscale.slurm.protocol import SlurmError

    hp, _, slurm, cloud, store, events, now, _ = world
    iid2 = "i-0000000000000002"
    store.add_instances([InstanceRow(
        instance_id=iid2, node="spot-2", pool="gpu-spot", gang_id="g",
        instance_type="p5.48xlarge", lifecycle="spot", launch_template_version="3",
        state="running", launched_at=T0)])
    slurm.table["spot-2"] = replace(slurm.table["spot-1"], name="spot-2")
    cloud.instances[iid2] = CloudInstance(iid2, "running", {})
    for iid in (IID, iid2):
        cloud.health[iid] = InstanceHealth(iid, system_status="impaired")
    plain = slurm.power_down_force

    def refuse_spot_1(names: list[str], reason: str) -> None:
        if names == ["spot-1"]:
            raise SlurmError(["scontrol"], 1, "Invalid node state specified")
        plain(names, reason)
    slurm.power_down_force = refuse_spot_1
    hp.run(slurm.nodes(), None)
    assert [n for n, _ in slurm.powered_down] == [["spot-2"]]
    assert [r.node for r in store.replacements()] == ["spot-2"]
    failed = [m for k, m in events if k == "slurm_update_failed"]
    assert failed and all(m.startswith("power down spot-1: ") and "Invalid node state" in m
                          for m in failed), failed


def test_an_aws_health_message_drains_the_node_on_the_same_pass(world) -> None:  # type: ignore[no-untyped-def]
    hp, ip, slurm, _, store, events, now, q = world
    q.bodies.append(health_message("AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED", [IID],
                                   "2026-11-30T12:00:00Z", "Wed, 02 Dec 2026 12:00:00 GMT"))
    assert ip.run(T0) == 1 and q.deleted == ["0"]
    hp.run(slurm.nodes(), None)
    n = slurm.table["spot-1"]
    assert "DRAIN" in n.flags and n.reason.startswith(
        "slurmscale: scheduled EC2 event AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED from "
        "2026-12-02T12:00:00+00:00")
    assert ("requeue", ["42"]) not in slurm.calls  # its job runs on
    # the job ends: idle and drained -> replaced
    slurm.table["spot-1"] = SlurmNode("spot-1", "IDLE+CLOUD+DRAIN", "127.0.0.1", "spot-1",
                                      n.reason)
    slurm.queue = []
    hp.run(slurm.nodes(), None)
    (r,) = store.replacements()
    assert r.cause == "scheduled-event" and slurm.powered_down


def test_a_standby_drains_for_the_aws_health_message_the_leader_read(world) -> None:  # type: ignore[no-untyped-def]
    """The leader read AWS Health's message off the queue (deleted there) and died before its
    health pass: the change is on the store, so the standby's health pass (a new one on the
    same store, a status read that does not list the change) drains the node; forgotten
    once the instance is gone."""
    from slurmscale.daemon.passes.scheduled import SCHEDULED

    hp, ip, slurm, cloud, store, events, now, q = world
    q.bodies.append(health_message("AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED", [IID],
                                   "2026-11-30T12:00:00Z", "Wed, 02 Dec 2026 12:00:00 GMT"))
    assert ip.run(T0) == 1 and q.deleted == ["0"]
    assert "DRAIN" not in slurm.table["spot-1"].flags and set(store.timers(SCHEDULED)) == {IID}
    standby = HealthPass(hp.ctx, InterruptionPass(hp.ctx))
    standby.run(slurm.nodes(), None)
    n = slurm.table["spot-1"]
    assert "DRAIN" in n.flags and "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED" in n.reason
    store.mark_terminated([IID], T0)
    standby.run(slurm.nodes(), None)
    assert store.timers(SCHEDULED) == {}


def test_before_a_scheduled_event_a_grace_signal_gives_the_job_the_time_left(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The pool's grace_signal: the busy node due for replacement event_lead_s before the
    event has its job signalled, not requeued; the job is requeued at the event's start
    less the margin if still there, then the node is powered down with the replacement's
    reason (one replacement recorded, one signal, one requeue)."""
    hp, ip, slurm, _, store, events, now, q = _world(tmp_path, grace_signal={"margin_s": 40})
    start = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    q.bodies.append(health_message("AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED", [IID],
                                   "2026-11-30T12:00:00Z", "Wed, 02 Dec 2026 12:00:00 GMT"))

    def pass_at(t: datetime) -> None:
        now[0] = t
        ip.run(t)
        hp.run(slurm.nodes(), None)
    pass_at(T0)
    assert "DRAIN" in slurm.table["spot-1"].flags and "signal" not in [c[0] for c in slurm.calls]
    pass_at(start - timedelta(seconds=900))  # health.event_lead_s before the event
    assert [c for c in slurm.calls if c[0] in ("signal", "requeue")] == [
        ("signal", ["42", "USR1", "batch"])]
    assert not slurm.powered_down
    (r,) = store.replacements()
    assert "1 signalled (requeued before the event if still there)" in dict(events)[
        "node_replaced"]
    pass_at(start - timedelta(seconds=41))
    assert ("requeue", ["42"]) not in slurm.calls and not slurm.powered_down
    pass_at(start - timedelta(seconds=40))
    assert [c for c in slurm.calls if c[0] in ("signal", "requeue")] == [
        ("signal", ["42", "USR1", "batch"]), ("requeue", ["42"])]
    (pre,) = store.preemptions("42")
    assert (pre.cause, pre.kind) == ("unhealthy", "unhealthy:scheduled-event")
    slurm.queue = []
    pass_at(start - timedelta(seconds=35))
    assert slurm.powered_down and slurm.powered_down[0][1].startswith(
        "slurmscale: unhealthy, replaced: scheduled-event from ")
    assert len(store.replacements()) == 1 and [c[0] for c in slurm.calls].count("signal") == 1
    store.close()
