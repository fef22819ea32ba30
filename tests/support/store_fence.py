"""What the SQL store does for a leader that lost its lease, and for two writers of one
record, as checks run on SQLite (`tests/unit/test_store_fence.py`) and on a real PostgreSQL
(`tests/integration/test_store_contract_pg.py`). Each check gets a fresh, upgraded store and
opens a second handle on the same database: another daemon, or an admin's command."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from slurmscale.audit import Kind
from slurmscale.lifecycles import ChangedMeanwhile, GangStatus, HoldState
from slurmscale.store.protocol import LeaseLost
from slurmscale.store.repo import Store
from slurmscale.store.rows import utc
from tests.support.store_contract import at, gang, hold


@contextmanager
def second(store: Store) -> Iterator[Store]:
    other = Store(store.url)
    try:
        yield other
    finally:
        other.close()


def a_leader_taken_over_writes_nothing_more(store: Store) -> None:
    """The old leader's pass goes on after a standby took over (its lease lost, not yet
    noticed): each of its writes is refused whole, the new leader's stand, and a store that
    never led (an admin's command) writes as before."""
    assert store.lead("c1", "host-a:1", at(0)) == 1
    store.add_gang(gang("g1"))
    with second(store) as b:
        assert b.lead("c1", "host-b:2", at(1)) == 2
        with pytest.raises(LeaseLost, match="epoch 1"):
            store.update_gang("g1", status=GangStatus.LAUNCHED, updated_at=at(2))
        with pytest.raises(LeaseLost):
            store.add_event(Kind.LEADER_ACQUIRED, "the old leader's", at(2))
        with pytest.raises(LeaseLost):
            store.add_gang(gang("g2"))
        assert b.get_gang("g1").status == GangStatus.LAUNCHING  # type: ignore[union-attr]
        assert store.get_gang("g2") is None
        assert not [e for e in b.events() if e.message == "the old leader's"]
        b.update_gang("g1", status=GangStatus.FAILED, updated_at=at(3))
        with second(store) as admin:
            admin.add_event(Kind.RESERVATION_RELEASED, "an admin's", at(4))
        assert [e.message for e in b.events()] == ["an admin's"]
        # the old daemon, leading again later, takes over in its turn
        assert store.lead("c1", "host-a:1", at(5)) == 3
        with pytest.raises(LeaseLost):
            b.add_event(Kind.LEADER_ACQUIRED, "b's, after a's return", at(6))
        store.add_event(Kind.LEADER_ACQUIRED, "a's again", at(6))


def clusters_sharing_a_database_have_their_own_epochs(store: Store) -> None:
    assert store.lead("c1", "host-a:1", at(0)) == 1
    with second(store) as b:
        assert b.lead("c2", "host-b:1", at(0)) == 1
        store.add_gang(gang("g1"))
        b.add_gang(gang("g2"))
    assert store.get_gang("g2") is not None


@contextmanager
def before_update_of(store: Store, table: str, then: Callable[[], None]) -> Iterator[None]:
    """Run `then` (another writer's whole write) just before `store` sends its first UPDATE
    of `table`: after it read the record, before it writes it."""
    done: list[bool] = []

    def hook(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if not done and statement.lstrip().upper().startswith(f"UPDATE {table.upper()} "):
            done.append(True)
            then()
    event.listen(store.engine, "before_cursor_execute", hook)
    try:
        yield
    finally:
        event.remove(store.engine, "before_cursor_execute", hook)
    assert done, f"no UPDATE of {table} was sent"


def a_release_made_meanwhile_is_not_written_over(store: Store) -> None:
    """The daemon updates a hold's accounting (active -> active) while an admin releases it
    (`slurmscale reservations release`: active -> released) between the daemon's read and its
    write. Written unconditionally, the daemon's row would bring the hold back to active; the
    write is conditioned on the state read, so nothing of it is written and the release
    stands. (SQLite refuses the write its own way: the read's snapshot is stale.)"""
    store.put_hold(hold("ss-job-7", HoldState.ACTIVE))
    with second(store) as admin:
        def release() -> None:
            admin.put_hold(replace(hold("ss-job-7", HoldState.RELEASED), exhausted=True))
        with before_update_of(store, "holds", release), \
                pytest.raises((ChangedMeanwhile, OperationalError)) as raised:
            store.put_hold(replace(hold("ss-job-7", HoldState.ACTIVE), spent_gpu_s=3600.0))
    if store.engine.dialect.name == "postgresql":
        assert raised.type is ChangedMeanwhile
        assert "hold ss-job-7: changed by another writer after it was read as 'active'" in \
            str(raised.value)
    row = store.hold("ss-job-7")
    assert row is not None and row.state == HoldState.RELEASED and row.exhausted
    assert row.spent_gpu_s == 0.0


def moves_from_the_state_read_only(store: Store) -> None:
    """A gang's launch recorded (launching -> launched) while another writer failed it
    (launching -> failed): the second write is refused, not laid over the first."""
    store.add_gang(gang("g1"))
    with second(store) as other:
        def fail() -> None:
            other.update_gang("g1", status=GangStatus.FAILED, updated_at=at(1))
        with before_update_of(store, "gangs", fail), \
                pytest.raises((ChangedMeanwhile, OperationalError)) as raised:
            store.update_gang("g1", status=GangStatus.LAUNCHED, updated_at=at(2))
    if store.engine.dialect.name == "postgresql":
        assert raised.type is ChangedMeanwhile
    g = store.get_gang("g1")
    assert g is not None and g.status == GangStatus.FAILED and utc(g.updated_at) == at(1)
    # and an ordinary move is one write
    store.add_gang(gang("g2"))
    store.update_gang("g2", status=GangStatus.LAUNCHED, updated_at=at(3))
    g = store.get_gang("g2")
    assert g is not None and g.status == GangStatus.LAUNCHED and utc(g.updated_at) == at(3)


FENCE_CHECKS: list[Callable[[Store], None]] = [
    a_leader_taken_over_writes_nothing_more,
    clusters_sharing_a_database_have_their_own_epochs,
    a_release_made_meanwhile_is_not_written_over,
    moves_from_the_state_read_only,
]
