import json

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmscale.gangs import PendingRequest, gang_id, plan_requests
from slurmscale.spool import RequestKind

POOLS = {"spot-": "gpu-spot", "od-": "gpu-od"}


def pool_of(node: str) -> str | None:
    for prefix, name in POOLS.items():
        if node.startswith(prefix):
            return name
    return None


def resume(rid: str, at: float, jobs: dict[int, list[str]],
           extra: tuple[str, ...] = ()) -> PendingRequest:
    nodes = [n for ns in jobs.values() for n in ns] + list(extra)
    rf = json.dumps({"jobs": [{"job_id": j, "nodes": ",".join(ns)} for j, ns in jobs.items()],
                     "all_nodes": ",".join(nodes)})
    return PendingRequest(rid, RequestKind.RESUME, tuple(nodes), rf, at)


def test_each_multi_node_job_is_one_gang_and_singles_are_coalesced_per_pool() -> None:
    reqs = [resume("r1", 0, {1: ["spot-1", "spot-2"], 2: ["spot-3", "spot-4"]}),
            resume("r2", 0.5, {3: ["spot-5"], 4: ["spot-6"], 5: ["od-1"]})]
    plan = plan_requests(reqs, set(), pool_of, now=3.0, batch_window=2.0)
    got = sorted((g.pool, g.nodes, g.job_ids, g.coalesced) for g in plan.launch)
    assert got == [
        ("gpu-od", ("od-1",), (), True),
        ("gpu-spot", ("spot-1", "spot-2"), (1,), False),
        ("gpu-spot", ("spot-3", "spot-4"), (2,), False),
        ("gpu-spot", ("spot-5", "spot-6"), (), True),
    ]
    assert [g.min_capacity for g in plan.launch if not g.coalesced] == [2, 2]
    assert set(plan.done) == {"r1", "r2"}


def test_singles_wait_for_the_batching_window_then_go_together() -> None:
    reqs = [resume("r1", 10.0, {1: ["spot-1"]}), resume("r2", 11.0, {2: ["spot-2"]})]
    early = plan_requests(reqs, set(), pool_of, now=11.5, batch_window=2.0)
    assert early.launch == () and set(early.deferred) == {"r1", "r2"}
    assert early.next_due == 12.0
    late = plan_requests(reqs, set(), pool_of, now=12.0, batch_window=2.0)
    assert [g.nodes for g in late.launch] == [("spot-1", "spot-2")]


def test_a_gang_alone_is_not_delayed_by_the_window() -> None:
    plan = plan_requests([resume("r1", 10.0, {1: ["spot-1", "spot-2"]})], set(), pool_of,
                         now=10.0, batch_window=2.0)
    assert [g.nodes for g in plan.launch] == [("spot-1", "spot-2")]


def test_a_gang_is_not_held_by_singles_and_takes_the_batch_with_it() -> None:
    """A gang in a request with singles launches at once (it waited the whole window
    before), and the singles pending so far go with it, in one launch per pool."""
    reqs = [resume("r1", 9.5, {1: ["spot-1"]}),
            resume("r2", 10.0, {2: ["spot-2", "spot-3"], 3: ["spot-4"]})]
    plan = plan_requests(reqs, set(), pool_of, now=10.0, batch_window=2.0)
    assert plan.deferred == () and plan.next_due is None
    assert sorted(g.nodes for g in plan.launch) == [("spot-1", "spot-4"), ("spot-2", "spot-3")]
    assert set(plan.done) == {"r1", "r2"}


def test_the_same_request_twice_plans_one_launch() -> None:
    a = resume("r1", 0, {1: ["spot-1", "spot-2"]})
    b = resume("r2", 1, {1: ["spot-1", "spot-2"]})
    plan = plan_requests([a, b], set(), pool_of, now=5, batch_window=2)
    assert [g.nodes for g in plan.launch] == [("spot-1", "spot-2")]
    again = plan_requests([b], {"spot-1", "spot-2"}, pool_of, now=9, batch_window=2)
    assert again.launch == () and again.already_up == ("spot-1", "spot-2")


def test_the_latest_request_for_a_node_wins() -> None:
    reqs = [resume("r1", 0, {1: ["spot-1"]}),
            PendingRequest("r2", RequestKind.SUSPEND, ("spot-1",), None, 1)]
    plan = plan_requests(reqs, set(), pool_of, now=1.5, batch_window=2)
    assert plan.launch == ()
    assert plan.release == (("spot-1", RequestKind.SUSPEND, "r2"),)


def test_nodes_in_no_pool_are_reported_not_launched() -> None:
    plan = plan_requests([resume("r1", 0, {1: ["gpu-1", "spot-1"]})], set(), pool_of, 5, 2)
    assert plan.unknown_nodes == ("gpu-1",)
    assert [g.nodes for g in plan.launch] == [("spot-1",)]


def test_gang_ids_are_deterministic() -> None:
    reqs = [resume("r1", 0, {7: ["spot-1", "spot-2"]})]
    a = plan_requests(reqs, set(), pool_of, 5, 2).launch[0]
    b = plan_requests(reqs, set(), pool_of, 6, 2).launch[0]
    assert gang_id(a) == gang_id(b) == "r1/job7/gpu-spot"


job_sets = st.lists(st.integers(1, 5), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(sizes=job_sets, active=st.sets(st.integers(1, 40), max_size=10),
       now=st.floats(0, 10), window=st.floats(0, 5))
def test_gangs_are_never_split_and_no_node_is_planned_twice(sizes, active, now, window) -> None:  # type: ignore[no-untyped-def]
    jobs, k = {}, 1
    for j, n in enumerate(sizes, start=1):
        jobs[j] = [f"spot-{k + i}" for i in range(n)]
        k += n
    req = resume("r1", 0.0, jobs)
    active_nodes = {f"spot-{i}" for i in active}
    plan = plan_requests([req], active_nodes, pool_of, now, window)
    if plan.deferred:
        assert plan.launch == () and plan.next_due == window
        return
    planned = [n for g in plan.launch for n in g.nodes]
    assert len(planned) == len(set(planned))
    assert not set(planned) & active_nodes
    assert set(planned) | (set(req.nodes) & active_nodes) == set(req.nodes)
    for g in plan.launch:
        if not g.coalesced:
            want = [n for n in jobs[g.job_ids[0]] if n not in active_nodes]
            assert list(g.nodes) == sorted(want) and g.min_capacity == g.size >= 2
    # same input, same plan
    assert plan == plan_requests([req], active_nodes, pool_of, now, window)
