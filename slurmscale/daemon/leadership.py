"""Which daemon acts. Several daemons may share a store (PostgreSQL for HA, or by mistake two
on one SQLite file); exactly one of them may launch, terminate or touch Slurm, or gangs would
launch twice. The lease is something the operating system or the database takes back by
itself when its holder dies, so a SIGKILLed leader never blocks its successor:

- PostgreSQL: a session-level advisory lock on a connection of its own. The server drops it
  the moment the holder's connection closes (a killed process closes its sockets at once;
  a vanished host is noticed by TCP keepalives within ~15 s). A leader that is frozen (a
  SIGSTOP, a paused VM) keeps its session open, and so the lock, for as long as that lasts:
  no interruption handled, nothing launched. So the leader asks on the lock's connection every
  `daemon.leader_stale_s` / 6 from a thread of its own (and before every outside call), and a
  standby that finds the lock's session silent for longer than `leader_stale_s` ends it
  (`pg_terminate_backend`) and takes the lock. A thread, because a frozen process stops every
  thread; and a pass that has run longer than `leader_stale_s` (hung in a call) stops the
  beat and gives the lock up itself, so the standby leads at once and the hung pass's next
  outside call finds the lease gone. The thawed leader's next question fails and it stands
  by; what it writes meanwhile matches no row (the store's epoch fence).
- SQLite (one host): flock(2) stays held by a frozen process; a second daemon there stands by
  until the frozen one is killed (SIGKILL releases it at once). There is no standby on
  another host to take over.
- SQLite: flock(2) on a file beside the database, released by the kernel on exit.

`hold()` is called at the start of every pass: the leader re-checks that its lease is alive,
a standby tries to take it, so a standby takes over on its first pass after the leader died.
`held()` only asks, and is asked before every call a pass makes to EC2 or Slurm (`fence.py`).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import Protocol

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.engine.url import make_url
from sqlalchemy.pool import NullPool

from slurmscale.identity import identity, session_args

log = logging.getLogger(__name__)

# libpq settings for the lock's connection: a leader cut off from the database must notice
# (and stop acting) about as soon as the server drops its lock.
PG_LEASE_CONNECT_ARGS = {"connect_timeout": 5, "keepalives": 1, "keepalives_idle": 5,
                         "keepalives_interval": 2, "keepalives_count": 3,
                         "tcp_user_timeout": 10000}


def lease_connect_args(url: str, role: str) -> dict[str, object]:
    """The lock connection's libpq settings, named for `pg_stat_activity` (identity.py)."""
    return {**PG_LEASE_CONNECT_ARGS, **session_args(url, role)}


class Lease(Protocol):
    def hold(self) -> bool:
        """True while this daemon leads: takes the lease if free, re-checks it if held."""
        ...

    def held(self) -> bool:
        """True while this daemon still holds the lease; never takes it."""
        ...

    def release(self) -> None:
        ...

    def busy(self, on: bool) -> None:
        """A pass starts (True) or ends (False): one that runs too long gives the lease up."""
        ...


