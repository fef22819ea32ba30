"""What the reconcile loop relies on a store to do, as checks any `ReconcileStore` must pass.

`tests/unit/test_store_contract.py` runs them against the simulator's `MemoryStore` and the
SQL store on SQLite; `tests/integration/test_store_contract_pg.py` against the SQL store on a
real PostgreSQL. A difference is a bug in one of them: the simulator would run the daemon's
loop on a store that behaves otherwise than the daemon's.

Each check gets a fresh, empty store.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from slurmscale.lifecycles import (
    GangStatus,
    GraceState,
    HoldState,
    IllegalTransition,
    InstanceState,
    RequestStatus,
)
from slurmscale.policy.model import PoolMemory
from slurmscale.spool import RequestKind, SpooledRequest
from slurmscale.store.protocol import ReconcileStore
from slurmscale.store.rows import (
    CapacityReservationRow,
    GangRow,
    GraceRow,
    HoldRow,
    InstanceRow,
    JobRow,
    LaunchPhasesRow,
    OfferingRow,
    PreemptionCause,
    PreemptionRow,
    ReplacementRow,
    TimerKind,
    utc,
)

T0 = 1_800_000_000.0


def at(t: float) -> datetime:
    return datetime.fromtimestamp(T0 + t, UTC)


def hold(name: str, state: HoldState, created: float = 0.0, exhausted: bool = False
         ) -> HoldRow:
    return HoldRow(name=name, pool="gpu", job_id=name.rsplit("-", 1)[-1], user_name="u",
                   needed=2, nodes=json.dumps(["gpu-1", "gpu-2"]), created_s=T0 + created,
                   spent_gpu_s=0.0, accounted_s=T0 + created, attached=False, state=state,
                   reason="", exhausted=exhausted, released_s=None)


def instance(iid: str, node: str, launched: float, reservation: str = "") -> InstanceRow:
    return InstanceRow(instance_id=iid, node=node, pool="gpu", gang_id="g-1",
                       instance_type="p5.48xlarge", lifecycle="spot",
                       launch_template_version="1", capacity_reservation_id=reservation,
                       state=InstanceState.RUNNING, launched_at=at(launched))


def request(rid: str, t: float, kind: RequestKind = RequestKind.RESUME) -> SpooledRequest:
    return SpooledRequest(rid, kind, ("gpu-1",), "gpu-1", None, T0 + t)


def gang(gid: str) -> GangRow:
    return GangRow(id=gid, pool="gpu", nodes="gpu-[1-2]", size=2, status=GangStatus.LAUNCHING,
                   client_token="tok", launch_template_version="1", created_at=at(0),
                   updated_at=at(0))


def holds_follow_their_lifecycle_and_reads_are_copies(store: ReconcileStore) -> None:
    store.put_hold(hold("h-old", HoldState.ACTIVE, created=0))
    store.put_hold(hold("h-new", HoldState.ACTIVE, created=60, exhausted=True))
    store.put_hold(hold("h-new", HoldState.RELEASING, created=60, exhausted=True))
    assert [h.name for h in store.holds()] == ["h-new", "h-old"]  # the newest first
    assert [h.name for h in store.holds((HoldState.ACTIVE.value,))] == ["h-old"]
    assert store.exhausted_jobs() == {"new"}
    with pytest.raises(IllegalTransition):
        store.put_hold(hold("h-new", HoldState.ACTIVE, created=60))  # releasing -> active
    got = store.hold("h-old")
    assert got is not None and store.hold("h-none") is None
    got.reason = "edited, never put back"
    assert store.holds((HoldState.ACTIVE.value,))[0].reason == ""
    put = hold("h-kept", HoldState.ACTIVE)
    store.put_hold(put)
    put.reason = "edited after it was put"  # the caller's object is not the stored record
    stored = store.hold("h-kept")
    assert stored is not None and stored.reason == ""


def the_policys_memory_is_kept_per_pool(store: ReconcileStore) -> None:
    assert store.pool_memory() == {}
    store.save_pool_memory({"a": PoolMemory(3, T0, None), "b": PoolMemory(1, None, T0)}, at(0))
    store.save_pool_memory({"a": PoolMemory(4, None, T0 + 5)}, at(5))
    assert store.pool_memory() == {"a": PoolMemory(4, None, T0 + 5),
                                   "b": PoolMemory(1, None, T0)}


def an_offering_is_one_row_per_pool(store: ReconcileStore) -> None:
    store.put_offering(OfferingRow(pool="gpu", until_s=T0 + 180, repeats=1, last_code="ICE",
                                   updated_at=at(0)))
    store.put_offering(OfferingRow(pool="gpu", until_s=T0 + 360, repeats=2, last_code="ICE",
                                   updated_at=at(1)))
    got = store.offering("gpu")
    assert got is not None and (got.until_s, got.repeats) == (T0 + 360, 2)
    assert [o.pool for o in store.offerings()] == ["gpu"] and store.offering("x") is None


def preemptions_are_read_by_job_and_since(store: ReconcileStore) -> None:
    for i, t in enumerate((0.0, 100.0, 50.0)):  # (added out of time order)
        store.add_preemption(PreemptionRow(
            at=at(t), job_id=f"j{i % 2}", node="gpu-1", instance_id=f"i-{i}", pool="gpu",
            instance_type="p5.48xlarge", lifecycle="spot",
            cause=PreemptionCause.INTERRUPTED, kind="k", notice_time=""))
    assert sorted(p.instance_id for p in store.preemptions(since=T0 + 50)) == ["i-1", "i-2"]
    assert sorted(p.instance_id for p in store.preemptions("j0")) == ["i-0", "i-2"]
    assert [p.instance_id for p in store.preemptions("j1")] == ["i-1"]


def replacements_are_read_since(store: ReconcileStore) -> None:
    for i, t in enumerate((0.0, 100.0)):
        store.add_replacement(ReplacementRow(
            at=at(t), detected_at=at(t - 10), node=f"gpu-{i}", pool="gpu",
            instance_id=f"i-{i}", instance_type="p5.48xlarge", gpus=8, cause="ec2_status",
            detail="", jobs_requeued=1, left=False))
    assert [r.node for r in store.replacements(since=T0 + 50)] == ["gpu-1"]
    assert len(store.replacements()) == 2


def instances_run_until_terminated(store: ReconcileStore) -> None:
    store.add_instances([instance("i-1", "gpu-1", 0), instance("i-2", "gpu-2", 1, "cr-1")])
    assert [i.instance_id for i in store.active_instances()] == ["i-1", "i-2"]
    assert [i.instance_id for i in store.active_instances(["gpu-2", "gpu-9"])] == ["i-2"]
    store.mark_terminated(["i-1", "i-unknown"], at(10))
    assert [i.instance_id for i in store.active_instances()] == ["i-2"]
    gone = store.instance("i-1")
    assert gone is not None and gone.state == InstanceState.TERMINATED
    assert gone.terminated_at is not None
    store.add_instances([instance("i-3", "gpu-1", 20)])  # the node's next instance
    last = store.last_instances(["gpu-1", "gpu-2"])
    assert {n: i.instance_id for n, i in last.items()} == {"gpu-1": "i-3", "gpu-2": "i-2"}
    # a node is in paid capacity while its running instance is in a reservation
    assert store.reserved_nodes() == {"gpu-2"}
    store.mark_terminated(["i-2"], at(30))
    assert store.reserved_nodes() == frozenset()


def a_request_is_taken_once_and_finished_once(store: ReconcileStore) -> None:
    assert store.add_request(request("r-2", 2)) and store.add_request(request("r-1", 1))
    assert not store.add_request(request("r-1", 1))  # a re-drained spool file
    assert [r.id for r in store.pending_requests()] == ["r-1", "r-2"]  # as received
    store.finish_requests(["r-1"], RequestStatus.DONE, at(3))
    assert [r.id for r in store.pending_requests()] == ["r-2"]
    with pytest.raises(IllegalTransition):
        store.finish_requests(["r-1"], RequestStatus.FAILED, at(4))


def a_gang_follows_its_lifecycle(store: ReconcileStore) -> None:
    store.add_gang(gang("g-1"))
    store.update_gang("g-1", status=GangStatus.LAUNCHED, fleet_id="fleet-1")
    got = store.get_gang("g-1")
    assert got is not None and (got.status, got.fleet_id) == (GangStatus.LAUNCHED, "fleet-1")
    with pytest.raises(IllegalTransition):
        store.update_gang("g-1", status=GangStatus.FAILED)
    assert store.get_gang("g-none") is None


def a_gang_keeps_the_ids_of_all_its_fleets(store: ReconcileStore) -> None:
    """A gang launched in several fleets (max_instances_per_fleet) keeps every fleet id:
    PostgreSQL refused three of them in the VARCHAR(64) the column once was."""
    ids = ",".join(f"fleet-{n:08x}-0000-4000-8000-{n:012x}" for n in range(4))
    store.add_gang(gang("g-1"))
    store.update_gang("g-1", status=GangStatus.LAUNCHED, fleet_id=ids)
    got = store.get_gang("g-1")
    assert got is not None and got.fleet_id == ids and len(ids) > 64


def its_own_outage_is_not_a_records_fault(store: ReconcileStore) -> None:
    assert not store.is_outage(ValueError("a record the store cannot take"))


def a_job_is_recorded_once_and_ended_once(store: ReconcileStore) -> None:
    def job(jid: str) -> JobRow:
        return JobRow(job_id=jid, pool="gpu", user_name="u", num_nodes=2, gpus_per_node=8,
                      submitted_at=at(0), started_at=at(5))
    assert [r.job_id for r in store.add_job_starts([job("1"), job("2")])] == ["1", "2"]
    # a restarted daemon sees the running job again: not a second start
    assert [r.job_id for r in store.add_job_starts([job("2"), job("3")])] == ["3"]
    store.end_jobs(["1", "9"], at(50))
    assert store.running_job_ids() == {"2", "3"}
    store.end_jobs(["1"], at(60))  # (ended already: nothing changes)
    assert store.running_job_ids() == {"2", "3"}


def ended_jobs_with_a_limit_are_read_as_runs_since(store: ReconcileStore) -> None:
    """What limit_use: auto learns from: (id, end, pool, run s, limit s) of the jobs with a
    time limit that ended at or after `since`; one the ledger found already ended counts
    too."""
    def job(jid: str, limit: int | None, ended: float | None = None) -> JobRow:
        return JobRow(job_id=jid, pool="gpu", user_name="u", num_nodes=1, gpus_per_node=8,
                      submitted_at=at(0), started_at=at(10),
                      ended_at=None if ended is None else at(ended), time_limit_s=limit)
    store.add_job_starts([job("1", 300), job("2", None), job("3", 600), job("4", 900)])
    store.end_jobs(["1", "2"], at(110))
    store.end_jobs(["3"], at(210))
    store.add_job_starts([job("5", 120, ended=70)])  # ran between two passes
    assert sorted(store.job_runs(at(0))) == [
        ("1", at(110).timestamp(), "gpu", 100.0, 300.0),
        ("3", at(210).timestamp(), "gpu", 200.0, 600.0),
        ("5", at(70).timestamp(), "gpu", 60.0, 120.0)]
    assert store.job_runs(at(200)) == [("3", at(210).timestamp(), "gpu", 200.0, 600.0)]
    assert store.job_runs(at(211)) == []
    assert store.running_job_ids() == {"4"}


def ec2s_reservations_are_read_as_last_saved(store: ReconcileStore) -> None:
    def cr(available: int) -> CapacityReservationRow:
        return CapacityReservationRow(
            id="cr-1", pool="gpu", kind="default", instance_type="p5.48xlarge",
            availability_zone="us-east-1a", total=4, available=available, state="active",
            read_at=at(available))
    store.save_capacity_reservations([cr(4)])
    store.save_capacity_reservations([cr(1)])  # read again: the same reservation
    assert [(r.id, r.available) for r in store.capacity_reservations()] == [("cr-1", 1)]


def a_gang_is_live_while_launching_or_while_an_instance_runs(store: ReconcileStore) -> None:
    store.add_gang(gang("g-1"))  # launching
    store.add_gang(gang("g-2"))
    store.update_gang("g-2", status=GangStatus.LAUNCHED)
    store.add_instances([instance("i-1", "gpu-1", 0)])  # (of g-1)
    assert store.live_gangs() == {"g-1"}
    store.update_gang("g-1", status=GangStatus.LAUNCHED)
    assert store.live_gangs() == {"g-1"}  # its instance runs
    store.mark_terminated(["i-1"], at(10))
    assert store.live_gangs() == set()


def a_grace_is_open_until_it_ends_or_requeues_once(store: ReconcileStore) -> None:
    def grace(job: str) -> GraceRow:
        return GraceRow(job_id=job, node="gpu-1", instance_id="i-1", pool="gpu",
                        signal="USR1", signalled_at=at(0), requeue_at=at(80),
                        state=GraceState.SIGNALLED.value, cause=PreemptionCause.INTERRUPTED,
                        kind="EC2 Spot Instance Interruption Warning", notice_time="")
    a, b = grace("j1"), grace("j2")
    store.put_grace(a)
    store.put_grace(b)
    assert a.id is not None and b.id is not None and a.id != b.id
    assert [g.job_id for g in store.graces()] == ["j1", "j2"]
    a.state, a.ended_at = GraceState.ENDED.value, at(30)
    store.put_grace(a)
    assert [g.job_id for g in store.graces()] == ["j2"]
    assert len(store.graces(open_only=False)) == 2
    (read,) = store.graces()
    read.state = GraceState.REQUEUED.value
    store.put_grace(read)
    read.state = GraceState.ENDED.value
    with pytest.raises(IllegalTransition):
        store.put_grace(read)
    assert store.graces() == []
    got = {g.job_id: g.state for g in store.graces(open_only=False)}
    assert got == {"j1": "ended", "j2": "requeued"}


def timers_are_kept_per_kind_and_written_per_subject(store: ReconcileStore) -> None:
    lost, unhealthy, evacuating = (TimerKind.LOST_NODE, TimerKind.UNHEALTHY,
                                   TimerKind.EVACUATING)
    assert store.timers(lost) == {}
    store.set_timers(lost, {"gpu-1": T0, "gpu-2": T0 + 5.5})
    store.set_timers(unhealthy, {"gpu-1": T0 + 1})
    assert store.timers(lost) == {"gpu-1": T0, "gpu-2": T0 + 5.5}
    # a subject's timer moves; the kind's others stay as they are
    store.set_timers(lost, {"gpu-2": T0 + 7, "gpu-3": T0 + 9})
    assert store.timers(lost) == {"gpu-1": T0, "gpu-2": T0 + 7, "gpu-3": T0 + 9}
    store.end_timers(lost, ["gpu-1", "gpu-9"])  # (gpu-9 has none: no error)
    store.set_timers(lost, {})
    store.end_timers(lost, [])
    assert store.timers(lost) == {"gpu-2": T0 + 7, "gpu-3": T0 + 9}
    assert store.timers(unhealthy) == {"gpu-1": T0 + 1}
    got = store.timers(unhealthy)
    got["gpu-9"] = 0.0  # (a copy)
    store.end_timers(unhealthy, ["gpu-1"])
    assert store.timers(unhealthy) == {} and store.timers(lost)
    # a note rides with its timer, is replaced with it, and ends with it
    store.set_timers(evacuating, {"gpu-1": T0, "gpu-2": T0}, {"gpu-1": '{"a": 1}'})
    assert store.timer_notes(evacuating) == {"gpu-1": '{"a": 1}'}
    assert store.timer_notes(lost) == {}
    store.set_timers(evacuating, {"gpu-1": T0 + 1})
    assert store.timer_notes(evacuating) == {}
    store.set_timers(evacuating, {"gpu-2": T0}, {"gpu-2": "b"})
    store.end_timers(evacuating, ["gpu-1"])
    assert store.timer_notes(evacuating) == {"gpu-2": "b"}
    assert store.timers(evacuating) == {"gpu-2": T0}


def launch_phases_are_one_row_an_instance_read_by_answer_time(store: ReconcileStore) -> None:
    assert store.launch_phases() == []
    a = LaunchPhasesRow(instance_id="i-a", node="gpu-1", pool="gpu", job_nodes=2,
                        requested_s=T0, answered_s=T0 + 2)
    b = LaunchPhasesRow(instance_id="i-b", node="gpu-2", pool="gpu", job_nodes=2,
                        requested_s=T0, answered_s=T0 + 1)
    store.put_launch_phases([a, b])
    assert [r.instance_id for r in store.launch_phases()] == ["i-b", "i-a"]
    a.started_s, a.submitted_s = T0 + 60, T0 - 1
    store.put_launch_phases([a])  # (written over whole)
    (read,) = store.launch_phases(since_s=T0 + 2)
    assert (read.instance_id, read.started_s, read.submitted_s) == ("i-a", T0 + 60, T0 - 1)
    assert [r.instance_id for r in store.launch_phases(open_only=True)] == ["i-b"]
    read.started_s = None  # (a copy)
    assert store.launch_phases(since_s=T0 + 2)[0].started_s == T0 + 60


def a_warm_instance_is_no_nodes_until_started_for_one(store: ReconcileStore) -> None:
    """A warm pool's instance (warm_pool.py): stopped, it backs no node; started for
    another node, it backs that one; it terminates from warm like from running."""
    store.add_instances([instance("i-1", "gpu-1", 0), instance("i-2", "gpu-2", 1)])
    store.keep_warm(["i-1", "i-2"], at(2))
    assert store.active_instances() == []
    assert [i.instance_id for i in store.warm_instances("gpu")] == ["i-1", "i-2"]
    assert store.warm_instances("other") == []
    started = replace(instance("i-2", "gpu-7", 5), gang_id="g-2")
    store.add_instances([started])
    assert [(i.instance_id, i.node) for i in store.active_instances()] == [("i-2", "gpu-7")]
    assert store.active_instances(["gpu-2"]) == []
    store.keep_warm(["i-2"], at(8))
    store.mark_terminated(["i-1"], at(9))
    assert [i.instance_id for i in store.warm_instances()] == ["i-2"]
    gone = store.instance("i-1")
    assert gone is not None and gone.state == InstanceState.TERMINATED
    assert utc(gone.terminated_at) == at(2), "a warm one's run ended at its stop, not at 9"


def a_launch_phases_row_set_apart_keeps_its_figures_under_its_own_key(
        store: ReconcileStore) -> None:
    store.put_launch_phases([LaunchPhasesRow(instance_id="i-1", node="gpu-1", pool="gpu",
                                             job_nodes=2, answered_s=100.0, started_s=150.0)])
    store.set_launch_phases_apart(["i-1", "i-unknown"])
    store.put_launch_phases([LaunchPhasesRow(instance_id="i-1", node="gpu-3", pool="gpu",
                                             job_nodes=2, answered_s=900.0, warm=True)])
    rows = [(r.instance_id, r.node, r.answered_s, r.warm) for r in store.launch_phases()]
    assert rows == [("i-1@100", "gpu-1", 100.0, False), ("i-1", "gpu-3", 900.0, True)], rows
    assert [r.instance_id for r in store.launch_phases(open_only=True)] == ["i-1"]


def a_warm_instances_runs_and_stops_are_periods(store: ReconcileStore) -> None:
    """What `report` counts beside the rows: each earlier run (node hours) and each stop
    (volume hours), the row keeping the current or last run."""
    store.add_instances([instance("i-1", "gpu-1", 0)])
    store.keep_warm(["i-1"], at(10))
    store.add_instances([replace(instance("i-1", "gpu-2", 30))])  # started again
    store.keep_warm(["i-1"], at(50))
    store.mark_terminated(["i-1"], at(70))
    periods = [(p.state, utc(p.since), utc(p.until))
               for p in store.instance_periods(at(0), at(100))]
    assert periods == [("running", at(0), at(10)), ("warm", at(10), at(30)),
                       ("warm", at(50), at(70))], periods
    row = store.instance("i-1")
    assert row is not None and (utc(row.launched_at), utc(row.terminated_at)) == (at(30), at(50))
    assert [utc(p.since) for p in store.instance_periods(at(55), at(100))] == [at(50)]


CHECKS: list[Callable[[ReconcileStore], None]] = [
    a_warm_instance_is_no_nodes_until_started_for_one,
    a_warm_instances_runs_and_stops_are_periods,
    a_launch_phases_row_set_apart_keeps_its_figures_under_its_own_key,
    launch_phases_are_one_row_an_instance_read_by_answer_time,
    timers_are_kept_per_kind_and_written_per_subject,
    holds_follow_their_lifecycle_and_reads_are_copies,
    the_policys_memory_is_kept_per_pool,
    an_offering_is_one_row_per_pool,
    preemptions_are_read_by_job_and_since,
    replacements_are_read_since,
    instances_run_until_terminated,
    a_request_is_taken_once_and_finished_once,
    a_gang_follows_its_lifecycle,
    a_gang_keeps_the_ids_of_all_its_fleets,
    its_own_outage_is_not_a_records_fault,
    a_job_is_recorded_once_and_ended_once,
    ended_jobs_with_a_limit_are_read_as_runs_since,
    ec2s_reservations_are_read_as_last_saved,
    a_gang_is_live_while_launching_or_while_an_instance_runs,
    a_grace_is_open_until_it_ends_or_requeues_once,
]
