"""Reservations for starving gangs: the pure planner, and the daemon's pass on (fake) Slurm
with the real store."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmscale.config_file import parse_config
from slurmscale.daemon.passes.capacity import CapacityPass
from slurmscale.model import QueueJob, SlurmNode, SlurmReservation
from slurmscale.policy.model import NodeState, NodeView
from slurmscale.policy.reservations import (
    GangJob,
    Hold,
    HoldActionKind,
    ReservationKnobs,
    TakeOrder,
    plan_holds,
)
from slurmscale.store.repo import Store
from tests.support.fakes import FakeSlurm, pass_context
from tests.unit.conftest import base_config

K = ReservationKnobs(accumulate_after_s=600, hold_budget_gpu_hours=10, max_hold_s=3600)
GPUS, MAXN = {"gpu": 8}, {"gpu": 4}
NOW = 10_000.0


def node(i: int, state: NodeState, alloc: int = 0, free_at: float | None = None) -> NodeView:
    return NodeView(f"g-{i}", "gpu", state, alloc_gpus=alloc, free_at=free_at)


def gang(job_id: str = "77", nodes: int = 4, waited: float = 700, **kw: object) -> GangJob:
    return GangJob(job_id, "gpu", nodes, 8, NOW - waited, 10, "alice", **kw)  # type: ignore[arg-type]


def kinds(plan) -> list[str]:  # type: ignore[no-untyped-def]
    return [a.kind.value for a in plan.actions]


def test_a_gang_that_needs_the_pools_powered_down_nodes_holds_them_and_starts() -> None:
    """Two busy nodes and one powered down, a 3-node gang: the pool cannot start it now (one
    node short), and a hold of the busy nodes alone would never reach 3 (the powered-down
    node is not idle, not busy): the hold takes it too, costs nothing for it, and is
    attached once the busy two have drained (Slurm powers the third up for the job). Found
    by the simulator's property test: the gang waited out max_hold_s with two idle nodes."""
    busy = (node(1, NodeState.ALLOCATED, 8, NOW + 300), node(2, NodeState.ALLOCATED, 8, NOW + 600),
            node(3, NodeState.POWERED_DOWN))
    plan = plan_holds(K, GPUS, {"gpu": 3}, busy, (gang(nodes=3),), (), frozenset(), NOW)
    assert kinds(plan) == ["create"] and plan.holds[0].nodes == ("g-1", "g-2", "g-3")
    drained = (node(1, NodeState.RESERVED), node(2, NodeState.RESERVED),
               node(3, NodeState.POWERED_DOWN))
    later = plan_holds(K, GPUS, {"gpu": 3}, drained, (gang(nodes=3),), plan.holds,
                       frozenset(), NOW + 600)
    assert kinds(later) == ["attach"]
    # 600 s of the two drained nodes idle (not the powered-down one's 8 GPUs)
    assert later.holds[0].spent_gpu_s == 2 * 8 * 600


def test_a_starving_gang_gets_idle_nodes_then_the_soonest_free_busy_ones() -> None:
    nodes = (node(1, NodeState.IDLE), node(2, NodeState.ALLOCATED, 8, NOW + 900),
             node(3, NodeState.ALLOCATED, 8, NOW + 60), node(4, NodeState.ALLOCATED, 1, None))
    plan = plan_holds(K, GPUS, MAXN, nodes, (gang(nodes=3),), (), frozenset(), NOW)
    assert kinds(plan) == ["create"], "nothing attached while busy nodes drain"
    (a,) = plan.actions
    assert a.name == "slurmscale-gang-77" and a.user == "alice"
    assert a.nodes == ("g-1", "g-2", "g-3"), "g-4 has no end time: it may never drain"
    assert "has waited 700s" in a.reason
    # all three drained: idle and reserved -> the job is pointed at it
    drained = (*(node(i, NodeState.RESERVED) for i in range(1, 4)), nodes[3])
    plan2 = plan_holds(K, GPUS, MAXN, drained, (gang(nodes=3),), plan.holds, frozenset(),
                       NOW + 60)
    assert kinds(plan2) == ["attach"]
    assert plan2.holds[0].attached


def test_no_hold_while_the_pool_can_start_the_gang_or_before_it_has_waited() -> None:
    roomy = (node(1, NodeState.IDLE), node(2, NodeState.IDLE),
             node(3, NodeState.POWERED_DOWN), node(4, NodeState.POWERED_DOWN))
    assert plan_holds(K, GPUS, MAXN, roomy, (gang(),), (), frozenset(), NOW).actions == ()
    busy = tuple(node(i, NodeState.ALLOCATED, 8) for i in range(1, 5))
    assert plan_holds(K, GPUS, MAXN, busy, (gang(waited=60),), (), frozenset(),
                      NOW).actions == ()
    assert plan_holds(replace(K, enabled=False), GPUS, MAXN, busy, (gang(),), (), frozenset(),
                      NOW).actions == ()


