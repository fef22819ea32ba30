"""Lifecycles: one transition table per record, every state reachable from creation, and the
store refusing any write off the table."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurmscale.lifecycles import (
    GANG_EDGES,
    HOLD_EDGES,
    INSTANCE_EDGES,
    REQUEST_EDGES,
    GangStatus,
    HoldState,
    IllegalTransition,
    InstanceState,
    RequestStatus,
)
from slurmscale.spool import RequestKind, SpooledRequest
from slurmscale.store.repo import Store
from slurmscale.store.rows import GangRow, HoldRow, InstanceRow

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("edges", "kind"), [(REQUEST_EDGES, RequestStatus),
                                             (GANG_EDGES, GangStatus),
                                             (INSTANCE_EDGES, InstanceState),
                                             (HOLD_EDGES, HoldState)])
def test_every_state_is_reachable_from_creation_and_every_edge_says_why(edges, kind) -> None:  # type: ignore[no-untyped-def]
    seen: set[object] = {None}
    while True:
        more = {dst for (src, dst) in edges if src in seen} - seen
        if not more:
            break
        seen |= more
    assert seen - {None} == set(kind)
    assert all(isinstance(why, str) and len(why) > 10 for why in edges.values())


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 's.db'}")
    s.upgrade()
    return s


def _gang(gid: str, status: str) -> GangRow:
    return GangRow(id=gid, pool="gpu", nodes="g-[1-2]", size=2, status=status,
                   client_token="t", launch_template_version="1", created_at=NOW,
                   updated_at=NOW)


def test_the_store_refuses_a_gang_off_its_table(store: Store) -> None:
    store.add_gang(_gang("a", GangStatus.LAUNCHING))
    store.update_gang("a", status=GangStatus.FAILED, error_code="X")
    with pytest.raises(IllegalTransition, match="gang a: failed -> launched"):
        store.update_gang("a", status=GangStatus.LAUNCHED)
    assert store.get_gang("a").status == "failed", "nothing written"  # type: ignore[union-attr]
    with pytest.raises(IllegalTransition, match="None -> launched"):
        store.add_gang(_gang("b", GangStatus.LAUNCHED))
    with pytest.raises(IllegalTransition, match="not a GangStatus"):
        store.update_gang("a", status="exploded")


def test_the_store_refuses_a_terminated_instance_brought_back(store: Store) -> None:
    row = dict(instance_id="i-1", node="g-1", pool="gpu", gang_id="a", instance_type="p5",
               lifecycle="spot", image_id="ami", launch_template_version="1",
               private_ip="10.0.0.1", launched_at=NOW)
    store.add_instances([InstanceRow(**row, state=InstanceState.RUNNING)])
    store.mark_terminated(["i-1"], NOW)
    store.mark_terminated(["i-1"], NOW)  # idempotent, as TerminateInstances is
    with pytest.raises(IllegalTransition, match="instance i-1: terminated -> running"):
        store.add_instances([InstanceRow(**row, state=InstanceState.RUNNING)])
    assert store.active_instances() == []


def test_the_store_refuses_finishing_a_request_twice(store: Store) -> None:
    store.add_request(SpooledRequest(id="r1", kind=RequestKind.RESUME, nodes=("g-1",),
                                     hostlist="g-1", resume_file=None,
                                     received_at=NOW.timestamp()))
    store.finish_requests(["r1"], RequestStatus.DONE, NOW)
    with pytest.raises(IllegalTransition, match="request r1: done -> failed"):
        store.finish_requests(["r1"], RequestStatus.FAILED, NOW, error="late")


def test_the_store_refuses_a_releasing_hold_made_active(store: Store) -> None:
    def hold(state: str) -> HoldRow:
        return HoldRow(name="h", pool="gpu", job_id="7", user_name="u", needed=2,
                       nodes="[]", created_s=0.0, spent_gpu_s=0.0, accounted_s=0.0,
                       attached=False, state=state, reason="", exhausted=False,
                       released_s=None)
    store.put_hold(hold(HoldState.ACTIVE))
    store.put_hold(hold(HoldState.RELEASING))
    with pytest.raises(IllegalTransition, match="hold h: releasing -> active"):
        store.put_hold(hold(HoldState.ACTIVE))
    store.put_hold(hold(HoldState.RELEASED))
    store.put_hold(hold(HoldState.ACTIVE))  # the same job held for again
