"""The simulator's MemoryStore and the SQL store (on SQLite here; on PostgreSQL in
tests/integration/test_store_contract_pg.py) pass the same contract
(`tests/support/store_contract.py`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurmscale.store.memory import MemoryStore
from slurmscale.store.protocol import ReconcileStore
from slurmscale.store.repo import Store
from tests.support.store_contract import CHECKS


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ReconcileStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    sql = Store(f"sqlite:///{tmp_path / 'state.db'}")
    sql.upgrade()
    yield sql
    sql.close()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_store_contract(store: ReconcileStore, check: Callable[[ReconcileStore], None]) -> None:
    check(store)
