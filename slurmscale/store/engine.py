"""Opening the store: the engine for its URL (SQLite made private to its owner, each schema
upgrade one transaction, the WAL files kept the owner's), and the schema's revisions."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Connection, Engine

from slurmscale.identity import session_args
from slurmscale.ownership import own_like

ALEMBIC_INI = Path(__file__).with_name("alembic.ini")
VERSIONS = Path(__file__).with_name("migrations") / "versions"


def schema_head() -> str:
    """The latest migration's revision, without importing Alembic: the migrations are
    numbered in order (0001_initial.py, ...) and each file's revision is its number (a test
    checks this against Alembic's own head)."""
    return max(p.name.split("_", 1)[0] for p in VERSIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))


def current_revision(conn: Connection) -> str | None:
    """The store's schema revision as Alembic records it (None: never upgraded)."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()



def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (see make_engine)
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


def _sqlite_begin(conn) -> None:  # type: ignore[no-untyped-def]
    conn.exec_driver_sql("BEGIN")


def _private_sqlite_file(path: Path) -> None:
    """The store holds every request, node and event: a new SQLite file (and the directory
    made for it) is created readable by its owner only, not with the umask's 0644. Made by
    root in a directory another user owns (`sudo slurmscale db upgrade` in SlurmUser's
    /var/lib/slurmscale), it is that user's: the daemon runs as SlurmUser."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return  # an existing store keeps the mode and owner its admin gave it
    own_like(path, path.parent)


def _owners_files(path: Path) -> Callable[..., None]:
    """After each connection (as root): the store's WAL files belong to the store's owner.
    SQLite makes `-wal` and `-shm` as whoever opens the store first after the last close, so
    an admin's `sudo slurmscale status` while the daemon (SlurmUser) is stopped would leave
    them root's, and the daemon would then find its own store read-only."""
    def fix(_dbapi_conn: object, _record: object) -> None:
        try:
            for side in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                if side.exists():
                    own_like(side, path)
        except OSError:
            pass  # (the next connection tries again; the store's own error says the rest)
    return fix


def make_engine(url: str) -> Engine:
    path: Path | None = None
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        path = Path(url.removeprefix("sqlite:///").split("?", 1)[0])
        _private_sqlite_file(path)
    engine = create_engine(url, pool_pre_ping=True, connect_args=session_args(url, "store"))
    if engine.dialect.name == "sqlite":
        # pysqlite runs DDL outside any transaction, so a daemon killed during a schema
        # upgrade would leave tables without their version stamp and every later upgrade
        # would fail. Taking over BEGIN makes each upgrade one transaction: all or nothing.
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        if path is not None and os.geteuid() == 0:
            event.listen(engine, "connect", _owners_files(path))
    return engine