def test_one_hold_per_pool_for_the_highest_priority_gang() -> None:
    busy = tuple(node(i, NodeState.ALLOCATED, 8) for i in range(1, 5))
    jobs = (gang("1")._replace(priority=5), gang("2")._replace(priority=50))
    plan = plan_holds(K, GPUS, MAXN, busy, jobs, (), frozenset(), NOW)
    assert [a.job_id for a in plan.actions] == ["2"]


HOLD = Hold("slurmscale-gang-77", "gpu", "77", "alice", 4, ("g-1", "g-2"), NOW - 100, 0.0,
            NOW - 100)


@pytest.mark.parametrize(("job", "hold", "needle", "spent"), [
    (None, HOLD, "no longer queued", False),
    (gang(held=True), HOLD, "is held", False),
    (gang(pending=False), HOLD, "started elsewhere", False),
    (gang(pending=False, reservation="slurmscale-gang-77"), HOLD, "started in it", False),
    (gang(), replace(HOLD, spent_gpu_s=9.99 * 3600), "hold budget spent", True),
    (gang(), replace(HOLD, created_s=NOW - 3600), "maximum hold time", True),
])
def test_every_release_path_says_why(job, hold, needle, spent) -> None:  # type: ignore[no-untyped-def]
    """The action says why in words and, as a flag, whether the job may be held for again;
    another starving gang in the same plan may get the next hold."""
    nodes = (node(1, NodeState.RESERVED), node(2, NodeState.RESERVED),
             node(3, NodeState.ALLOCATED, 8), node(4, NodeState.ALLOCATED, 8))
    other = gang("88", nodes=3)
    plan = plan_holds(K, GPUS, MAXN, nodes, ((job,) if job else ()) + (other,), (hold,),
                      frozenset(), NOW)
    (rel,) = [a for a in plan.actions if a.kind is HoldActionKind.RELEASE]
    assert needle in rel.reason and rel.exhausted is spent
    assert [h.job_id for h in plan.holds] == ["88"], "a released hold is dropped"


def test_budget_counts_the_idle_gpus_of_held_nodes() -> None:
    nodes = (node(1, NodeState.RESERVED), node(2, NodeState.ALLOCATED, 6))
    h = replace(HOLD, accounted_s=NOW - 100)
    plan = plan_holds(K, GPUS, MAXN, nodes, (gang(),), (h,), frozenset(), NOW)
    assert plan.holds[0].spent_gpu_s == pytest.approx((8 + 2) * 100)


def test_an_exhausted_job_and_reserved_nodes_are_never_taken() -> None:
    busy = tuple(node(i, NodeState.ALLOCATED, 8) for i in range(1, 5))
    assert plan_holds(K, GPUS, MAXN, busy, (gang(),), (), frozenset({"77"}), NOW).actions == ()
    plan = plan_holds(K, GPUS, MAXN, busy, (gang(),), (), frozenset(), NOW,
                      reserved=frozenset({"g-2"}))
    assert "g-2" not in plan.actions[0].nodes


@settings(max_examples=200, deadline=None)
@given(states=st.lists(st.sampled_from(list(NodeState)), min_size=1, max_size=12),
       sizes=st.lists(st.integers(1, 14), min_size=1, max_size=5),
       admin=st.sets(st.integers(1, 12), max_size=4))
def test_hold_planner_properties(states, sizes, admin) -> None:  # type: ignore[no-untyped-def]
    nodes = tuple(node(i + 1, s, 8 if s is NodeState.ALLOCATED else 0, NOW + i * 60)
                  for i, s in enumerate(states))
    maxn = {"gpu": len(states)}
    jobs = tuple(gang(str(i), n) for i, n in enumerate(sizes))
    reserved = frozenset(f"g-{i}" for i in admin)
    plan = plan_holds(K, GPUS, maxn, nodes, jobs, (), frozenset(), NOW, reserved)
    assert plan == plan_holds(K, GPUS, maxn, nodes, jobs, (), frozenset(), NOW, reserved)
    assert len(plan.holds) <= K.per_pool
    for h in plan.holds:
        assert not set(h.nodes) & reserved, "an admin's reserved nodes are never taken"
        assert len(h.nodes) <= h.needed <= maxn["gpu"]
        assert h.name.startswith(K.prefix)
    for a in plan.actions:
        assert a.name.startswith(K.prefix), "only slurmscale's own reservations are touched"


