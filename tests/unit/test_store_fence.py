"""The SQL store on SQLite: a leader taken over writes nothing more, and a write is made only
from the state it read (`tests/support/store_fence.py`; on PostgreSQL in
tests/integration/test_store_contract_pg.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurmscale.store.repo import Store
from tests.support.store_fence import FENCE_CHECKS


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    sql = Store(f"sqlite:///{tmp_path / 'state.db'}")
    sql.upgrade()
    yield sql
    sql.close()


@pytest.mark.parametrize("check", FENCE_CHECKS, ids=lambda c: c.__name__)
def test_store_fence(store: Store, check: Callable[[Store], None]) -> None:
    check(store)
