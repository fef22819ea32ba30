"""The reconcile pass against in-memory Slurm and cloud, with the real store (SQLite)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from slurmscale.cloud.protocol import CloudError
from slurmscale.daemon.executor.effects import Effects
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.model import QueueJob, SlurmNode
from slurmscale.slurm.protocol import SlurmError
from slurmscale.spool import RequestKind, Spool
from slurmscale.store.memory import MemoryStore
from slurmscale.store.repo import Store
from tests.support.fakes import FakeCloud, FakeSlurm

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def world(cfg):  # type: ignore[no-untyped-def]
    store = Store(cfg.store_url)
    store.upgrade()
    cloud, slurm, clock = FakeCloud(), FakeSlurm(), Clock()
    r = Reconciler(cfg, store, slurm, cloud, clock=clock)
    yield r, cloud, slurm, clock, Spool(cfg.spool_dir)
    store.close()


def hook(spool: Spool, clock: Clock, kind: RequestKind, jobs: dict[int, list[str]]) -> None:
    nodes = [n for ns in jobs.values() for n in ns]
    rf = json.dumps({"jobs": [{"job_id": j, "nodes": ",".join(ns)} for j, ns in jobs.items()],
                     "all_nodes": ",".join(nodes)})
    spool.put(spool.new_request(kind, nodes, ",".join(nodes),
                                rf if kind is RequestKind.RESUME else None,
                                now=clock.now.timestamp()))


def test_a_gang_is_one_launch_with_min_capacity_equal_to_its_size(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = world
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2", "spot-3", "spot-4"]})
    res = r.tick()
    assert res.launched_gangs == 1
    assert [(x["count"], x["min"]) for x in cloud.launches] == [(4, 4)]
    assert cloud.launches[0]["token"].startswith("slurmscale-")
    assert len(cloud.launches[0]["token"]) <= 64
    assert {i.tags["slurmscale:node"] for i in cloud.running()} == {
        "spot-1", "spot-2", "spot-3", "spot-4"}
    assert all(i.tags["slurmscale:cluster"] == "unit" for i in cloud.running())
    assert slurm.addresses["spot-1"] == ("10.0.0.1", "spot-1")
    # the gang's four nodes addressed in one scontrol update, not four
    assert [c for c in slurm.calls if c[0] == "set_node_addresses"] == [
        ("set_node_addresses", ["spot-1", "spot-2", "spot-3", "spot-4"])]
    assert r.store.pending_requests() == []
    insts = r.store.active_instances()
    assert {i.launch_template_version for i in insts} == {"3"}
    assert {i.image_id for i in insts} == {"ami-1"}


def test_partial_capacity_rolls_back_the_whole_gang(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = world
    cloud.give, cloud.hidden_extra = 2, True
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2", "spot-3", "spot-4"]})
    res = r.tick()
    assert res.failed_gangs == 1
    assert cloud.running() == [], "listed and unlisted instances are all terminated"
    assert r.store.active_instances() == []
    (nodes, reason), = slurm.powered_down
    assert nodes == ["spot-1", "spot-2", "spot-3", "spot-4"]
    assert "InsufficientInstanceCapacity" in reason
    kinds = [e.kind for e in r.store.events()]
    assert "launch_failed" in kinds and "launched" not in kinds
    assert r.store.requests()[0].status == "failed"


def test_an_api_error_powers_the_gang_down_with_the_code(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = world
    cloud.error = CloudError("UnauthorizedOperation", "not allowed to CreateFleet")
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    assert "UnauthorizedOperation" in slurm.powered_down[0][1]


def test_a_coalesced_batch_keeps_what_it_got_and_powers_down_the_rest(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = world
    cloud.give = 2
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1"], 2: ["spot-2"], 3: ["spot-3"]})
    clock.now += timedelta(seconds=5)
    r.tick()
    assert [(x["count"], x["min"]) for x in cloud.launches] == [(3, 1)]
    assert len(cloud.running()) == 2
    assert slurm.powered_down == [(["spot-3"], "slurmscale launch failed: "
                                   "InsufficientInstanceCapacity")]


def test_the_same_resume_processed_twice_launches_once(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = world
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    assert len(cloud.launches) == 1
    assert "resume_skipped" in [e.kind for e in r.store.events()]


def test_suspend_terminates_the_nodes_instances_and_resets_the_address(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = world
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    hook(spool, clock, RequestKind.SUSPEND, {0: ["spot-1", "spot-2"]})
    r.tick()
    assert cloud.running() == []
    assert slurm.addresses["spot-1"] == ("spot-1", "spot-1")
    assert r.store.active_instances() == []


def test_singles_wait_for_the_window_then_share_one_launch(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = world
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1"]})
    res = r.tick()
    assert cloud.launches == [] and res.next_due is not None
    clock.now += timedelta(seconds=1)
    hook(spool, clock, RequestKind.RESUME, {2: ["spot-2"]})
    r.tick()
    assert cloud.launches == []
    clock.now += timedelta(seconds=1.5)
    r.tick()
    assert [(x["count"], x["min"]) for x in cloud.launches] == [(2, 1)]


def test_a_slurm_outage_is_recorded_not_swallowed(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = world
    slurm.fail = True
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    msgs = [e.message for e in r.store.events() if e.kind == "slurm_update_failed"]
    assert msgs and "Unable to contact" in msgs[0]


def test_an_unreadable_spool_file_is_set_aside_with_an_event(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = world
    spool.ensure()
    (spool.incoming / "garbage.json").write_text("{nope")
    r.tick()
    assert (spool.rejected / "garbage.json").exists()
    assert "spool_rejected" in [e.kind for e in r.store.events()]


def test_a_spool_that_cannot_be_written_costs_its_clean_up_not_the_pass(world, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A read-only spool (EROFS, as root too): each request is taken once, launched once,
    the pass goes on, and one event says the files stay."""
    r, cloud, slurm, clock, spool = world

    def read_only(self: Spool, path: object) -> None:
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(Spool, "done", read_only)
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    assert r.tick().launched_gangs == 1
    clock.now += timedelta(seconds=60)
    hook(spool, clock, RequestKind.RESUME, {2: ["spot-3"]})
    r.tick()
    clock.now += timedelta(seconds=60)
    r.tick()
    assert len(cloud.launches) == 2 and len(cloud.running()) == 3
    kinds = [e.kind for e in r.store.events()]
    assert kinds.count("spool_unwritable") == 1 and kinds.count("request_received") == 2