@settings(max_examples=200, deadline=None)
@given(passes=st.lists(st.tuples(
    st.lists(st.sampled_from(list(NodeState)), min_size=4, max_size=10),
    st.sets(st.integers(1, 10), max_size=3), st.booleans()), min_size=1, max_size=6),
    sizes=st.lists(st.integers(2, 8), min_size=1, max_size=4))
def test_the_nodes_a_hold_may_take_kept_between_plannings_plan_as_made_afresh(
        passes, sizes) -> None:  # type: ignore[no-untyped-def]
    """The queue view's TakeOrder gives each planning what working the nodes out afresh
    gives, the same views planned again included (fails if the planner's taking edits what
    the order keeps: the second planning of the same views then finds fewer nodes)."""
    order = TakeOrder()
    jobs = tuple(gang(str(i), n) for i, n in enumerate(sizes))
    nodes: tuple[NodeView, ...] = ()
    for states, admin, again in passes:
        if not (again and nodes):  # (else the very views of the last planning)
            nodes = tuple(node(i + 1, s, 8 if s is NodeState.ALLOCATED else 0, NOW + i * 60)
                          for i, s in enumerate(states))
        maxn = {"gpu": len(nodes)}
        reserved = frozenset(f"g-{i}" for i in admin)
        for _ in range(2):
            assert plan_holds(K, GPUS, maxn, nodes, jobs, (), frozenset(), NOW, reserved,
                              order=order) == plan_holds(K, GPUS, maxn, nodes, jobs, (),
                                                         frozenset(), NOW, reserved)


# --- the daemon's pass -------------------------------------------------------------------

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def local(ts: float) -> str:
    return datetime.fromtimestamp(ts).isoformat(timespec="seconds")


@pytest.fixture
def capped(tmp_path):  # type: ignore[no-untyped-def]
    d = base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}",
                    reservations={"accumulate_after_s": 60, "hold_budget_gpu_hours": 100,
                                  "max_hold_s": 1800})
    d["pools"][0]["max_nodes"] = 4
    cfg = parse_config(d)
    store = Store(cfg.store_url)
    store.upgrade()
    end = local(T0.timestamp() + 300)
    slurm = FakeSlurm(table={
        f"spot-{i}": SlurmNode(f"spot-{i}", "MIXED+CLOUD", "127.0.0.1", f"spot-{i}",
                               alloc_gpus=8) for i in range(1, 5)})
    slurm.table["od-1"] = SlurmNode("od-1", "IDLE+CLOUD+POWERED_DOWN", "od-1", "od-1")
    slurm.queue = [
        QueueJob("500", ("gpu-spot",), 4, 8, 3600, local(T0.timestamp() - 120), "Priority", 1,
                 "alice", "PENDING"),
        *[QueueJob(str(600 + i), ("gpu-spot",), 1, 8, 3600, local(T0.timestamp() - 900),
                   "None", 100, "bob", "RUNNING", end_time=end, nodelist=f"spot-{i}")
          for i in range(1, 5)]]
    slurm.resv["maint"] = SlurmReservation("maint", ("od-2",), ("admin",))
    events: list[tuple[str, str]] = []
    cp = CapacityPass(pass_context(cfg, store, slurm,
                                   lambda kind, msg, **_: events.append((kind, msg))))
    yield cp, slurm, store, events
    store.close()


def _gathered_and_attached(cp: CapacityPass, slurm: FakeSlurm) -> None:
    """The small jobs end; the four nodes are idle inside the reservation; the gang is pointed
    at it."""
    slurm.queue = slurm.queue[:1]
    for i in range(1, 5):
        slurm.table[f"spot-{i}"] = SlurmNode(f"spot-{i}", "IDLE+CLOUD+RESERVED", "127.0.0.1",
                                             f"spot-{i}")
    cp.run(T0.replace(minute=5))
    assert slurm.job_resv == {"500": "slurmscale-gang-500"}


