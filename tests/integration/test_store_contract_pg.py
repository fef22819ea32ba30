"""The SQL store on a real PostgreSQL (Debian's server, as in production HA) passes the same
store contract as the simulator's MemoryStore and SQLite (`tests/support/store_contract.py`),
and the SQL store's fence checks (`tests/support/store_fence.py`): one server for the module,
a fresh database for each check."""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Callable, Iterator

import pytest

from slurmscale.localcluster.postgres import DB_USER, LocalPostgres
from slurmscale.store.protocol import ReconcileStore
from slurmscale.store.repo import Store
from tests.support.postgres import start_postgres
from tests.support.store_contract import CHECKS
from tests.support.store_fence import FENCE_CHECKS

pytestmark = pytest.mark.slurm  # (root: the server runs as Debian's postgres user)

_names = itertools.count(1)


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    pg = start_postgres("ss-pg-contract-")
    yield pg
    pg.remove()


@pytest.fixture
def store(postgres: LocalPostgres) -> Iterator[Store]:
    name = f"contract{next(_names)}"
    subprocess.run([str(postgres.bin / "createdb"), "-h", "127.0.0.1", "-p",
                    str(postgres.port), "-U", DB_USER, name], check=True, capture_output=True,
                   text=True)
    sql = Store(postgres.url.rsplit("/", 1)[0] + "/" + name)
    sql.upgrade()
    yield sql
    sql.close()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_store_contract_on_postgresql(store: ReconcileStore,
                                      check: Callable[[ReconcileStore], None]) -> None:
    check(store)


@pytest.mark.parametrize("check", FENCE_CHECKS, ids=lambda c: c.__name__)
def test_store_fence_on_postgresql(store: Store, check: Callable[[Store], None]) -> None:
    """A leader taken over writes nothing more; a write is made only from the state it read
    (PostgreSQL's read committed lets the other writer in between: the conditional UPDATE is
    what refuses)."""
    check(store)
