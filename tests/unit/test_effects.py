"""Effects as data (issue 44): the interruption pass decides from what it read
(`evacuation.on_event`, `evacuation.plan`, pure: no Slurm, EC2 or store in reach) and one
executor (`effects.Effects`) applies what it decided in order, each outcome returned; what
follows an effect (a lost run recorded, a job moved to on-demand, a refused signal's
requeue) is applied only on the outcome it follows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from slurmscale.audit import Kind
from slurmscale.cloud.eventbridge import parse_events
from slurmscale.config import GraceSignal
from slurmscale.daemon.executor import edits
from slurmscale.daemon.executor.edits import EditKind
from slurmscale.daemon.executor.effects import Chain, Effects, Record, Say, Signal, signalled, taken
from slurmscale.daemon.passes.evacuation import (
    GONE_WAIT_S,
    Evacuate,
    Lost,
    Steer,
    on_event,
    plan,
)
from slurmscale.slurm.protocol import SlurmError
from slurmscale.store import tables  # noqa: F401  (rows mapped before any is made)
from slurmscale.store.memory import MemoryStore
from slurmscale.store.rows import GraceRow, InstanceRow, PreemptionCause, PreemptionRow
from tests.support.eventbridge_messages import ec2_event

T0 = datetime(2026, 11, 29, 12, 0, 5, tzinfo=UTC)


def instance(state: str = "running") -> InstanceRow:
    return InstanceRow(instance_id="i-0000000000000001", node="spot-1", pool="gpu-spot",
                       gang_id="g", instance_type="p5.48xlarge", lifecycle="spot",
                       launch_template_version="1", state=state, launched_at=T0)


LOST = Lost(PreemptionCause.INTERRUPTED, "EC2 Spot Instance Interruption Warning",
            "2026-11-29T12:00:00Z", "interrupted")
STEER = Steer("gpu-spot", "gpu-od", 2)


def one(detail_type: str, **detail: Any):  # type: ignore[no-untyped-def]
    (ev,) = parse_events(ec2_event(detail_type, "i-0000000000000001", **detail))
    return ev


def run(job: str, instance_id: str, cause: str = "interrupted") -> PreemptionRow:
    return PreemptionRow(at=T0, job_id=job, node="spot-9", instance_id=instance_id,
                         pool="gpu-spot", instance_type="p5.48xlarge", lifecycle="spot",
                         cause=cause, kind="k", notice_time="t")


def test_a_message_becomes_one_action() -> None:
    INST = instance()
    warning = on_event(one("EC2 Spot Instance Interruption Warning",
                           **{"instance-action": "terminate"}), INST, T0)
    assert isinstance(warning, Evacuate) and warning.reclaimed
    assert warning.lost.cause is PreemptionCause.INTERRUPTED
    # EC2's two minutes from the event's time, not from when it was read
    assert warning.deadline == datetime(2026, 11, 29, 12, 2, 0, tzinfo=UTC)
    gone = on_event(one("EC2 Instance State-change Notification", state="stopped"), INST, T0)
    assert isinstance(gone, Evacuate) and gone.deadline is None and gone.wait_s == GONE_WAIT_S
    assert not gone.reclaimed
    assert on_event(one("EC2 Instance State-change Notification", state="running"),
                    INST, T0) == []
    (drain,) = on_event(one("EC2 Instance Rebalance Recommendation"), INST, T0)  # type: ignore[misc]
    assert isinstance(drain, edits.Edit) and drain.kind is EditKind.DRAIN
    assert drain.said is not None and drain.said[0] is Kind.REBALANCE_DRAINED
    (dropped,) = on_event(one("EC2 Instance Rebalance Recommendation"), None, T0)  # type: ignore[misc]
    assert isinstance(dropped, Say) and dropped.kind is Kind.EVENT_DROPPED
    (moot,) = on_event(one("EC2 Instance Rebalance Recommendation"),  # type: ignore[misc]
                       instance("terminated"), T0)
    assert isinstance(moot, Say) and "already terminated" in moot.text


def test_an_evacuation_is_a_drain_then_each_jobs_requeue_with_what_follows_it() -> None:
    INST = instance()
    runs = {"7": [run("7", INST.instance_id)],  # requeued by an unfinished handling
            "8": [run("8", "i-00000000000000aa")],  # its second lost run: moved
            "9": []}
    p = plan(INST, ["7", "8", "9"], [], None, LOST, runs, STEER, T0, warned=True)
    assert not p.kept
    drain, *steps = p.effects
    assert isinstance(drain, edits.Edit) and drain.kind is EditKind.DRAIN
    assert all(isinstance(s, Chain) and isinstance(s.first, edits.Edit)
               and s.first.kind is EditKind.REQUEUE for s in steps)
    s7, s8, s9 = steps
    assert isinstance(s7, Chain) and s7.then == ()  # not recorded twice
    assert isinstance(s8, Chain) and [type(e).__name__ for e in s8.then] == [
        "Record", "Say", "Edit"]
    move = s8.then[2]
    assert isinstance(move, edits.Edit) and move.partitions == ("gpu-od",)
    assert isinstance(s9, Chain) and [type(e).__name__ for e in s9.then] == ["Record", "Say"]
    # a cause that is not a preemption (a replacement) counts for no move
    unhealthy = Lost(PreemptionCause.UNHEALTHY, "replaced:x", "t", "unhealthy")
    (_, s) = plan(INST, ["8"], [], None, unhealthy, runs, STEER, T0, warned=False).effects
    assert isinstance(s, Chain) and [type(e).__name__ for e in s.then] == ["Record", "Say"]


def test_with_a_grace_each_job_is_signalled_and_requeued_at_once_only_if_slurm_refuses() -> None:
    INST = instance()
    window = (GraceSignal(signal="USR1", margin_s=20), T0 + timedelta(seconds=95))
    open_ = [GraceRow(job_id="5", node="spot-1", instance_id=INST.instance_id, pool="gpu-spot",
                      signal="USR1", signalled_at=T0, requeue_at=T0, state="signalled",
                      cause="interrupted", kind="k", notice_time="t"),
             GraceRow(job_id="6", node="spot-2", instance_id="i-00000000000000bb",
                      pool="gpu-spot", signal="USR1", signalled_at=T0, requeue_at=T0,
                      state="signalled", cause="interrupted", kind="k", notice_time="t")]
    p = plan(INST, ["5", "6", "7"], open_, window, LOST, {}, None, T0, warned=True)
    assert p.kept  # job 5: in its grace for this warning already (a message again)
    _, s6, s7 = p.effects
    assert isinstance(s6, Chain) and isinstance(s6.first, Signal) and s6.first.again
    assert isinstance(s7, Chain) and isinstance(s7.first, Signal) and not s7.first.again
    (requeue,) = s7.otherwise
    assert isinstance(requeue, Chain) and isinstance(requeue.first, edits.Edit)
    # gone, not warned: a grace no longer buys time; its jobs are requeued
    p = plan(INST, ["5"], open_, None, LOST, {}, None, T0, warned=False)
    assert not p.kept and len(p.effects) == 2


class Slurm:
    """Refuses the calls named in `refusing`; records the calls it was sent."""

    def __init__(self, *refusing: str) -> None:
        self.refusing = set(refusing)
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: object, **kw: object) -> dict[str, str]:
            self.calls.append(name)
            if name in self.refusing:
                raise SlurmError(["scontrol", name], 1, "Invalid job id specified")
            return {"JobState": "RUNNING"}
        return call


def said_to(said: list[Kind]) -> Any:
    return lambda kind, msg, **_: said.append(kind)


def test_what_follows_an_effect_is_applied_on_its_outcome_only() -> None:
    INST = instance()
    steps = plan(INST, ["9"], [], None, LOST, {"9": [run("9", "i-00000000000000aa")]}, STEER,
                 T0, warned=True).effects
    for refusing, recorded in (("requeue", 0), ("", 1)):
        slurm, store, said = Slurm(refusing), MemoryStore(), list[Kind]()
        x = Effects(slurm, store, said_to(said))  # type: ignore[arg-type]
        out = x.apply(steps)
        assert len(store.preemptions("9")) == recorded
        assert len(taken(out, EditKind.REQUEUE)) == recorded
        if recorded:
            assert slurm.calls == ["drain", "requeue", "set_job_partitions"]
            assert said == [Kind.JOB_REQUEUED, Kind.JOB_STEERED]
            assert [a.taken for a in out] == [True] * 5
        else:  # refused (and the job not pending): nothing recorded, moved or said but that
            assert slurm.calls == ["drain", "requeue", "job"]
            assert said == [Kind.REQUEUE_FAILED]
            assert not out[1].taken and "Invalid job id" in out[1].error


def test_a_refused_signal_is_said_and_its_job_requeued_at_once() -> None:
    INST = instance()
    window = (GraceSignal(signal="USR1", margin_s=20), T0 + timedelta(seconds=95))
    steps = plan(INST, ["9"], [], window, LOST, {}, None, T0, warned=True).effects
    for refusing, graces in (("signal_job", 0), ("", 1)):
        slurm, store, said = Slurm(refusing), MemoryStore(), list[Kind]()
        x = Effects(slurm, store, said_to(said))  # type: ignore[arg-type]
        out = x.apply(steps)
        assert len(store.graces()) == graces and len(signalled(out)) == graces
        assert ("requeue" in slurm.calls) == (graces == 0)
        assert said == ([Kind.JOB_SIGNALLED] if graces else
                        [Kind.SIGNAL_FAILED, Kind.JOB_REQUEUED])
        assert [isinstance(a.effect, Record) for a in out].count(True) == 1 - graces


def test_addresses_go_in_one_call_and_node_by_node_when_slurm_refuses_it() -> None:
    """Each node's outcome is its own: said with its node when refused (`ADDRESS`), only
    logged when it is set again each pass (`READDRESS`); each success said once."""
    from slurmscale.daemon.executor.effects import Together

    def addresses(again: bool) -> Together:
        return Together(tuple(edits.address(n, "10.0.0.1", n, again=again,
                                            said=(Kind.NODE_ADDRESS_FIXED, n))
                              for n in ("spot-1", "spot-2")))

    slurm, said = Slurm(), list[Kind]()
    out = Effects(slurm, MemoryStore(), said_to(said)).apply([addresses(False)])  # type: ignore[arg-type]
    assert slurm.calls == ["set_node_addresses"] and [a.taken for a in out] == [True, True]
    assert said == [Kind.NODE_ADDRESS_FIXED] * 2
    for again, failed in ((False, [Kind.SLURM_UPDATE_FAILED] * 2), (True, [])):
        slurm, said = Slurm("set_node_addresses", "set_node_address"), list[Kind]()
        out = Effects(slurm, MemoryStore(), said_to(said)).apply([addresses(again)])  # type: ignore[arg-type]
        assert slurm.calls == ["set_node_addresses", "set_node_address", "set_node_address"]
        assert [a.taken for a in out] == [False, False] and said == failed


def test_ec2s_writes_are_effects_each_with_its_own_error_policy() -> None:
    """EC2's writes (issue 44: the launch steps too): a CreateFleet's outcome carries what
    EC2 gave, or its refusal's code for the pass to judge (no exception reaches the pass);
    a refused tag or terminate is said, the store left as it was; a placement group not
    deleted is only logged (the sweep tries again)."""
    from slurmscale.cloud.protocol import CloudError, FleetSpec
    from slurmscale.config_file import parse_config
    from slurmscale.daemon.executor.effects import (
        DropPlacementGroup,
        Fleet,
        PlacementGroup,
        Tag,
        Terminate,
    )
    from tests.support.fakes import FakeCloud
    from tests.unit.conftest import base_config

    pool = parse_config(base_config()).pools[0]
    ask = Fleet(pool, 2, 2, "tok", {"k": "v"}, FleetSpec.of(pool))
    for down in (None, CloudError("RequestLimitExceeded", "Request limit exceeded.")):
        cloud, store, said = FakeCloud(), MemoryStore(), list[Kind]()
        x = Effects(Slurm(), store, said_to(said), cloud,  # type: ignore[arg-type]
                    lambda: T0)
        store.add_instances([instance()])
        (got,) = x.apply([ask])
        assert got.fleet is not None and len(got.fleet.instances) == 2 and got.taken
        first = got.fleet.instances[0].instance_id
        cloud.down = down
        out = x.apply([Tag(first, "spot-1", {"n": "spot-1"}),
                       Terminate(("i-0000000000000001",), "why"),
                       PlacementGroup("pg", {}), DropPlacementGroup("pg"), ask])
        if down is None:
            assert [a.taken for a in out] == [True] * 5
            assert said == [Kind.TERMINATED] and store.active_instances() == []
            assert cloud.instances[first].tags["n"] == "spot-1"
        else:
            assert [a.taken for a in out] == [False] * 5
            assert {a.code for a in out} == {"RequestLimitExceeded"}
            assert out[-1].fleet is None and out[-1].error == "Request limit exceeded."
            assert said == [Kind.TAG_FAILED, Kind.TERMINATE_FAILED]
            assert [r.instance_id for r in store.active_instances()] == ["i-0000000000000001"]


def test_tags_go_out_together_each_outcome_its_own_and_an_untrack_follows_a_refusal() -> None:
    from slurmscale.cloud.protocol import CloudError
    from slurmscale.config_file import parse_config
    from slurmscale.daemon.executor.effects import Tag, Terminate, Together, Untrack
    from tests.support.fakes import FakeCloud
    from tests.unit.conftest import base_config

    cloud, store, said = FakeCloud(), MemoryStore(), list[Kind]()
    x = Effects(Slurm(), store, said_to(said), cloud, lambda: T0)  # type: ignore[arg-type]
    got = cloud.launch(parse_config(base_config()).pools[0], 4, 4, "tok", {})
    ids = [i.instance_id for i in got.instances]
    ids.insert(2, "i-0123456789abcdef0")  # (one EC2 does not know)
    tags = Together(tuple(Tag(i, f"spot-{n}", {"n": str(n)}) for n, i in enumerate(ids)))
    out = x.apply([tags])  # (in parallel: 5 > 2)
    assert [a.taken for a in out] == [True, True, False, True, True]
    assert [a.effect for a in out] == list(tags.parts) and said == [Kind.TAG_FAILED]
    assert out[2].code == "InvalidInstanceID.NotFound"
    assert [cloud.instances[i].tags["n"] for i in ids if i in cloud.instances] == \
        ["0", "1", "3", "4"]
    store.add_instances([instance()])
    cloud.down = CloudError("UnauthorizedOperation", "not allowed")
    out = x.apply([Chain(Terminate(("i-0000000000000001",), "failed to boot"),
                         otherwise=(Untrack(("i-0000000000000001",)),))])
    assert [a.taken for a in out] == [False, True] and store.active_instances() == []