def test_the_daemon_holds_drains_attaches_and_releases_leaving_admin_reservations_alone(
        capped) -> None:
    cp, slurm, store, events = capped
    cp.run(T0)
    assert slurm.resv["slurmscale-gang-500"].nodes == ("spot-1", "spot-2", "spot-3", "spot-4")
    assert store.hold("slurmscale-gang-500").state == "active"
    _gathered_and_attached(cp, slurm)
    # the job starts in it: Slurm refuses to delete a reservation its job runs in
    slurm.queue = [slurm.queue[0]._replace(state="RUNNING", reservation="slurmscale-gang-500",
                                           reason="None")]
    slurm.busy_reservations.add("slurmscale-gang-500")
    cp.run(T0.replace(minute=6))
    assert store.hold("slurmscale-gang-500").state == "releasing"
    # a restarted daemon (new pass objects, same store) finishes the job once it is allowed
    slurm.queue, slurm.busy_reservations = [], set()
    cp2 = CapacityPass(pass_context(cp.cfg, store, slurm, cp.event))
    cp2.run(T0.replace(minute=7))
    assert "slurmscale-gang-500" not in slurm.resv
    assert store.hold("slurmscale-gang-500").state == "released"
    assert store.hold("slurmscale-gang-500").reason.startswith("job 500 started in it")
    assert "maint" in slurm.resv and slurm.resv["maint"].nodes == ("od-2",)
    assert not any("maint" in " ".join(args) for _, args in slurm.calls)
    assert [k for k, _ in events if k.startswith("reservation_")] == [
        "reservation_create", "reservation_attach", "reservation_release_pending",
        "reservation_released"]
    # said once, with Slurm's own words (the retries each pass are quiet)
    (pending,) = [m for k, m in events if k == "reservation_release_pending"]
    assert "Slurm kept it for now (Requested reservation is in use)" in pending, pending
    assert not [k for k, _ in events if k.endswith("_failed")], events


def test_a_hold_given_up_while_its_job_pends_is_taken_from_the_job_and_deleted(
        capped) -> None:
    """Slurm refuses to delete a reservation a pending job points at (checked on real Slurm by
    the Slurm contract): the hold is detached from its job first, or it would stay forever."""
    cp, slurm, store, events = capped
    cp.run(T0)
    _gathered_and_attached(cp, slurm)
    # its user holds it (scontrol hold): nothing will start it, the hold is given up
    slurm.queue = [slurm.queue[0]._replace(reason="JobHeldUser", priority=0)]
    cp.run(T0.replace(minute=10))
    row = store.hold("slurmscale-gang-500")
    assert (row.state, row.reason) == ("released", "job 500 is held"), row.reason
    assert "slurmscale-gang-500" not in slurm.resv and slurm.job_resv == {}
    calls = [c for c, _ in slurm.calls]
    assert calls.index("delete_reservation") > len(calls) - 1 - calls[::-1].index(
        "set_job_reservation")


def test_a_hold_slurm_refuses_is_said_once_and_an_attach_refused_is_tried_again(
        capped) -> None:
    """A reservation Slurm will not create is one reservation_failed event naming it, its
    job and Slurm's words, and no hold on the store; an attach Slurm refuses leaves the
    hold unattached, tried again next pass."""
    from slurmscale.slurm.protocol import SlurmError

    cp, slurm, store, events = capped
    real_create, real_attach = slurm.create_reservation, slurm.set_job_reservation

    def refuse(*a: object, **k: object) -> None:
        raise SlurmError(["scontrol"], 1, "Requested nodes are busy")
    slurm.create_reservation = refuse  # type: ignore[method-assign]
    cp.run(T0)
    failed = [m for k, m in events if k == "reservation_failed"]
    assert failed == ["create slurmscale-gang-500 (job 500): scontrol exited 1: "
                      "Requested nodes are busy"], failed
    assert store.hold("slurmscale-gang-500") is None
    slurm.create_reservation = real_create  # type: ignore[method-assign]
    cp.run(T0.replace(minute=1))
    assert store.hold("slurmscale-gang-500").state == "active"
    slurm.set_job_reservation = refuse  # type: ignore[method-assign]
    slurm.queue = slurm.queue[:1]
    for i in range(1, 5):
        slurm.table[f"spot-{i}"] = SlurmNode(f"spot-{i}", "IDLE+CLOUD+RESERVED", "127.0.0.1",
                                             f"spot-{i}")
    cp.run(T0.replace(minute=5))
    assert not store.hold("slurmscale-gang-500").attached
    assert [m for k, m in events if k == "reservation_failed"][-1].startswith(
        "attach slurmscale-gang-500 (job 500): ")
    slurm.set_job_reservation = real_attach  # type: ignore[method-assign]
    cp.run(T0.replace(minute=6))
    assert slurm.job_resv == {"500": "slurmscale-gang-500"}
    assert store.hold("slurmscale-gang-500").attached
