"""EC2 events from SQS: parsing at the boundary (fuzzed) and the daemon's reaction on a fake
Slurm with the real store."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmscale.cloud.eventbridge import EventError, EventKind, parse_event
from slurmscale.cloud.protocol import CloudInstance
from slurmscale.config_file import parse_config
from slurmscale.daemon.passes.interruptions import InterruptionPass
from slurmscale.model import QueueJob, SlurmNode
from slurmscale.slurm.protocol import SlurmError
from slurmscale.slurm.reasons import Why
from slurmscale.store.repo import Store
from slurmscale.store.rows import InstanceRow, TimerKind
from tests.support.eventbridge_messages import ec2_event
from tests.support.fakes import FakeQueue, FakeSlurm, pass_context
from tests.unit.conftest import base_config

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_the_three_ec2_events_parse() -> None:
    w = parse_event(ec2_event("EC2 Spot Instance Interruption Warning", "i-0123456789abcdef0",
                              **{"instance-action": "terminate"}))
    assert (w.kind, w.instance_id, w.action) == (EventKind.SPOT_WARNING, "i-0123456789abcdef0",
                                                 "terminate")
    r = parse_event(ec2_event("EC2 Instance Rebalance Recommendation", "i-0123456789abcdef0"))
    assert r.kind is EventKind.REBALANCE
    s = parse_event(ec2_event("EC2 Instance State-change Notification", "i-0123456789abcdef0",
                              state="shutting-down"))
    assert (s.kind, s.state) == (EventKind.STATE_CHANGE, "shutting-down")


@pytest.mark.parametrize(("body", "needle"), [
    ("not json", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
    (json.dumps({"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning",
                 "detail": {"instance-id": "sda1"}}), "detail.instance-id"),
    (json.dumps({"source": "aws.s3", "detail-type": "Object Created",
                 "detail": {"instance-id": "i-0123456789abcdef0"}}), "'aws.s3'"),
    (ec2_event("EC2 AMI State Change", "i-0123456789abcdef0"), "'EC2 AMI State Change'"),
])
def test_bad_messages_say_what_is_wrong(body: str, needle: str) -> None:
    with pytest.raises(EventError) as e:
        parse_event(body)
    assert needle in str(e.value)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=12), c, max_size=4),
    max_leaves=12).map(json.dumps)))
def test_any_message_parses_or_fails_with_an_event_error(body: str) -> None:
    try:
        parse_event(body)
    except EventError:
        pass


def store_with_spot_instance(url: str) -> Store:
    """A store tracking one running spot instance, i-0000000000000001 on spot-1."""
    store = Store(url)
    store.upgrade()
    store.add_instances([InstanceRow(instance_id="i-0000000000000001", node="spot-1",
                                     pool="gpu-spot", gang_id="g", instance_type="p5.48xlarge",
                                     lifecycle="spot", launch_template_version="3",
                                     state="running", launched_at=T0)])
    return store


def spot_world(tmp_path, **pool: object):  # type: ignore[no-untyped-def]
    """The config (the first pool's keys overridden by `pool`), a store tracking
    i-0000000000000001 on spot-1, Slurm running job 42 on spot-[1-2], an empty queue."""
    d = base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}")
    d["pools"][0].update(pool)
    cfg = parse_config(d)
    store = store_with_spot_instance(cfg.store_url)
    slurm = FakeSlurm(table={"spot-1": SlurmNode("spot-1", "ALLOCATED+CLOUD", "127.0.0.1",
                                                 "spot-1")})
    slurm.queue = [QueueJob("42", ("gpu-spot",), 2, 8, 3600, "2026-11-29T11:00:00", "None",
                            100, "alice", "RUNNING", nodelist="spot-[1-2]")]
    return cfg, store, slurm, FakeQueue()


@pytest.fixture
def world(tmp_path):  # type: ignore[no-untyped-def]
    cfg, store, slurm, q = spot_world(tmp_path, fallback_pool="gpu-od")
    events: list[tuple[str, str]] = []
    p = InterruptionPass(pass_context(cfg, store, slurm,
                                      lambda k, m, **_: events.append((k, m)), queue=q))
    yield p, slurm, q, store, events
    store.close()


def test_a_spot_warning_drains_requeues_records_and_powers_down(world) -> None:  # type: ignore[no-untyped-def]
    p, slurm, q, store, events = world
    q.bodies.append(ec2_event("EC2 Spot Instance Interruption Warning", "i-0000000000000001",
                              **{"instance-action": "terminate"}))
    assert p.run(T0) == 1
    ops = [c[0] for c in slurm.calls]
    assert ops.index("drain") < ops.index("requeue") < ops.index("power_down_force")
    assert ("requeue", ["42"]) in slurm.calls
    assert slurm.powered_down[0][1].startswith(Why.INTERRUPTED.value + " 2026-11-29T12:00:00Z")
    (pre,) = store.preemptions("42")
    assert (pre.node, pre.instance_id, pre.lifecycle) == ("spot-1", "i-0000000000000001",
                                                          "spot")
    assert q.deleted == ["0"]
    assert [k for k, _ in events] == ["job_requeued", "node_evacuated"]
    # powered down and drained by us -> returned to service by the node upkeep
    p.return_powered_down_nodes(slurm.nodes())
    assert ("undrain", ["spot-1"]) in slurm.calls


@pytest.mark.parametrize("completes", [True, False])
def test_a_node_is_powered_down_once_its_requeued_jobs_are_off_it(world, completes: bool) -> None:  # type: ignore[no-untyped-def]
    """After `scontrol requeue` Slurm is still completing the job on the node (KillWait, the
    epilog): the power-down waits for that, so that Slurm's requeue delay is kept (22.05
    drops it when the job's last completing node is powered down under it, and restarts the
    job at once on nodes that have just revoked its credential: FAILED). The message is
    handled (deleted) at once; a node that never finishes is powered down after the wait."""
    from datetime import timedelta

    from slurmscale.daemon.passes.evacuation import COMPLETING_WAIT_S

    p, slurm, q, store, events = world
    plain = slurm.requeue

    def requeue(job_id: str, node: str = "") -> None:  # as slurmctld: the node COMPLETING
        plain(job_id)
        n = slurm.table["spot-1"]
        slurm.table["spot-1"] = replace(n, state=n.state + "+COMPLETING")
    slurm.requeue = requeue
    q.bodies.append(ec2_event("EC2 Spot Instance Interruption Warning", "i-0000000000000001"))
    p.run(T0)
    assert q.deleted == ["0"] and ("requeue", ["42"]) in slurm.calls
    assert not slurm.powered_down and [k for k, _ in events] == ["job_requeued"]
    p.run(T0 + timedelta(seconds=5))
    assert not slurm.powered_down, "still completing there"
    if completes:
        n = slurm.table["spot-1"]
        slurm.table["spot-1"] = replace(n, state=n.state.replace("+COMPLETING", ""))
        at = T0 + timedelta(seconds=7)
    else:
        at = T0 + timedelta(seconds=COMPLETING_WAIT_S)
    p.run(at)
    assert [n for n, _ in slurm.powered_down] == [["spot-1"]]
    assert [k for k, _ in events] == ["job_requeued", "node_evacuated"]
    assert "1 job(s) requeued, node powered down" in events[-1][1]
    p.run(at + timedelta(seconds=1))
    assert len(slurm.powered_down) == 1 and len(store.preemptions("42")) == 1


def test_a_standby_that_takes_over_mid_wait_powers_the_node_down_when_the_leader_would_have(
        world) -> None:  # type: ignore[no-untyped-def]
    """The leader requeued the node's jobs and waits for Slurm to finish completing them
    there; it is gone before the power-down. The evacuation is on the store: the standby's
    pass (a new InterruptionPass on the same store) powers the node down at the leader's
    moment, says it once, and the message is not needed again. (In memory alone the node
    stayed drained with its instance running.)"""
    from datetime import timedelta

    from slurmscale.daemon.passes.evacuation import COMPLETING_WAIT_S

    p, slurm, q, store, events = world
    plain = slurm.requeue

    def requeue(job_id: str, node: str = "") -> None:
        plain(job_id)
        n = slurm.table["spot-1"]
        slurm.table["spot-1"] = replace(n, state=n.state + "+COMPLETING")  # for good
    slurm.requeue = requeue
    q.bodies.append(ec2_event("EC2 Spot Instance Interruption Warning", "i-0000000000000001"))
    p.run(T0)
    assert q.deleted == ["0"] and not slurm.powered_down
    standby = InterruptionPass(pass_context(p.cfg, store, slurm, lambda k, m, **_: events.append(
        (k, m)), queue=FakeQueue()))
    standby.run(T0 + timedelta(seconds=COMPLETING_WAIT_S - 1))
    assert not slurm.powered_down, "not before the leader would have"
    standby.run(T0 + timedelta(seconds=COMPLETING_WAIT_S))
    assert [n for n, _ in slurm.powered_down] == [["spot-1"]]
    assert [k for k, _ in events] == ["job_requeued", "node_evacuated"]
    assert "1 job(s) requeued" in events[-1][1] and "i-0000000000000001" in events[-1][1]
    assert store.timers(TimerKind.EVACUATING) == {}
    standby.run(T0 + timedelta(seconds=COMPLETING_WAIT_S + 1))
    assert len(slurm.powered_down) == 1


def test_a_gone_instances_node_is_powered_down_seconds_after_the_requeue(world) -> None:  # type: ignore[no-untyped-def]
    """A terminated instance's slurmd never reports its jobs completed: the power-down
    waits only GONE_WAIT_S (out of the second the other nodes revoked the job's credential
    in), not for a completion that cannot come."""
    from datetime import timedelta

    from slurmscale.daemon.passes.evacuation import GONE_WAIT_S

    p, slurm, q, _store, _events = world
    n = slurm.table["spot-1"]
    slurm.table["spot-1"] = replace(n, state=n.state + "+COMPLETING")  # for good
    q.bodies.append(ec2_event("EC2 Instance State-change Notification", "i-0000000000000001",
                              state="terminated"))
    p.run(T0)
    assert q.deleted == ["0"] and not slurm.powered_down
    p.run(T0 + timedelta(seconds=GONE_WAIT_S))
    assert [n for n, _ in slurm.powered_down] == [["spot-1"]]


def test_rebalance_drains_only_and_foreign_or_malformed_messages_are_dropped(world) -> None:  # type: ignore[no-untyped-def]
    p, slurm, q, _store, events = world
    q.bodies += [ec2_event("EC2 Instance Rebalance Recommendation", "i-0000000000000001"),
                 ec2_event("EC2 Spot Instance Interruption Warning", "i-00000000000000ff"),
                 "{not json"]
    assert p.run(T0) == 3
    assert [c[0] for c in slurm.calls] == ["drain"], "a rebalance kills nothing"
    assert q.deleted == ["0", "1", "2"]
    kinds = [k for k, _ in events]
    assert kinds == ["rebalance_drained", "event_dropped", "event_dropped"]
    assert "not an instance slurmscale launched" in events[1][1]
    assert "not JSON" in events[2][1]


def _running_again(store: Store, slurm: FakeSlurm, instance: str) -> None:
    """The job's next run, on a new instance of the same node."""
    store.add_instances([InstanceRow(instance_id=instance, node="spot-1", pool="gpu-spot",
                                     gang_id="g2", instance_type="p5.48xlarge",
                                     lifecycle="spot", launch_template_version="3",
                                     state="running", launched_at=T0)])
    slurm.table["spot-1"] = SlurmNode("spot-1", "ALLOCATED+CLOUD", "127.0.0.1", "spot-1")
    slurm.queue = [j._replace(state="RUNNING", nodelist="spot-[1-2]") for j in slurm.queue]


