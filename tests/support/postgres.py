"""A throw-away PostgreSQL for the tests that need a real one (HA, the store contract): Debian's
server, started by `LocalPostgres`; skipped where it is not installed, except in CI, which must
run them."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from slurmscale.localcluster.postgres import LocalPostgres, pg_bin_dir


def start_postgres(prefix: str) -> LocalPostgres:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        psycopg = None  # type: ignore[assignment]
    if pg_bin_dir() is None or psycopg is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the PostgreSQL tests: server or psycopg missing")
        pytest.skip("needs Debian's postgresql and slurmscale[postgres]")
    return LocalPostgres(Path(tempfile.mkdtemp(prefix=prefix))).start()
