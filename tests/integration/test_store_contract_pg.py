"""The SQL store on a real PostgreSQL (Debian's server, as in production HA) passes the same
store contract as the simulator's MemoryStore and SQLite (`tests/support/store_contract.py`):
one server for the module, a fresh database for each check."""

from __future__ import annotations

import itertools
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurmscale.localcluster.postgres import DB_USER, LocalPostgres, pg_bin_dir
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.repo import Store
from tests.support.store_contract import CHECKS

pytestmark = pytest.mark.slurm  # (root: the server runs as Debian's postgres user)

_names = itertools.count(1)


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        psycopg = None  # type: ignore[assignment]
    if pg_bin_dir() is None or psycopg is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the store contract on PostgreSQL: server or psycopg "
                        "missing")
        pytest.skip("needs Debian's postgresql and slurmscale[postgres]")
    pg = LocalPostgres(Path(tempfile.mkdtemp(prefix="ss-pg-contract-"))).start()
    yield pg
    pg.remove()


@pytest.fixture
def store(postgres: LocalPostgres) -> Iterator[LaunchStore]:
    name = f"contract{next(_names)}"
    subprocess.run([str(postgres.bin / "createdb"), "-h", "127.0.0.1", "-p",
                    str(postgres.port), "-U", DB_USER, name], check=True, capture_output=True,
                   text=True)
    sql = Store(postgres.url.rsplit("/", 1)[0] + "/" + name)
    sql.upgrade()
    yield sql
    sql.close()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_store_contract_on_postgresql(store: LaunchStore,
                                      check: Callable[[LaunchStore], None]) -> None:
    check(store)