def test_a_job_preempted_max_preemptions_times_moves_to_the_fallback_partition(world) -> None:  # type: ignore[no-untyped-def]
    p, slurm, q, store, events = world
    q.bodies.append(ec2_event("EC2 Spot Instance Interruption Warning", "i-0000000000000001"))
    p.run(T0)
    assert not [c for c in slurm.calls if c[0] == "set_job_partitions"], "once is not enough"
    _running_again(store, slurm, "i-0000000000000002")
    q.bodies.append(ec2_event("EC2 Spot Instance Interruption Warning", "i-0000000000000002"))
    p.run(T0)
    assert ("set_job_partitions", ["42", "gpu-od"]) in slurm.calls
    steered = [m for k, m in events if k == "job_steered"]
    assert len(steered) == 1 and "preempted 2 time(s)" in steered[0]


def test_an_instance_gone_without_notice_is_found_by_the_sweep_once(world) -> None:  # type: ignore[no-untyped-def]
    p, slurm, _q, store, events = world
    live = CloudInstance("i-0000000000000001", "running", {})
    assert p.sweep([live], T0, store.active_instances()) == 0 and not slurm.calls
    gone = CloudInstance("i-0000000000000001", "terminated", {},
                         state_reason="Server.SpotInstanceTermination")
    assert p.sweep([gone], T0, store.active_instances()) == 1
    assert ("requeue", ["42"]) in slurm.calls
    assert "Server.SpotInstanceTermination" in slurm.powered_down[0][1]
    (pre,) = store.preemptions("42")
    assert pre.kind == "vanished:Server.SpotInstanceTermination"
    # the store still says running until the suspend hook terminates it: not twice
    assert p.sweep([gone], T0, store.active_instances()) == 0
    assert [k for k, _ in events].count("job_requeued") == 1
    # an instance the store does not know, or that EC2 no longer lists, is left alone
    assert p.sweep([CloudInstance("i-00000000000000ff", "terminated", {})], T0,
                   store.active_instances()) == 0