def lock_key(cluster_name: str) -> int:
    """A signed 64-bit advisory-lock key per cluster, so clusters may share one database."""
    digest = hashlib.sha256(f"slurmscale-leader:{cluster_name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


# The lock's holder and how long its session has been silent. pg_locks shows a bigint
# advisory key "with its high-order half in the classid column, its low-order half in the
# objid column, and objsubid equal to 1" (PostgreSQL, pg_locks); query_start is when the
# session's last query began (pg_stat_activity), the leader's last question.
_HOLDER = text(
    "SELECT a.pid, EXTRACT(EPOCH FROM (clock_timestamp() - a.query_start)) "
    "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :hi AND l.objid = :lo "
    "AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_database "
    "WHERE datname = current_database())")


class PgAdvisoryLease:
    def __init__(self, url: str, cluster_name: str, stale_s: float = 0.0) -> None:
        """`stale_s`: a holder silent this long is cut off by the one asking (0: never)."""
        self.key = lock_key(cluster_name)
        self.stale_s = stale_s
        self.engine: Engine = create_engine(url, poolclass=NullPool,
                                            connect_args=lease_connect_args(url, "lease"))
        self.conn: Connection | None = None
        self.took_over: str | None = None  # whom this lease cut off to lead (for the event)
        self._mutex = threading.Lock()  # (the connection is the pass's and the beat's)
        self._stop = threading.Event()
        self._busy_since: float | None = None  # (monotonic) the pass in flight's start

    def busy(self, on: bool) -> None:
        self._busy_since = time.monotonic() if on else None

    def held(self) -> bool:
        """The lock lives as long as its session: one round trip on the lock's connection."""
        with self._mutex:
            if self.conn is None:
                return False
            try:
                self.conn.execute(text("SELECT 1"))
                return True
            except Exception as e:  # noqa: BLE001 - any failure means the lock may be gone
                log.error("lost the leader lease: its database connection failed (%s)",
                          type(e).__name__)
                self._drop()
                return False

    def _beat(self, every_s: float, stop: threading.Event) -> None:
        """The leader's liveness for standbys to see (pg_stat_activity's query_start), while
        its pass in flight, if any, is younger than `stale_s`."""
        while not stop.wait(every_s):
            since = self._busy_since
            if since is not None and time.monotonic() - since > self.stale_s:
                log.error("a pass has run %.0f s (more than daemon.leader_stale_s): giving "
                          "the leader lease up so a standby leads", time.monotonic() - since)
                with self._mutex:
                    self._drop()
                return
            if not self.held():
                return

    def hold(self) -> bool:
        if self.conn is not None:
            return self.held()
        self.took_over = None
        try:
            conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        except Exception as e:  # noqa: BLE001 - the database is down: stand by, retry
            log.warning("cannot reach the database for the leader lease (%s)", type(e).__name__)
            return False
        try:
            got = self._try(conn)
            if not got and self.stale_s > 0 and self._cut_off_stale(conn):
                got = self._try(conn)
        except Exception as e:  # noqa: BLE001
            log.warning("leader lease query failed (%s)", type(e).__name__)
            conn.close()
            return False
        if not got:
            conn.close()
            return False
        with self._mutex:
            self.conn = conn
        if self.stale_s > 0:
            self._stop = threading.Event()
            threading.Thread(target=self._beat, args=(self.stale_s / 6, self._stop),
                             name="lease-beat", daemon=True).start()
        return True

    def _try(self, conn: Connection) -> bool:
        return bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"),
                                 {"k": self.key}).scalar())

    def _cut_off_stale(self, conn: Connection) -> bool:
        """End the lock holder's session if it has been silent longer than `stale_s`, and
        wait (up to 5 s) for the server to let the lock go. True: it was cut off."""
        u = self.key & 0xFFFFFFFFFFFFFFFF
        row = conn.execute(_HOLDER, {"hi": u >> 32, "lo": u & 0xFFFFFFFF}).first()
        if row is None or row[1] is None or float(row[1]) <= self.stale_s:
            return False
        pid, silent = int(row[0]), float(row[1])
        if not conn.execute(text("SELECT pg_terminate_backend(:p, 5000)"),
                            {"p": pid}).scalar():
            log.warning("the leader's lease session (pid %d) has been silent %.0f s but "
                        "could not be ended (this role may not signal it)", pid, silent)
            return False
        self.took_over = (f"the leader's lease session (pid {pid}) was silent {silent:.0f} s "
                          f"(more than daemon.leader_stale_s {self.stale_s:g} s: frozen, or "
                          "stuck in a call) and was ended")
        log.error("%s", self.took_over)
        return True

    def _drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.invalidate()
                conn.close()
            except Exception:  # noqa: BLE001 - already broken
                pass

    def release(self) -> None:
        self._stop.set()
        with self._mutex:
            if self.conn is not None:
                try:
                    self.conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
                except Exception:  # noqa: BLE001 - closing the session releases it anyway
                    pass
            self._drop()
        self.engine.dispose()


class FileLease:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def held(self) -> bool:
        return self.fd is not None  # (the kernel keeps the flock while the file is open)

    def hold(self) -> bool:
        if self.fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{identity()}\n".encode())
        self.fd = fd
        return True

    def busy(self, on: bool) -> None:
        pass

    def holder(self) -> str:
        try:
            return self.path.read_text().strip() or "unknown"
        except OSError:
            return "unknown"

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None


class SoleLease:
    """An in-memory store has one process by construction."""

    def hold(self) -> bool:
        return True

    def held(self) -> bool:
        return True

    def release(self) -> None:
        pass

    def busy(self, on: bool) -> None:
        pass


def holder_silence(url: str, cluster_name: str) -> float | None:
    """Seconds the PostgreSQL lease holder's session has been silent (None: no holder, or not
    PostgreSQL, or the database did not answer): `status` names a frozen leader by it."""
    if make_url(url).get_backend_name() != "postgresql":
        return None
    u = lock_key(cluster_name) & 0xFFFFFFFFFFFFFFFF
    engine = create_engine(url, poolclass=NullPool, connect_args=lease_connect_args(url, "status"))
    try:
        with engine.connect() as c:
            row = c.execute(_HOLDER, {"hi": u >> 32, "lo": u & 0xFFFFFFFF}).first()
    except Exception:  # noqa: BLE001 - status shows what it can
        return None
    finally:
        engine.dispose()
    return None if row is None or row[1] is None else float(row[1])


def lease_for(store_url: str, cluster_name: str, stale_s: float = 0.0) -> Lease:
    url = make_url(store_url)
    if url.get_backend_name() == "postgresql":
        return PgAdvisoryLease(store_url, cluster_name, stale_s)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        return FileLease(Path(f"{url.database}.leader"))
    return SoleLease()