def test_only_this_clusters_untracked_instances_past_the_grace_are_leaks() -> None:
    from datetime import UTC, datetime, timedelta

    from slurmscale.cloud.protocol import TAG_CLUSTER, CloudInstance
    from slurmscale.daemon.passes.sweep import leaked_instances

    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    old, young = now - timedelta(seconds=400), now - timedelta(seconds=100)
    ours = {TAG_CLUSTER: "c1"}
    seen = [
        CloudInstance("i-leak", "running", ours, launched_at=old),
        CloudInstance("i-young", "running", ours, launched_at=young),  # launch in flight
        CloudInstance("i-tracked", "running", ours, launched_at=old),
        CloudInstance("i-gone", "terminated", ours, launched_at=old),
        CloudInstance("i-other", "running", {TAG_CLUSTER: "c2"}, launched_at=old),
        CloudInstance("i-untagged", "running", {}, launched_at=old),
        CloudInstance("i-naive", "pending", ours, launched_at=old.replace(tzinfo=None)),
    ]
    got = leaked_instances(seen, "c1", {"i-tracked"}, now, 300)
    assert [i.instance_id for i in got] == ["i-leak", "i-naive"]
    assert leaked_instances(seen, "c1", {"i-tracked"}, now, 500) == []


class _Killed(BaseException):
    """Stands in for SIGKILL: nothing after the crash point runs in this 'process'."""


@pytest.mark.parametrize("point", ["launch:before_fleet", "launch:after_fleet",
                                   "launch:after_record"])
def test_a_daemon_killed_mid_launch_resumes_without_a_second_launch(world, monkeypatch,
                                                                     point: str) -> None:
    import slurmscale.daemon.passes.launch as rec

    r, cloud, slurm, clock, spool = world

    def crash(name: str) -> None:
        if name == point:
            raise _Killed(name)
    monkeypatch.setattr(rec, "crash_point", crash)
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    with pytest.raises(_Killed):
        r.tick()
    monkeypatch.setattr(rec, "crash_point", lambda _n: None)
    # the restarted daemon: same store, same cloud, fresh memory
    again = Reconciler(r.cfg, r.store, slurm, cloud, clock=clock)
    clock.now += timedelta(seconds=10)
    again.tick()
    assert len(cloud.launches) == 1, "one CreateFleet in all"
    assert len(cloud.running()) == 2
    assert {i.tags.get("slurmscale:node") for i in cloud.running()} == {"spot-1", "spot-2"}
    assert {i.instance_id for i in r.store.active_instances()} == {
        i.instance_id for i in cloud.running()}
    assert set(slurm.addresses) == {"spot-1", "spot-2"}
    assert r.store.pending_requests() == []
    # the gang is finished however it was cut off (after_record used to leave it
    # `launching` for good, with no `launched` event, though its job ran)
    assert [g.status for g in r.store.gangs()] == ["launched"]
    assert [e.kind for e in r.store.events(limit=100)].count("launched") == 1


def test_untracked_instances_are_terminated_only_where_slurm_cannot_be_using_them(world) -> None:  # type: ignore[no-untyped-def]
    from slurmscale.cloud.protocol import TAG_CLUSTER, TAG_NODE, CloudInstance
    from slurmscale.model import SlurmNode

    r, cloud, slurm, clock, _spool = world
    old = T0 - timedelta(hours=1)
    ours = {TAG_CLUSTER: "unit"}
    for iid, node in (("i-nonode", ""), ("i-busy", "spot-1"), ("i-down", "spot-2")):
        tags = {**ours, **({TAG_NODE: node} if node else {})}
        cloud.instances[iid] = CloudInstance(iid, "running", tags, launched_at=old)
    slurm.table = {"spot-1": SlurmNode("spot-1", "ALLOCATED+CLOUD", "10.0.0.9", "spot-1"),
                   "spot-2": SlurmNode("spot-2", "IDLE+CLOUD+POWERED_DOWN", "spot-2",
                                       "spot-2")}
    r.tick()
    r.tick()
    assert {i.instance_id for i in cloud.running()} == {"i-busy"}
    kinds = [e.kind for e in r.store.events(limit=100)]
    assert kinds.count("leak_terminated") == 2
    assert kinds.count("untracked_instance") == 1, "reported once, not every pass"
    slurm.fail = True  # Slurm unreadable: nothing is terminated on missing information
    cloud.instances["i-late"] = CloudInstance("i-late", "running", ours, launched_at=old)
    r.tick()
    assert "i-late" in {i.instance_id for i in cloud.running()}


UNREACHABLE = CloudError("EndpointConnectionError",
                         'Could not connect to the endpoint URL: "https://ec2.example"')