def test_a_standby_does_not_evacuate_again_what_the_leader_evacuated(world) -> None:  # type: ignore[no-untyped-def]
    """The leader evacuated the node (requeued, powered down) and died before the suspend hook
    terminated its instance: the store still says running. The warning delivered again (SQS
    delivers at least once) and EC2 reporting the instance gone reach the standby: the
    evacuation is on the store, so nothing is drained, powered down or said a second time;
    once the instance is terminated the row goes."""
    from slurmscale.daemon.passes.interruptions import EVACUATED

    p, slurm, q, store, events = world
    q.bodies.append(ec2_event("EC2 Spot Instance Interruption Warning", "i-0000000000000001"))
    p.run(T0)
    calls, said = len(slurm.calls), len(events)
    assert [k for k, _ in events].count("node_evacuated") == 1
    assert set(store.timers(EVACUATED)) == {"i-0000000000000001"}
    again = FakeQueue()
    again.bodies.append(ec2_event("EC2 Spot Instance Interruption Warning", "i-0000000000000001"))
    standby = InterruptionPass(pass_context(p.cfg, store, slurm,
                                            lambda k, m, **_: events.append((k, m)), queue=again))
    standby.run(T0 + timedelta(seconds=30))
    gone = CloudInstance("i-0000000000000001", "terminated", {},
                         state_reason="Server.SpotInstanceTermination")
    assert standby.sweep([gone], T0, store.active_instances()) == 0
    assert len(slurm.calls) == calls and len(events) == said, events[said:]
    assert again.deleted == ["0"]  # (handled: moot)
    # the suspend hook terminates it; the next evacuation's write drops the row
    store.mark_terminated(["i-0000000000000001"], T0)
    standby._mark_evacuated("i-0000000000000002", T0)
    assert set(store.timers(EVACUATED)) == {"i-0000000000000002"}


