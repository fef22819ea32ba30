"""The fence: every call to the outside asks the lease first, and once the lease is gone no
call goes out (the PostgreSQL case, a lease lost mid-pass, is
tests/integration/test_lease_fence_pg.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurmscale.config import Config
from slurmscale.daemon.fence import Fence, LeaseLost, fenced
from slurmscale.daemon.leadership import FileLease
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.spool import RequestKind, Spool
from slurmscale.store.repo import Store
from tests.support.fakes import FakeCloud, FakeSlurm


class Target:
    size = 3

    def __init__(self) -> None:
        self.done: list[str] = []

    def act(self, what: str) -> str:
        self.done.append(what)
        return what.upper()


def test_a_call_goes_out_only_while_the_lease_is_held_and_never_after() -> None:
    held = [True]
    asked: list[int] = []

    def lease() -> bool:
        asked.append(1)
        return held[0]
    t = Target()
    f = Fence(lease)
    guarded = fenced(t, f, "Target")
    assert guarded.act("one") == "ONE" and guarded.size == 3  # (plain attributes read through)
    assert len(asked) == 1  # asked once per call, not per attribute
    held[0] = False
    with pytest.raises(LeaseLost, match="Target.act not called"):
        guarded.act("two")
    held[0] = True  # the lease may come back: this reconciler's fence stays shut
    with pytest.raises(LeaseLost):
        guarded.act("three")
    assert t.done == ["one"] and f.lost_before == "Target.act"


def test_a_file_lease_is_held_while_its_descriptor_is_open(tmp_path: Path) -> None:
    lease = FileLease(tmp_path / "state.db.leader")
    assert not lease.held()  # (asking never takes it)
    assert lease.hold() and lease.held()
    lease.release()
    assert not lease.held()


def test_the_reconciler_stops_at_the_first_call_after_the_lease_went(cfg: Config) -> None:
    """A gang's launch answers, then the lease is gone: its tags and addresses are not sent;
    the gang stays recorded as launching for the next leader."""
    store = Store(cfg.store_url)
    store.upgrade()
    held = [True]

    class Cloud(FakeCloud):
        def launch(self, *a, **k):  # type: ignore[no-untyped-def]
            out = super().launch(*a, **k)
            held[0] = False
            return out
    cloud, slurm = Cloud(), FakeSlurm()
    r = Reconciler(cfg, store, slurm, cloud, clock=lambda: datetime(2026, 12, 2, tzinfo=UTC),
                   fence=Fence(lambda: held[0]))
    spool = Spool(cfg.spool_dir)
    nodes = ["spot-1", "spot-2"]
    spool.put(spool.new_request(RequestKind.RESUME, nodes, "spot-[1-2]", json.dumps(
        {"jobs": [{"job_id": 1, "nodes": "spot-[1-2]"}], "all_nodes": "spot-[1-2]"})))
    with pytest.raises(LeaseLost, match="EC2.tag not called"):
        r.tick()
    assert len(cloud.running()) == 2
    assert all("slurmscale:node" not in i.tags for i in cloud.running())
    assert not [c for c in slurm.calls if c[0] == "set_node_addresses"]
    (gang,) = store.gangs()
    assert gang.status == "launching"
    store.close()