def test_ec2_unreachable_defers_the_launch_and_catches_up_without_a_requeue(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = world
    cloud.down = UNREACHABLE
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    res = r.tick()
    assert res.failed_gangs == 0 and slurm.powered_down == [], "the job is not requeued"
    assert [q.status for q in r.store.requests()] == ["pending"]
    assert res.next_due is not None and res.next_due > clock.now.timestamp()
    r.tick()  # a poke before the retry is due asks EC2 nothing
    assert len(cloud.launches) == 1
    cloud.down = None
    clock.now += timedelta(seconds=60)
    assert r.tick().launched_gangs == 1
    assert len(cloud.running()) == 2 and r.store.pending_requests() == []
    kinds = [e.kind for e in r.store.events()]
    assert kinds.count("launch_deferred") == 1 and "launch_failed" not in kinds


def test_a_deferred_launch_goes_in_the_pass_after_ec2_answers_again(world) -> None:  # type: ignore[no-untyped-def]
    """EC2 away for several tries (the delay grown to its cap), then back: the pass whose
    calls EC2 all answered (the sweep's read) ends the delay, and the next pass launches at
    once (before: the gang waited out the rest of the delay, 89 s seen for its tag after an
    outage). A pass in which some EC2 call still failed keeps the delay."""
    r, cloud, slurm, clock, spool = world
    cloud.down = UNREACHABLE
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    for _ in range(6):
        r.tick()
        clock.now += timedelta(seconds=r.requests.ec2_retry.due() - clock.now.timestamp())
    assert r.requests.ec2_retry.until - clock.now.timestamp() == 0 and len(cloud.launches) == 6
    r.tick()
    assert r.requests.ec2_retry.due() - clock.now.timestamp() == r.requests.ec2_retry.cap_s
    cloud.down = None
    clock.now += timedelta(seconds=1)
    res = r.tick()  # the retry not due: no launch, but the sweep's reads answered
    assert len(cloud.launches) == 7 and res.launched_gangs == 0
    assert res.next_due == clock.now.timestamp() and not r.requests.ec2_retry.waiting(res.next_due)
    clock.now += timedelta(seconds=1)
    assert r.tick().launched_gangs == 1, "the deferred gang waited out its delay"
    assert len(cloud.running()) == 2
    # a pass in which an EC2 call failed beside those that answered keeps the delay
    from slurmscale.daemon.call_failures import CallFailures

    seen = CallFailures()
    seen.answered("EC2")
    assert seen.all_answered("EC2") and not seen.all_answered("Route 53")
    seen.add("EC2.launch", UNREACHABLE)
    assert not seen.all_answered("EC2")
    seen.take()
    assert not seen.all_answered("EC2")


def test_a_standby_waits_out_the_ec2_retry_delay_the_leader_was_waiting_out(world) -> None:  # type: ignore[no-untyped-def]
    """EC2 did not answer the leader twice (its delay doubled) and the leader is gone: the
    delay is on the store, so the standby (a new Reconciler on the same store) asks EC2 no
    sooner than the leader would have, then launches and clears it."""
    from slurmscale.daemon.passes.retry import RETRY

    r, cloud, slurm, clock, spool = world
    base = r.requests.ec2_retry.base_s
    cloud.down = UNREACHABLE
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    clock.now += timedelta(seconds=base)
    r.tick()  # the second failure: the next try 2 x base from now
    assert len(cloud.launches) == 2 and r.store.timer_notes(RETRY) == {"ec2": "2"}
    due = clock.now.timestamp() + 2 * base
    cloud.down = None
    standby = Reconciler(r.cfg, r.store, slurm, cloud, clock=clock)
    clock.now += timedelta(seconds=2 * base - 1)
    standby.tick()
    assert len(cloud.launches) == 2, "the standby asked EC2 before the leader's delay was over"
    clock.now += timedelta(seconds=1)
    assert clock.now.timestamp() == due and standby.tick().launched_gangs == 1
    assert r.store.timers(RETRY) == {}


def test_a_launch_whose_answer_was_lost_is_recovered_not_repeated(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = world
    cloud.answers_lost = 1  # EC2 launched both, the response timed out
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    clock.now += timedelta(seconds=60)
    r.tick()
    assert len(cloud.launches) == 1, "the retry found the gang's instances by tag"
    assert len(cloud.running()) == 2 and len(r.store.active_instances()) == 2
    assert "launch_recovered" in [e.kind for e in r.store.events()]


def test_a_launch_being_retried_is_not_swept_as_a_leak(world, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The CreateFleet answer lost, then the retry refused by an endpoint that fails for
    longer than the leak grace: the gang's instances are untracked and old enough, but their
    gang is still launching, and the retry with the same ClientToken is answered with them."""
    r, cloud, slurm, clock, spool = world
    cloud.answers_lost = 1
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    launched = {i.instance_id for i in cloud.running()}
    assert len(launched) == 2 and r.store.active_instances() == []
    for iid in launched:  # (EC2 gives each its launch time)
        cloud.instances[iid] = replace(cloud.instances[iid], launched_at=clock.now)

    def down(*_a: object, **_k: object) -> None:
        raise UNREACHABLE
    monkeypatch.setattr(cloud, "launched_with", down)
    monkeypatch.setattr(cloud, "launch", down)
    # past the leak grace, short of the gang's own deadline (half the resume timeout)
    assert r.cfg.daemon.leak_grace_s + 2 < r.cfg.power_saving.resume_timeout / 2
    for _ in range(2):
        clock.now += timedelta(seconds=r.cfg.daemon.leak_grace_s / 2 + 1)
        r.tick()
    assert {i.instance_id for i in cloud.running()} == launched, "swept as leaks"
    assert "leak_terminated" not in [e.kind for e in r.store.events()]
    monkeypatch.undo()
    clock.now += timedelta(seconds=60)
    r.tick()
    assert {i.instance_id for i in r.store.active_instances()} == launched


def test_ec2_down_past_half_the_resume_timeout_fails_the_gang_with_the_error(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = world
    cloud.down = UNREACHABLE
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    clock.now += timedelta(seconds=r.cfg.power_saving.resume_timeout / 2 + 1)
    assert r.tick().failed_gangs == 1
    assert "EndpointConnectionError" in slurm.powered_down[0][1]
    assert r.store.requests()[0].status == "failed"


def test_a_terminate_ec2_did_not_carry_out_is_retried_until_it_is(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = world
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1"]})
    clock.now += timedelta(seconds=5)
    r.tick()
    cloud.down = UNREACHABLE
    hook(spool, clock, RequestKind.SUSPEND, {0: ["spot-1"]})
    r.tick()
    assert len(cloud.running()) == 1 and len(r.store.active_instances()) == 1
    assert [q.status for q in r.store.requests() if q.kind == "suspend"] == ["pending"]
    cloud.down = None
    r.tick()
    assert cloud.running() == [] and r.store.active_instances() == []
    assert r.store.pending_requests() == []


def test_a_node_up_without_any_instance_is_powered_down_after_the_grace(world) -> None:  # type: ignore[no-untyped-def]
    from slurmscale.cloud.protocol import TAG_CLUSTER, TAG_NODE, CloudInstance
    from slurmscale.model import SlurmNode
    from slurmscale.slurm.reasons import Why

    r, cloud, slurm, clock, _spool = world
    node = lambda name, state: SlurmNode(name, state, name, name)  # noqa: E731
    slurm.table = {"spot-1": node("spot-1", "ALLOCATED+CLOUD"),  # its instance is gone
                   "spot-2": node("spot-2", "IDLE+CLOUD"),  # untracked instance in EC2
                   "spot-3": node("spot-3", "IDLE+CLOUD+POWERING_UP"),  # booting
                   "spot-4": node("spot-4", "IDLE+CLOUD+POWERED_DOWN"),
                   "login": node("login", "IDLE")}  # not a cloud node of any pool
    cloud.instances["i-2"] = CloudInstance("i-2", "running",
                                           {TAG_CLUSTER: "unit", TAG_NODE: "spot-2"},
                                           launched_at=T0)
    r.tick()
    grace = r.cfg.daemon.lost_node_grace_s
    clock.now += timedelta(seconds=grace - 1)
    r.tick()
    assert slurm.powered_down == [], "not before the grace has passed"
    slurm.fail = True  # a pass that cannot read Slurm decides nothing
    clock.now += timedelta(seconds=2)
    r.tick()
    assert slurm.powered_down == []
    slurm.fail = False
    r.tick()
    assert slurm.powered_down == [(["spot-1"], Why.LOST.value)]
    assert [e.kind for e in r.store.events()].count("node_without_instance") == 1


def test_a_node_slurm_holds_down_after_resume_timeout_is_returned_to_service(world) -> None:  # type: ignore[no-untyped-def]
    """Real 22.05 leaves a node whose resume ran into ResumeTimeout
    DOWN+CLOUD+POWERED_DOWN+NOT_RESPONDING for good (ResumeFailProgram changes nothing in
    Slurm; the pool loses the node and jobs wait "Nodes required for job are DOWN"): after the
    grace it is powered down again, with an event, and `status` leads with it. A node an admin
    set DOWN, a drained one, and one with an instance behind it are left alone."""
    from slurmscale.cli_status import render
    from slurmscale.cloud.protocol import TAG_CLUSTER, TAG_NODE, CloudInstance
    from slurmscale.model import SlurmNode
    from slurmscale.slurm.reasons import Why

    r, cloud, slurm, clock, _spool = world
    timed_out = "ResumeTimeout reached [slurm@2026-12-07T05:02:40]"
    slurm.table = {
        "spot-1": SlurmNode("spot-1", "DOWN+CLOUD+POWERED_DOWN+NOT_RESPONDING", "spot-1",
                            "spot-1", timed_out),
        "spot-2": SlurmNode("spot-2", "DOWN+CLOUD+POWERED_DOWN", "spot-2", "spot-2",
                            "disk swap [admin@2026-12-07T05:00:00]"),  # the admin's
        "spot-3": SlurmNode("spot-3", "DOWN+DRAIN+CLOUD+POWERED_DOWN+NOT_RESPONDING",
                            "spot-3", "spot-3", timed_out),  # drained: the admin's too
        "spot-4": SlurmNode("spot-4", "DOWN+CLOUD+POWERED_DOWN+NOT_RESPONDING", "spot-4",
                            "spot-4", timed_out)}  # an instance still runs for it
    cloud.instances["i-4"] = CloudInstance("i-4", "running",
                                           {TAG_CLUSTER: "unit", TAG_NODE: "spot-4"},
                                           launched_at=T0)
    r.tick()
    assert slurm.powered_down == [], "not before the grace"
    clock.now += timedelta(seconds=r.cfg.daemon.lost_node_grace_s)
    r.tick()
    assert slurm.powered_down == [(["spot-1"], f"{Why.STUCK.value} {timed_out}")]
    (e,) = [e for e in r.store.events() if e.kind == "node_stuck"]
    assert e.node == "spot-1" and "ResumeTimeout reached" in e.message
    r.tick()
    assert len(slurm.powered_down) == 1, "once"
    d = {"cluster": "unit", "daemon": {"reachable": True, "role": "leader"}, "pools": [],
         "reservations": [], "resume_timeouts_1h": ["spot-1"]}
    lead = render({**d, **{k: [] for k in ("backoff", "pending_requests", "recent_errors",
                                           "paid_capacity", "replacing", "in_grace",
                                           "boot_failures_24h", "quarantined_rows")},
                   "slurm_error": None, "replaced_24h": 0}).splitlines()[1]
    assert lead.startswith("  NODES RAN INTO RESUMETIMEOUT (1h): spot-1")


def test_a_node_left_addressed_at_a_released_instance_is_reset_once_slurm_answers(world) -> None:  # type: ignore[no-untyped-def]
    from slurmscale.model import SlurmNode
    from slurmscale.slurm.protocol import SlurmError

    r, cloud, slurm, clock, spool = world
    node = lambda name, state: SlurmNode(name, state, name, name)  # noqa: E731
    slurm.table = {"spot-1": node("spot-1", "IDLE+CLOUD+POWERING_UP"),
                   "spot-2": node("spot-2", "IDLE+CLOUD+POWERING_UP")}
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    assert slurm.table["spot-1"].addr == "10.0.0.1" and slurm.table["spot-2"].addr != "spot-2"
    # Slurm powers spot-1 down; slurmctld stops answering updates just as it is released
    slurm.table["spot-1"] = SlurmNode("spot-1", "IDLE+CLOUD+POWERED_DOWN", "10.0.0.1", "spot-1")
    # in transition
    slurm.table["spot-2"] = SlurmNode("spot-2", "IDLE+CLOUD+POWERING_DOWN", "10.0.0.2", "spot-2")
    # an address from slurm.conf (the admin's, never an instance's) is not slurmscale's to reset
    slurm.table["spot-3"] = SlurmNode("spot-3", "IDLE+CLOUD+POWERED_DOWN", "10.9.9.9", "spot-3")
    real, refusals = slurm.set_node_address, [2]

    def flaky(name: str, addr: str, hostname: str) -> None:
        if refusals[0] > 0:
            refusals[0] -= 1
            raise SlurmError(["scontrol"], 1, "Unable to contact slurm controller")
        real(name, addr, hostname)
    slurm.set_node_address = flaky
    hook(spool, clock, RequestKind.SUSPEND, {0: ["spot-1"]})
    clock.now += timedelta(seconds=5)
    r.tick()
    assert [i.state for i in cloud.instances.values()].count("terminated") == 1
    assert slurm.table["spot-1"].addr == "10.0.0.1", "both resets refused"
    clock.now += timedelta(seconds=5)
    r.tick()
    assert (slurm.table["spot-1"].addr, slurm.table["spot-1"].hostname) == ("spot-1", "spot-1")
    assert slurm.table["spot-2"].addr == "10.0.0.2", "a node in transition is left alone"
    assert slurm.table["spot-3"].addr == "10.9.9.9"
    (e,) = [e for e in r.store.events() if e.kind == "node_address_reset"]
    assert e.node == "spot-1" and "10.0.0.1" in e.message
    r.tick()
    assert [e.kind for e in r.store.events()].count("node_address_reset") == 1


def test_a_node_seen_with_an_instance_again_starts_its_grace_over() -> None:
    from slurmscale.daemon.passes.lost_nodes import LostNodes

    store = MemoryStore()
    lost = LostNodes(60, store)
    kept = Effects(FakeSlurm(), store, lambda *_a, **_k: None)

    def due(nodes: set[str], at: datetime) -> list[str]:
        out, waits = lost.due(nodes, at)
        kept.apply([waits])
        return out
    assert due({"a"}, T0) == []
    assert due(set(), T0 + timedelta(seconds=30)) == []  # it came back
    assert due({"a"}, T0 + timedelta(seconds=70)) == []
    assert due({"a"}, T0 + timedelta(seconds=130)) == ["a"]


def test_a_lost_nodes_wait_is_on_the_store_and_a_standby_acts_when_the_leader_would_have(
        ) -> None:
    """The leader saw node a without an instance at T0 and died; the standby taking over
    (a new LostNodes on the same store) powers it down at T0 + grace, not a grace after."""
    from slurmscale.daemon.passes.lost_nodes import LostNodes

    store = MemoryStore()
    kept = Effects(FakeSlurm(), store, lambda *_a, **_k: None)

    def due(lost: LostNodes, nodes: set[str], at: datetime) -> list[str]:
        out, waits = lost.due(nodes, at)
        kept.apply([waits])
        return out
    assert due(LostNodes(60, store), {"a", "b"}, T0) == []
    assert store.timers(LostNodes.KIND) == {"a": T0.timestamp(), "b": T0.timestamp()}
    standby = LostNodes(60, store)
    assert due(standby, {"a"}, T0 + timedelta(seconds=59)) == []  # b came back meanwhile
    assert due(standby, {"a"}, T0 + timedelta(seconds=60)) == ["a"]
    assert store.timers(LostNodes.KIND) == {}


def test_metrics_count_launches_by_outcome_and_every_event(cfg) -> None:  # type: ignore[no-untyped-def]
    from slurmscale.daemon.metrics import Metrics

    store = Store(cfg.store_url)
    store.upgrade()
    cloud, slurm, clock = FakeCloud(), FakeSlurm(), Clock()
    m = Metrics()
    r = Reconciler(cfg, store, slurm, cloud, clock=clock, metrics=m)
    spool = Spool(cfg.spool_dir)
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    cloud.give = 1
    hook(spool, clock, RequestKind.RESUME, {2: ["spot-3", "spot-4"]})
    r.tick()
    m.job_started("gpu-spot", 2, 90.0)
    assert r.capacity.last is not None  # the pass's limit_use, as the service exports it
    m.limit_uses(r.capacity.last.limit_use)
    text = m.text()
    store.close()
    assert 'slurmscale_reservation_limit_use{pool="gpu-spot"} 1.0' in text  # (no jobs yet)
    assert 'slurmscale_reservation_limit_use_jobs{pool="gpu-spot"} 0.0' in text
    assert ('slurmscale_launches_total{capacity_type="spot",code="",pool="gpu-spot",'
            'result="launched"} 1.0') in text
    assert ('slurmscale_launches_total{capacity_type="spot",'
            'code="InsufficientInstanceCapacity",pool="gpu-spot",result="failed"} 1.0') in text
    assert 'slurmscale_events_total{kind="launch_failed"} 1.0' in text
    assert 'slurmscale_gang_time_to_start_seconds_count{pool="gpu-spot"} 1.0' in text
    assert 'slurmscale_gang_time_to_start_seconds_bucket{le="120.0",pool="gpu-spot"} 1.0' in text


def test_a_tracked_instance_of_a_node_slurm_does_not_have_is_terminated_after_the_grace(
        world) -> None:
    """Before the fix an instance launched for a node Slurm refused (a name it does not
    have) ran on for good: tracked, so never a leak."""
    from slurmscale.model import SlurmNode

    r, cloud, slurm, clock, spool = world
    slurm.table = {"spot-1": SlurmNode("spot-1", "IDLE+CLOUD+POWERED_DOWN", "spot-1",
                                       "spot-1")}
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})  # spot-2: not in Slurm
    r.tick()
    assert len(cloud.running()) == 2
    clock.now += timedelta(seconds=r.cfg.daemon.leak_grace_s - 1)
    r.tick()
    assert len(cloud.running()) == 2, "not before the grace"
    clock.now += timedelta(seconds=2)
    r.tick()
    assert {i.tags["slurmscale:node"] for i in cloud.running()} == {"spot-1"}
    assert {i.node for i in r.store.active_instances()} == {"spot-1"}
    assert any(e.kind == "leak_terminated" and "spot-2" in e.message
               for e in r.store.events(limit=50))
    slurm.table = {}  # an empty node list proves nothing: nothing terminated on it
    clock.now += timedelta(hours=1)
    r.tick()
    assert len(cloud.running()) == 1


BAD_SPOOL_FILES = [
    '{"id": "1796026821727-57652a53acac", "kind": "resume", "nodes": ["spot-3"], '
    '"hostlist": "spot-3", "resume_file": null, "received_at": 1e20}',  # the audit's file
    '{"id": "1796026821727-57652a53acad", "kind": "resume", "nodes": ["spot-3"], '
    '"hostlist": "spot-3", "resume_file": null, "received_at": NaN}',
    '{"id": "x", "kind": "resume", "nodes": ["spot-3"], "hostlist": "spot-3", '
    '"received_at": 1}',
    '{"id": "1796026821727-57652a53acae", "kind": "resume", "nodes": ["spot-\\uff13"], '
    '"hostlist": "spot-3", "received_at": 1}',
    '[1, 2]', '[' * 100000, '\xff\xfe not utf-8',
]


@pytest.mark.parametrize("text", BAD_SPOOL_FILES, ids=range(len(BAD_SPOOL_FILES)))
def test_a_bad_spool_file_is_set_aside_and_the_pass_goes_on(world, text: str) -> None:  # type: ignore[no-untyped-def]
    """Before the fix `received_at: 1e20` raised OverflowError inside drain_spool: every
    pass failed before doing anything, and a job sat CONFIGURING until the file was removed."""
    r, cloud, _slurm, clock, spool = world
    spool.ensure()
    bad = spool.incoming / "0000000000000-000000000000.json"
    bad.write_bytes(text.encode("utf-8", "surrogateescape") if "\xff" not in text
                    else text.encode("latin-1"))
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    res = r.tick()
    assert res.launched_gangs == 1 and len(cloud.running()) == 2
    assert not bad.exists() and (spool.rejected / bad.name).exists()
    assert [e.kind for e in r.store.events()].count("spool_rejected") == 1


@pytest.mark.parametrize("kind", ["fifo", "link-to-dev-zero", "huge"])
def test_a_spool_file_that_is_no_file_of_a_hooks_is_set_aside_unread(world, kind: str) -> None:  # type: ignore[no-untyped-def]
    """Read like the resume file (before: a FIFO named *.json hung every pass while the
    daemon answered health; a link to /dev/zero failed every pass with MemoryError; a 200 MB
    file was read whole before it was refused)."""
    import time

    r, cloud, _slurm, clock, spool = world
    spool.ensure()
    bad = spool.incoming / "0000000000000-000000000000.json"
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "link-to-dev-zero":
        bad.symlink_to("/dev/zero")
    else:
        with open(bad, "wb") as f:  # (sparse: 200 MB to read, nothing on disk)
            f.truncate(200 * 1024 * 1024)
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    t0 = time.monotonic()
    res = r.tick()
    assert time.monotonic() - t0 < 5
    assert res.launched_gangs == 1 and len(cloud.running()) == 2
    assert not os.path.lexists(bad) and os.path.lexists(spool.rejected / bad.name)
    (why,) = [e.message for e in r.store.events() if e.kind == "spool_rejected"]
    assert {"fifo": "not a regular file", "link-to-dev-zero": "a symbolic link",
            "huge": "larger than"}[kind] in why, why


def test_a_spool_file_the_store_cannot_take_is_set_aside(world, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    r, cloud, _slurm, clock, spool = world
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1"]})
    monkeypatch.setattr(r.store, "add_request", lambda req: 1 / 0)
    r.tick()
    assert len(list(spool.rejected.glob("*.json"))) == 1
    assert "ZeroDivisionError" in next(e.message for e in r.store.events()
                                       if e.kind == "spool_rejected")


def test_an_unreadable_request_row_is_failed_and_the_others_go_on(world) -> None:  # type: ignore[no-untyped-def]
    from slurmscale.store.rows import RequestRow

    r, cloud, _slurm, clock, spool = world
    with r.store.session() as s:
        s.add(RequestRow(id="bad-row", kind="resume", hostlist="x", nodes="{not json",
                         received_at=T0, status="pending"))
        s.commit()
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    assert r.tick().launched_gangs == 1
    assert {q.id: q.status for q in r.store.requests()}["bad-row"] == "failed"


def test_an_address_write_that_failed_is_retried_every_pass_until_it_holds(world) -> None:  # type: ignore[no-untyped-def]
    """Before the fix a failed `scontrol update nodeaddr=` after a launch was never retried:
    slurmctld could not reach the new slurmd, the job requeued and a second launch followed."""
    from slurmscale.model import SlurmNode

    r, cloud, slurm, clock, spool = world
    for n in ("spot-1", "spot-2"):
        slurm.table[n] = SlurmNode(n, "ALLOCATED+CLOUD+POWERING_UP", n, n)
    real = slurm.set_node_address
    slurm.set_node_address = lambda *a: (_ for _ in ()).throw(
        SlurmError(["scontrol"], 1, "Unable to contact slurm controller"))
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    assert slurm.table["spot-1"].addr == "spot-1", "the write failed"
    r.tick()  # slurmctld still down: tried again, still failing, nothing else breaks
    slurm.set_node_address = real
    r.tick()
    assert {slurm.table[n].addr for n in ("spot-1", "spot-2")} == {"10.0.0.1"}
    kinds = [e.kind for e in r.store.events(limit=100)]
    assert kinds.count("node_address_fixed") == 2
    r.tick()
    assert [e.kind for e in r.store.events(limit=100)].count("node_address_fixed") == 2, \
        "nothing to do once it holds"
    assert len(cloud.launches) == 1


def test_a_gang_failed_before_a_restart_fails_its_requests_and_is_not_launched_again(
        world) -> None:
    """The daemon died after rolling a gang back and before failing its request: on the next
    pass the request fails; launching again would be an attempt Slurm never asked for (and
    failed -> launched is no edge of the gang's lifecycle)."""
    from sqlalchemy import update

    from slurmscale.store.rows import RequestRow

    r, cloud, slurm, clock, spool = world
    cloud.error = CloudError("InsufficientInstanceCapacity", "none left")
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    with r.store.session() as s:  # as if the pass had died before this write
        s.execute(update(RequestRow).values(status="pending", processed_at=None, error=None))
        s.commit()
    cloud.error = None
    launches = len(cloud.launches)
    res = r.tick()
    assert res.failed_gangs == 1 and len(cloud.launches) == launches
    assert [q.status for q in r.store.requests()] == ["failed"]
    assert r.store.gangs()[0].status == "failed"


def test_a_gang_update_slurm_refuses_is_retried_node_by_node(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, slurm, clock, spool = world

    def refuse(entries: list[tuple[str, str, str]]) -> None:
        raise SlurmError(["scontrol"], 1, "Invalid node name specified")
    slurm.set_node_addresses = refuse
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2", "spot-3"]})
    assert r.tick().launched_gangs == 1
    assert set(slurm.addresses) == {"spot-1", "spot-2", "spot-3"}


def _reads(slurm: FakeSlurm) -> list[list[str] | None]:
    """Every node read the pass makes (None: all nodes), recorded on the fake."""
    seen: list[list[str] | None] = []
    inner = slurm.nodes

    def nodes(names: list[str] | None = None):  # type: ignore[no-untyped-def]
        seen.append(None if names is None else list(names))
        return inner(names)
    slurm.nodes = nodes
    return seen


def test_a_pass_reads_the_nodes_once_and_the_capacity_pass_sees_the_upkeeps_writes(
        world, monkeypatch) -> None:
    """The backoff drains an unavailable pool's powered-down nodes AFTER the pass's one node
    read: the capacity pass must decide on them drained (a re-read of just those nodes), not
    as the read left them (idle capacity)."""
    from slurmscale.model import SlurmNode
    from slurmscale.store.rows import OfferingRow

    r, _, slurm, clock, _ = world
    slurm.table.update({n: SlurmNode(n, "IDLE+CLOUD+POWERED_DOWN", n, n)
                        for n in ("spot-1", "spot-2", "od-1")})
    seen_by_capacity: list[list[SlurmNode] | None] = []
    run = r.capacity.run

    def capacity_run(now, nodes=None):  # type: ignore[no-untyped-def]
        seen_by_capacity.append(nodes)
        return run(now, nodes)
    monkeypatch.setattr(r.capacity, "run", capacity_run)
    reads = _reads(slurm)
    r.tick()
    assert reads == [None], "a quiet pass reads the nodes once"
    r.store.put_offering(OfferingRow(pool="gpu-spot", until_s=clock.now.timestamp() + 600,
                                     repeats=1, last_code="InsufficientInstanceCapacity",
                                     updated_at=clock.now))
    reads.clear()
    r.tick()
    assert reads == [None, ["spot-1", "spot-2"]], "one read, then just the nodes it drained"
    seen = {n.name: n for n in seen_by_capacity[-1] or []}
    assert "DRAIN" in seen["spot-1"].flags and "DRAIN" in seen["spot-2"].flags
    assert "DRAIN" not in seen["od-1"].flags


def test_a_write_whose_nodes_are_unknown_makes_the_capacity_pass_read_again() -> None:
    from slurmscale.model import SlurmNode
    from slurmscale.slurm.node_writes import NodeWrites

    fake = FakeSlurm(table={"a-1": SlurmNode("a-1", "ALLOCATED+CLOUD", "x", "x")})
    w = NodeWrites(fake)
    read = w.nodes()
    assert w.current(read) is read
    w.drain(["a-1"], "r")
    assert "DRAIN" in (w.current(read) or [])[0].flags
    w.nodes()
    w.requeue("7")
    assert w.current(read) is None, "a requeue moves a job off nodes it does not name"
    w.nodes()
    assert w.current(read) is read, "a full read starts over"


@pytest.mark.skipif(os.geteuid() != 0, reason="root writing another user's spool")
def test_a_request_root_spools_in_slurmusers_spool_is_slurmusers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An admin's `sudo slurmscale resume` into the spool of a daemon running as SlurmUser:
    before, the file was root's 0640 and the daemon could not read it (set aside)."""
    spool = Spool(tmp_path / "spool")
    spool.ensure()
    for d in (spool.root, spool.incoming, spool.tmp, spool.rejected):
        os.chown(d, 12345, 12345)
    path = spool.put(spool.new_request(RequestKind.RESUME, ["spot-1"], "spot-1", None))
    assert (path.stat().st_uid, path.stat().st_gid) == (12345, 12345)


def test_a_pass_says_where_its_time_went(cfg) -> None:  # type: ignore[no-untyped-def]
    """Seconds by phase and by what was waited on: a Slurm that takes 50 ms a call shows as
    the Slurm wait, inside the phases that called it."""
    import time as _time

    from slurmscale.daemon.metrics import Metrics
    from slurmscale.daemon.pass_times import PassTimes

    class SlowSlurm(FakeSlurm):
        def nodes(self, *a, **k):  # type: ignore[no-untyped-def]
            _time.sleep(0.05)
            return super().nodes(*a, **k)

    store = Store(cfg.store_url)
    store.upgrade()
    cloud, slurm, clock = FakeCloud(), SlowSlurm(), Clock()
    r = Reconciler(cfg, store, slurm, cloud, clock=clock, times=PassTimes())
    hook(Spool(cfg.spool_dir), clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    res = r.tick()
    store.close()
    assert {"requests", "interruptions", "sweep", "boots", "health", "blocks", "upkeep",
            "capacity", "keep_up"} <= set(res.phase_seconds)
    assert {"Slurm", "EC2", "store"} <= set(res.wait_seconds)
    assert res.wait_seconds["Slurm"] >= 0.05  # (the sweep's read at least)
    assert res.phase_seconds["sweep"] >= 0.05
    assert sum(res.phase_seconds.values()) >= res.wait_seconds["Slurm"]
    assert r.times.take() == ({}, {}), "each pass's figures are its own"
    m = Metrics()
    m.pass_times(res.phase_seconds, res.wait_seconds)
    assert 'slurmscale_pass_wait_seconds_total{on="Slurm"}' in m.text()
    assert 'slurmscale_pass_phase_seconds_total{phase="capacity"}' in m.text()


def test_the_sweep_lists_what_is_up_and_asks_for_vanished_ones_by_id(world) -> None:  # type: ignore[no-untyped-def]
    """A pass's EC2 read costs what is up, not what ran: terminated instances (EC2 lists
    them for up to an hour, moto for ever) are asked for only by the id of one the store
    still has running, and that one is still found vanished."""
    r, cloud, slurm, clock, spool = world
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    r.tick()
    for n in ("spot-1", "spot-2"):
        slurm.table[n] = SlurmNode(n, "ALLOCATED+CLOUD", "10.0.0.1", n)
    slurm.queue = [QueueJob("1", ("gpu-spot",), 2, 8, 3600, "", "", 1, "u", "RUNNING",
                            nodelist="spot-[1-2]")]
    gone = next(i.instance_id for i in cloud.running() if i.tags["slurmscale:node"] == "spot-1")
    for _ in range(3):  # instances that ended long ago stay listed as terminated
        cloud.instances[f"i-old{_}"] = replace(cloud.running()[0], instance_id=f"i-old{_}",
                                               state="terminated")
    cloud.finds.clear()
    r.tick()
    assert cloud.finds == [({"slurmscale:cluster": "unit"}, False, None)]
    cloud.reclaim(gone)
    cloud.finds.clear()
    r.tick()
    assert cloud.finds == [({"slurmscale:cluster": "unit"}, False, None),
                           ({"slurmscale:cluster": "unit"}, True, [gone])]
    assert ("requeue", ["1"]) in slurm.calls, "the vanished instance's job requeued"


def test_a_write_that_loses_a_race_skips_its_phase_and_the_pass_goes_on(world, cfg, caplog) -> None:  # type: ignore[no-untyped-def]
    """An admin's `reservations release` lands between the daemon's read of a hold (active)
    and its write, conditioned on that read (`WHERE state = 'active'`, the store's own
    machinery): ChangedMeanwhile, nothing written. Before, it escaped `tick` and the rest of
    the pass never ran; now that phase ends with a warning, the later phases run, the
    admin's release stands, and the next pass is whole."""
    import logging
    from dataclasses import replace

    from slurmscale.lifecycles import HoldState
    from slurmscale.store import tables as t
    from slurmscale.store.repo import Store
    from slurmscale.store.rows import HoldRow

    r, cloud, _slurm, clock, spool = world
    hold = HoldRow(name="ss-hold-1", pool="gpu-spot", job_id="7", user_name="u", needed=4,
                   nodes="[]", created_s=0.0, accounted_s=0.0, state=HoldState.ACTIVE.value)
    r.store.put_hold(hold)
    read = r.store.hold("ss-hold-1")  # the daemon's read: active
    admin = Store(cfg.store_url)
    admin.put_hold(replace(hold, state=HoldState.RELEASED.value, reason="admin"))
    admin.close()

    def health_writes_what_it_read(*_a: object) -> None:  # (as a pass writes a hold it read)
        assert read is not None
        with r.store.session() as s:
            Store._where_was(s, t.holds.c.name, t.holds.c.state, [read.name], read.state,
                             {"spent_gpu_s": 10.0}, f"hold {read.name}")

    r.health.run = health_writes_what_it_read  # type: ignore[method-assign]
    hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
    with caplog.at_level(logging.WARNING):
        res = r.tick()
    assert res.launched_gangs == 1 and len(cloud.running()) == 2  # phases before it ran
    assert r.capacity.last is not None  # ... and the ones after it
    assert [m for m in caplog.messages if "changed by another writer" in m] == [
        "health: hold ss-hold-1: changed by another writer after it was read as 'active'; "
        "nothing written; it is decided again next pass"]
    row = r.store.hold("ss-hold-1")
    assert row is not None and row.state == "released" and row.spent_gpu_s == 0.0
    r.health.run = lambda *_a: None  # type: ignore[method-assign]
    r.tick()