def test_warnings_put_the_spot_pool_in_capacity_backoff_once(world) -> None:  # type: ignore[no-untyped-def]
    from slurmscale.daemon.passes.backoff import CapacityBackoff

    p, slurm, q, store, events = world
    p.backoff = CapacityBackoff(pass_context(p.cfg, store, slurm,
                                              lambda k, m, **_: events.append((k, m))))
    store.add_instances([InstanceRow(instance_id="i-0000000000000002", node="spot-2",
                                     pool="gpu-spot", gang_id="g", instance_type="p5.48xlarge",
                                     lifecycle="spot", launch_template_version="3",
                                     state="running", launched_at=T0)])
    slurm.table["spot-2"] = SlurmNode("spot-2", "ALLOCATED+CLOUD", "127.0.0.1", "spot-2")
    for iid in ("i-0000000000000001", "i-0000000000000002"):
        q.bodies.append(ec2_event("EC2 Spot Instance Interruption Warning", iid))
    p.run(T0)
    row = store.offering("gpu-spot")
    assert row is not None and row.repeats == 1 and row.last_code == "SpotInterruption"
    assert row.until_s == T0.timestamp() + 180
    unavailable = [m for k, m in events if k == "capacity_unavailable"]
    assert len(unavailable) == 1 and "gpu-od go there meanwhile" in unavailable[0]


def test_the_pools_powered_down_nodes_are_held_before_the_jobs_are_requeued(world) -> None:  # type: ignore[no-untyped-def]
    """Found in a full run: the requeued gang was placed on the pool's powered-down nodes
    before the pass's upkeep drained them, and that drain (of a node powering up for it)
    requeued it a second time. The pool's nodes are now held when it becomes unavailable,
    before its jobs are requeued."""
    from slurmscale.daemon.passes.backoff import CapacityBackoff

    p, slurm, q, store, events = world
    p.backoff = CapacityBackoff(pass_context(p.cfg, store, slurm,
                                              lambda k, m, **_: events.append((k, m))))
    for i in range(2, 5):
        slurm.table[f"spot-{i}"] = SlurmNode(f"spot-{i}", "IDLE+CLOUD+POWERED_DOWN",
                                             f"spot-{i}", f"spot-{i}")
    q.bodies.append(ec2_event("EC2 Spot Instance Interruption Warning", "i-0000000000000001"))
    p.run(T0)
    held = [i for i, c in enumerate(slurm.calls) if c == ("drain", ["spot-2", "spot-3",
                                                                    "spot-4"])]
    assert held and held[0] < slurm.calls.index(("requeue", ["42"])), slurm.calls
    assert [k for k, _ in events][:2] == ["capacity_unavailable", "nodes_held_no_capacity"]


def test_a_warning_for_a_node_still_booting_records_its_job_even_if_slurm_requeues_it(
        world) -> None:
    """Slurm 22.05 requeues a configuring job itself when its booting node is drained: the
    jobs are read before the drain, and a job Slurm already requeued counts as preempted."""
    p, slurm, q, store, events = world
    drain = slurm.drain

    def drain_like_slurm(names: list[str], reason: str) -> None:
        drain(names, reason)
        slurm.requeue("42")  # what slurmctld does to the configuring job

    def requeue_pending(job_id: str, node: str = "") -> None:
        if slurm.job(job_id).get("JobState") == "PENDING":
            raise SlurmError(["scontrol"], 1, "Job is pending execution")
        slurm.queue = [j._replace(state="PENDING") if j.job_id == job_id else j
                       for j in slurm.queue]

    slurm.drain = drain_like_slurm
    slurm.requeue = requeue_pending
    q.bodies.append(ec2_event("EC2 Spot Instance Interruption Warning", "i-0000000000000001",
                              **{"instance-action": "terminate"}))
    p.run(T0)
    assert [pre.job_id for pre in store.preemptions()] == ["42"]
    assert [k for k, _ in events] == ["job_requeued", "node_evacuated"]


def test_a_warning_handled_while_slurm_is_down_is_kept_and_handled_once_it_answers(world) -> None:  # type: ignore[no-untyped-def]
    """Before the fix the message was deleted even though _evacuate returned early (Slurm
    unreachable): the two-minute warning was lost and the job died with the node."""
    p, slurm, q, store, events = world
    q.bodies.append(ec2_event("EC2 Spot Instance Interruption Warning", "i-0000000000000001"))
    slurm.fail = True
    assert p.run(T0) == 1
    assert q.deleted == [], "kept: SQS brings it back after the visibility timeout"
    assert store.preemptions("42") == []
    slurm.fail = False
    p.run(T0)
    assert q.deleted == ["0"] and ("requeue", ["42"]) in slurm.calls
    assert len(store.preemptions("42")) == 1
    # delivered once more (at least once): nothing is done twice
    q.deleted.clear()
    p.run(T0)
    assert q.deleted == ["0"] and len(store.preemptions("42")) == 1
    assert [c for c in slurm.calls if c[0] == "requeue"] == [("requeue", ["42"])]


def test_a_requeue_done_by_an_unfinished_handling_is_recorded_once(world) -> None:  # type: ignore[no-untyped-def]
    p, slurm, q, store, events = world
    q.bodies.append(ec2_event("EC2 Spot Instance Interruption Warning", "i-0000000000000001"))
    real = slurm.power_down_force
    slurm.power_down_force = lambda *a: (_ for _ in ()).throw(
        SlurmError(["scontrol"], 1, "Unable to contact slurm controller"))
    p.run(T0)
    assert q.deleted == [] and len(store.preemptions("42")) == 1
    # Slurm kept the job on the node (the requeue did not take): handled again, recorded once
    slurm.queue = [j._replace(state="RUNNING", nodelist="spot-[1-2]") for j in slurm.queue]
    slurm.power_down_force = real
    p.run(T0)
    assert q.deleted == ["0"] and len(store.preemptions("42")) == 1
