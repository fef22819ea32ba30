"""The store: short transactions, never a network call inside one (load, compute, apply)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from typing import cast as typed

from sqlalchemy import (
    Column,
    Integer,
    cast,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    or_,
    select,
    text,
    type_coerce,
    update,
)
from sqlalchemy import Float as PlainFloat
from sqlalchemy import String as PlainString
from sqlalchemy.engine import Connection, CursorResult, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session, make_transient, sessionmaker
from sqlalchemy.sql import Select, Update

from slurmscale.audit import Kind
from slurmscale.identity import session_args
from slurmscale.lifecycles import (
    GANG_EDGES,
    GRACE_EDGES,
    HOLD_EDGES,
    INSTANCE_EDGES,
    REQUEST_EDGES,
    ChangedMeanwhile,
    GangStatus,
    GraceState,
    InstanceState,
    RequestStatus,
    check,
)
from slurmscale.ownership import own_like
from slurmscale.policy.model import PoolMemory
from slurmscale.spool import SpooledRequest
from slurmscale.store import tables as t
from slurmscale.store.protocol import LeaseLost
from slurmscale.store.rows import (
    CapacityReservationRow,
    EventRow,
    GangRow,
    GraceRow,
    HoldRow,
    InstanceRow,
    JobRow,
    JobRun,
    OfferingRow,
    PoolStateRow,
    PreemptionRow,
    ReplacementRow,
    RequestRow,
    SampleRow,
    utc,
)

# what decoding a stored value raises when it is not what its column says (SQLite keeps any
# text in any column: a date column's 'not-a-date' fails as the row is read)
DECODE_ERRORS = (ValueError, TypeError, OverflowError, UnicodeDecodeError)

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

ACTIVE_INSTANCE_STATES = (InstanceState.RUNNING.value,)


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


def _rowcount(s: Session, statement: Update) -> int:
    """How many rows an UPDATE matched."""
    return typed(CursorResult[Any], s.execute(statement)).rowcount


class StoreError(RuntimeError):
    """The store cannot be opened from its URL: not a database URL, a driver that is not
    installed, a SQLite path that cannot be created. The message names it, password hidden."""


class Store:
    def __init__(self, url: str) -> None:
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        from slurmscale.config_file import redact

        self.url = url
        try:
            self.engine = make_engine(url)
        except (ArgumentError, NoSuchModuleError, ImportError, OSError, ValueError) as e:
            what = (f"{e.strerror}: {e.filename}" if isinstance(e, OSError) and e.strerror
                    else f"no database driver installed for it ({e})"
                    if isinstance(e, ImportError | NoSuchModuleError) else str(e))
            raise StoreError(redact(f"cannot open the store {url}: {what}", url)) from None
        self._session = sessionmaker(self.engine, expire_on_commit=False)
        # (table, key) -> why its row could not be decoded: skipped by every read (`_rows`)
        self.quarantined: dict[tuple[str, str], str] = {}
        # (cluster, epoch) this store writes as, once its daemon leads (`lead`)
        self.led: tuple[str, int] | None = None

    def session(self) -> Session:
        return self._session()

    # --- the leader's fence, and transitions conditioned on the state read ----------------
    def lead(self, cluster: str, holder: str, now: datetime) -> int:
        """Take `cluster`'s leadership over in the store: its epoch becomes one more than any
        before, and every write this store makes from now on is conditioned on that epoch
        still being the latest (`_commit`). So a leader that lost its lease and has not
        noticed yet (a pass in flight, a process paused) writes nothing once another daemon
        has taken over: the store is fenced like EC2 and Slurm (daemon/fence.py), by the
        database itself rather than by a check made before the write. The daemon calls this
        each time it takes the lease. Returns the epoch."""
        lt = t.leadership
        with self.session() as s:
            # (one UPDATE: on PostgreSQL it waits for a write of the old leader's in flight,
            # which commits first or finds its epoch gone)
            if not _rowcount(s, update(lt).where(lt.c.cluster == cluster).values(
                    epoch=lt.c.epoch + 1, holder=holder, since=now)):
                s.execute(insert(lt).values(cluster=cluster, epoch=1, holder=holder, since=now))
            epoch = int(s.scalar(select(lt.c.epoch).where(lt.c.cluster == cluster)) or 0)
            s.commit()
        self.led = (cluster, epoch)
        return epoch

    def _commit(self, s: Session) -> None:
        """Commit a write, only while this store's leadership epoch is still the latest
        (`lead`): the check is a write in the same transaction, so a take-over either
        waits for it or is seen by it. A store that never led (the CLI) writes freely."""
        if self.led is not None:
            cluster, epoch = self.led
            lt = t.leadership
            if _rowcount(s, update(lt).where(lt.c.cluster == cluster, lt.c.epoch == epoch)
                         .values(epoch=epoch)) != 1:
                s.rollback()
                raise LeaseLost(f"another daemon has led cluster {cluster} since this one "
                                f"(epoch {epoch}) lost its lease: nothing written")
        s.commit()

    def _move(self, s: Session, key: Column[Any], state: Column[Any], keys: Sequence[str],
              edges: Mapping[Any, str], what: str, new: str, **values: object) -> int:
        """Move the records with these keys to state `new` (with `values`), each along an
        edge of its table (`check`), each written only if still in the state read
        (`WHERE status = old`). Returns how many were found."""
        olds: dict[str, list[str]] = {}
        for k, old in s.execute(select(key, state).where(key.in_(list(keys)))):
            check(edges, f"{what} {k}", old, new)
            olds.setdefault(old, []).append(k)
        for old, ks in olds.items():
            self._where_was(s, key, state, ks, old, {state.key: new, **values}, what)
        return sum(len(ks) for ks in olds.values())

    def _put(self, s: Session, row: Any, key: Column[Any], state: Column[Any],
             edges: Mapping[Any, str], what: str) -> None:
        """Write a whole record: a new one added, an existing one moved along an edge of its
        table and written only if still in the state read (`WHERE status = old`)."""
        k = getattr(row, key.key)
        old = None if k is None else s.scalar(select(state).where(key == k))
        check(edges, what, old, getattr(row, state.key))
        if old is None:
            s.add(row)  # (an id the database gives is set by the commit: not expired)
            return
        self._where_was(s, key, state, [k], old, {
            c.key: getattr(row, c.key) for c in key.table.columns if not c.primary_key}, what)

    @staticmethod
    def _where_was(s: Session, key: Column[Any], state: Column[Any], keys: Sequence[str],
                   old: str, values: Mapping[str, object], what: str) -> None:
        if _rowcount(s, update(key.table).where(key.in_(list(keys)), state == old)
                     .values(**values)) != len(keys):
            s.rollback()
            raise ChangedMeanwhile(f"{what}: changed by another writer after it was read as "
                                   f"{old!r}; nothing written")

    # --- reading rows that may not decode -------------------------------------------------
    def _rows(self, s: Session, q: Select[Any]) -> list[Any]:
        """The rows of an ORM query; a row whose stored values cannot be decoded (a date
        that is not one, say, written by hand or by a broken disk) is quarantined: left in
        place, skipped, and named in `quarantined`, so one bad record never stops a pass or
        a command. Only when the whole read fails are the rows loaded one by one."""
        try:
            return list(s.scalars(q))
        except DECODE_ERRORS:
            s.rollback()
        table = q.column_descriptions[0]["entity"]
        pk = inspect(table).primary_key
        out = []
        for key in list(s.execute(q.with_only_columns(*pk))):
            with self.session() as one:
                row = self._get(one, table, key[0] if len(pk) == 1 else tuple(key))
            if row is not None:
                out.append(row)
        return out

    @staticmethod
    def _values(s: Session, q: Select[Any]) -> list[Any]:
        """One text column's values (a key, a node), those its type cannot read (bytes in a
        text column) left out: a column read has no row to quarantine, and must not fail
        the pass."""
        try:
            return list(s.scalars(q))
        except DECODE_ERRORS:
            s.rollback()
        col = q.selected_columns[0]
        return [v for v in s.scalars(q.with_only_columns(type_coerce(col, PlainString())))
                if isinstance(v, str)]

    def _get(self, s: Session, table: type[Any], key: object) -> Any:
        try:
            return s.get(table, key)
        except DECODE_ERRORS as e:
            s.rollback()
            name = inspect(table).local_table.name
            said = " ".join(str(k) for k in key if k != "") if isinstance(key, tuple) else key
            self.quarantined[(name, str(said))] = f"{type(e).__name__}: {e}"[:300]
            return None

    @staticmethod
    def _overwrite(s: Session, row: Any) -> None:
        """Write `row` whole over the stored row of its key, without loading that row:
        `Session.merge` reads it first, so a stored value that cannot be decoded (a pool's
        target 'lots') failed every write of its key, and every pass with it, while the reads
        quarantined it. Overwriting repairs it with what the daemon now holds."""
        mapper = inspect(type(row))
        key = mapper.primary_key_from_instance(row)
        s.execute(delete(mapper.local_table).where(
            *[c == v for c, v in zip(mapper.primary_key, key, strict=True)]))
        if inspect(row).detached:  # (a record written before: inserted again, as new)
            make_transient(row)
        s.add(row)

    def upgrade(self) -> None:
        # (Alembic only here: importing it costs every other command about half a second)
        from alembic import command
        from alembic.config import Config as AlembicConfig

        cfg = AlembicConfig(str(ALEMBIC_INI))
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def schema_problem(self) -> str | None:
        """None when the schema is at the latest migration; otherwise what to do about it.
        Read-only commands check this instead of migrating behind the admin's back."""
        head = schema_head()
        try:
            with self.engine.connect() as conn:
                current = current_revision(conn)
        except Exception as e:  # noqa: BLE001 - reported to the admin verbatim
            from slurmscale.config_file import redact

            return redact(f"cannot open the store {self.engine.url.render_as_string()}: {e}",
                          self.url)
        if current != head:
            return (f"the store is at schema {current or 'none'}, this slurmscale needs {head}: "
                    "run `slurmscale db upgrade`")
        return None

    def close(self) -> None:
        self.engine.dispose()

    # requests -------------------------------------------------------------------------
    def is_outage(self, error: Exception) -> bool:
        # (a write refused because another daemon leads now is no fault of the record)
        return isinstance(error, DBAPIError | LeaseLost)

    def add_request(self, req: SpooledRequest) -> bool:
        """Insert a spooled request; False if it is already here (a re-drained spool file)."""
        row = RequestRow(
            id=req.id, kind=req.kind.value, hostlist=req.hostlist,
            nodes=json.dumps(list(req.nodes)), resume_file=req.resume_file,
            received_at=datetime.fromtimestamp(req.received_at, UTC),
            status=RequestStatus.PENDING.value,
        )
        with self.session() as s:
            if s.get(RequestRow, req.id) is not None:
                return False
            s.add(row)
            try:
                self._commit(s)
            except IntegrityError:
                return False
        return True

    def pending_requests(self) -> list[RequestRow]:
        with self.session() as s:
            return self._rows(s, select(RequestRow).where(
                t.requests.c.status == RequestStatus.PENDING.value)
                                  .order_by(t.requests.c.received_at, t.requests.c.id))

    def finish_requests(self, ids: Iterable[str], status: str, now: datetime,
                        error: str | None = None) -> None:
        ids = list(ids)
        if not ids:
            return
        with self.session() as s:
            self._move(s, t.requests.c.id, t.requests.c.status, ids, REQUEST_EDGES, "request",
                       status, processed_at=now, error=error)
            self._commit(s)

    def requests(self, limit: int = 100) -> list[RequestRow]:
        with self.session() as s:
            return self._rows(s, select(RequestRow).order_by(t.requests.c.received_at.desc())
                                  .limit(limit))

    # gangs ----------------------------------------------------------------------------
    def add_gang(self, row: GangRow) -> None:
        check(GANG_EDGES, f"gang {row.id}", None, row.status)
        with self.session() as s:
            s.add(row)
            self._commit(s)

    def get_gang(self, gang_id: str) -> GangRow | None:
        with self.session() as s:
            return self._get(s, GangRow, gang_id)

    def update_gang(self, gang_id: str, **values: object) -> None:
        with self.session() as s:
            if "status" in values:
                status = str(values.pop("status"))
                if not self._move(s, t.gangs.c.id, t.gangs.c.status, [gang_id], GANG_EDGES,
                                  "gang", status, **values):
                    check(GANG_EDGES, f"gang {gang_id}", None, status)
            else:
                s.execute(update(GangRow).where(t.gangs.c.id == gang_id).values(**values))
            self._commit(s)

    def gangs(self, limit: int = 100) -> list[GangRow]:
        with self.session() as s:
            return self._rows(s, select(GangRow).order_by(t.gangs.c.created_at.desc())
                                  .limit(limit))

    # instances ------------------------------------------------------------------------
    def add_instances(self, rows: Sequence[InstanceRow]) -> None:
        with self.session() as s:
            for r in rows:
                self._put(s, r, t.instances.c.instance_id, t.instances.c.state,
                          INSTANCE_EDGES, f"instance {r.instance_id}")
            self._commit(s)

    def active_instances(self, nodes: Iterable[str] | None = None) -> list[InstanceRow]:
        q = select(InstanceRow).where(t.instances.c.state.in_(ACTIVE_INSTANCE_STATES))
        if nodes is not None:
            q = q.where(t.instances.c.node.in_(list(nodes)))
        with self.session() as s:
            return self._rows(s, q.order_by(t.instances.c.node))

    def reserved_nodes(self) -> frozenset[str]:
        """Nodes whose running instance is in a capacity reservation (paid used or not)."""
        q = select(t.instances.c.node).where(t.instances.c.state.in_(ACTIVE_INSTANCE_STATES),
                                           t.instances.c.capacity_reservation_id != "")
        with self.session() as s:
            return frozenset(self._values(s, q))

    def last_instances(self, nodes: Iterable[str]) -> dict[str, InstanceRow]:
        """Each node's most recently launched instance, whatever its state."""
        latest = (select(t.instances.c.node, func.max(t.instances.c.launched_at).label("at"))
                  .where(t.instances.c.node.in_(list(nodes))).group_by(t.instances.c.node)
                  .subquery())
        with self.session() as s:
            rows = self._rows(s, select(InstanceRow).join(
                latest, (t.instances.c.node == latest.c.node)
                & (t.instances.c.launched_at == latest.c.at)))
            return {r.node: r for r in rows}

    def live_gangs(self) -> set[str]:
        """Gangs with an instance up or a launch in flight (their placement group is in use)."""
        with self.session() as s:
            up = self._values(s, select(t.instances.c.gang_id).where(
                t.instances.c.state.in_(ACTIVE_INSTANCE_STATES)).distinct())
            launching = self._values(s, select(t.gangs.c.id).where(
                t.gangs.c.status == GangStatus.LAUNCHING.value))
            return set(up) | set(launching)

    def instances(self, limit: int = 1000) -> list[InstanceRow]:
        with self.session() as s:
            return self._rows(s, select(InstanceRow).order_by(t.instances.c.launched_at.desc())
                                  .limit(limit))

    def mark_terminated(self, instance_ids: Iterable[str], now: datetime) -> None:
        ids = list(instance_ids)
        if not ids:
            return
        with self.session() as s:
            self._move(s, t.instances.c.instance_id, t.instances.c.state, ids, INSTANCE_EDGES,
                       "instance", InstanceState.TERMINATED.value, terminated_at=now)
            self._commit(s)

    # policy memory --------------------------------------------------------------------
    def pool_memory(self) -> dict[str, PoolMemory]:
        with self.session() as s:
            return {r.pool: PoolMemory(r.target, r.above_since, r.last_step_at)
                    for r in self._rows(s, select(PoolStateRow))}

    def save_pool_memory(self, memory: dict[str, PoolMemory], now: datetime) -> None:
        with self.session() as s:
            for pool, m in memory.items():
                self._overwrite(s, PoolStateRow(pool=pool, target=m.target,
                                                above_since=m.above_since,
                                                last_step_at=m.last_step_at, updated_at=now))
            self._commit(s)

    # holds (reservations) -------------------------------------------------------------
    def holds(self, states: tuple[str, ...] | None = None) -> list[HoldRow]:
        q = select(HoldRow)
        if states is not None:
            q = q.where(t.holds.c.state.in_(states))
        with self.session() as s:
            return self._rows(s, q.order_by(t.holds.c.created_s.desc()))

    def hold(self, name: str) -> HoldRow | None:
        with self.session() as s:
            return self._get(s, HoldRow, name)

    def put_hold(self, row: HoldRow) -> None:
        with self.session() as s:
            self._put(s, row, t.holds.c.name, t.holds.c.state, HOLD_EDGES, f"hold {row.name}")
            self._commit(s)

    def exhausted_jobs(self) -> frozenset[str]:
        with self.session() as s:
            return frozenset(self._values(s, select(t.holds.c.job_id).where(
                t.holds.c.exhausted)))

    # offerings (capacity backoff) -----------------------------------------------------
    def offering(self, pool: str, offering: str = "") -> OfferingRow | None:
        with self.session() as s:
            return self._get(s, OfferingRow, (pool, offering))

    def offerings(self) -> list[OfferingRow]:
        with self.session() as s:
            return self._rows(s, select(OfferingRow))

    def put_offering(self, row: OfferingRow) -> None:
        with self.session() as s:
            self._overwrite(s, row)
            self._commit(s)

    # capacity reservations and blocks (as last read from EC2) -------------------------
    def save_capacity_reservations(self, rows: Sequence[CapacityReservationRow]) -> None:
        with self.session() as s:
            for r in rows:
                self._overwrite(s, r)
            self._commit(s)

    def capacity_reservations(self) -> list[CapacityReservationRow]:
        with self.session() as s:
            return self._rows(s, select(CapacityReservationRow).order_by(
                t.capacity_reservations.c.pool, t.capacity_reservations.c.start_at,
                t.capacity_reservations.c.id))

    def reserved_instances(self, reservation_id: str, since: datetime) -> list[InstanceRow]:
        """The instances that ran in this reservation at some time since `since` (the metrics
        ask every pass: a long-lived reservation's older history is not read)."""
        with self.session() as s:
            return self._rows(s, select(InstanceRow).where(
                t.instances.c.capacity_reservation_id == reservation_id,
                or_(t.instances.c.terminated_at.is_(None), t.instances.c.terminated_at >= since)))

    # preemptions ----------------------------------------------------------------------
    def add_preemption(self, row: PreemptionRow) -> None:
        with self.session() as s:
            s.add(row)
            self._commit(s)

    def preemptions(self, job_id: str | None = None,
                    since: float | None = None) -> list[PreemptionRow]:
        q = select(PreemptionRow)
        if job_id is not None:
            q = q.where(t.preemptions.c.job_id == job_id)
        if since is not None:
            q = q.where(t.preemptions.c.at >= datetime.fromtimestamp(since, UTC))
        with self.session() as s:
            return self._rows(s, q.order_by(t.preemptions.c.id))

    # graces ---------------------------------------------------------------------------
    def graces(self, open_only: bool = True) -> list[GraceRow]:
        """The jobs signalled before a requeue (`open_only`: those still in their grace)."""
        q = select(GraceRow)
        if open_only:
            q = q.where(t.graces.c.state == GraceState.SIGNALLED.value)
        with self.session() as s:
            return self._rows(s, q.order_by(t.graces.c.id))

    def put_grace(self, row: GraceRow) -> None:
        with self.session() as s:
            self._put(s, row, t.graces.c.id, t.graces.c.state, GRACE_EDGES,
                      f"grace of job {row.job_id} on {row.node}")
            self._commit(s)

    def add_replacement(self, row: ReplacementRow) -> None:
        with self.session() as s:
            s.add(row)
            self._commit(s)

    def replacements(self, since: float | None = None) -> list[ReplacementRow]:
        q = select(ReplacementRow)
        if since is not None:
            q = q.where(t.replacements.c.at >= datetime.fromtimestamp(since, UTC))
        with self.session() as s:
            return self._rows(s, q.order_by(t.replacements.c.id))

    def instance(self, instance_id: str) -> InstanceRow | None:
        with self.session() as s:
            return self._get(s, InstanceRow, instance_id)

    # timers ---------------------------------------------------------------------------
    def timers(self, kind: str) -> dict[str, float]:
        """(A time that is not one, written by hand or a broken disk, is skipped: that wait
        starts again, which errs on the side of waiting.)"""
        tt = t.timers
        raw = type_coerce(tt.c.since_s, PlainFloat)  # (read as stored; checked here)
        with self.session() as s:
            found = s.execute(select(tt.c.subject, raw).where(tt.c.kind == kind)).all()
        return {str(k): float(v) for k, v in found
                if isinstance(v, int | float) and not isinstance(v, bool)
                and math.isfinite(v) and abs(v) <= t.MAX_ABS}

    def put_timers(self, kind: str, since: Mapping[str, float],
                   notes: Mapping[str, str] | None = None) -> None:
        tt = t.timers
        notes = notes or {}
        with self.session() as s:
            s.execute(delete(tt).where(tt.c.kind == kind))
            if since:
                s.execute(insert(tt), [{"kind": kind, "subject": k, "since_s": v,
                                        "note": notes.get(k)} for k, v in since.items()])
            self._commit(s)

    def timer_notes(self, kind: str) -> dict[str, str]:
        tt = t.timers
        with self.session() as s:
            q = select(tt.c.subject, type_coerce(tt.c.note, PlainString())).where(
                tt.c.kind == kind, tt.c.note.is_not(None))
            found = s.execute(q).all()
        return {str(k): v for k, v in found if isinstance(v, str)}

    # events ---------------------------------------------------------------------------
    def add_event(self, kind: Kind, message: str, now: datetime, *, node: str | None = None,
                  request_id: str | None = None, gang_id: str | None = None) -> None:
        with self.session() as s:
            s.add(EventRow(at=now, kind=kind, node=node, request_id=request_id,
                           gang_id=gang_id, message=message))
            self._commit(s)

    def events(self, since: datetime | None = None, limit: int = 200, *,
               until: datetime | None = None,
               kinds: Iterable[str] | None = None) -> list[EventRow]:
        """The newest `limit` events (of these kinds, in [since, until)), oldest first."""
        q = select(EventRow)
        if since is not None:
            q = q.where(t.events.c.at >= since)
        if until is not None:
            q = q.where(t.events.c.at < until)
        if kinds is not None:
            q = q.where(t.events.c.kind.in_(list(kinds)))
        with self.session() as s:
            rows = self._rows(s, q.order_by(t.events.c.id.desc()).limit(limit))
        return list(reversed(rows))

    # jobs and samples (reports, metrics) --------------------------------------------------
    def add_job_starts(self, rows: Sequence[JobRow]) -> list[JobRow]:
        """Insert the jobs not recorded yet (a restarted daemon sees running jobs again);
        returns those inserted."""
        if not rows:
            return []
        with self.session() as s:
            known = set(self._values(s, select(t.jobs.c.job_id).where(
                t.jobs.c.job_id.in_([r.job_id for r in rows]))))
            new = [r for r in rows if r.job_id not in known]
            s.add_all(new)
            self._commit(s)  # the session keeps their loaded values (expire_on_commit=False)
        return new

    def end_jobs(self, job_ids: Iterable[str], now: datetime) -> None:
        ids = list(job_ids)
        if not ids:
            return
        with self.session() as s:
            s.execute(update(JobRow).where(t.jobs.c.job_id.in_(ids), t.jobs.c.ended_at.is_(None))
                      .values(ended_at=now))
            self._commit(s)

    def running_job_ids(self) -> set[str]:
        with self.session() as s:
            return set(self._values(s, select(t.jobs.c.job_id).where(
                t.jobs.c.ended_at.is_(None))))

    def job_runs(self, since: datetime) -> list[JobRun]:
        with self.session() as s:
            j = t.jobs.c
            where = (j.ended_at >= since, j.time_limit_s.is_not(None), j.time_limit_s > 0)
            found: list[tuple[Any, ...]]
            try:
                found = [tuple(r) for r in s.execute(select(
                    j.job_id, j.pool, j.started_at, j.ended_at, j.time_limit_s).where(*where))]
            except DECODE_ERRORS:  # a row that cannot be read: read them as rows, skip it
                s.rollback()
                found = [(r.job_id, r.pool, r.started_at, r.ended_at, r.time_limit_s)
                         for r in self._rows(s, select(JobRow).where(*where))]
            return [JobRun(job_id, utc(end).timestamp(), pool, (end - start).total_seconds(),
                           float(limit)) for job_id, pool, start, end, limit in found]

    def jobs(self, since: datetime, until: datetime) -> list[JobRow]:
        """Jobs that started before `until` and had not ended by `since`."""
        with self.session() as s:
            return self._rows(s, select(JobRow).where(
                t.jobs.c.started_at < until,
                or_(t.jobs.c.ended_at.is_(None), t.jobs.c.ended_at >= since))
                .order_by(t.jobs.c.started_at))

    def add_samples(self, rows: Sequence[SampleRow]) -> None:
        with self.session() as s:
            s.add_all(rows)
            self._commit(s)

    def samples(self, since: datetime, until: datetime) -> list[SampleRow]:
        with self.session() as s:
            return self._rows(s, select(SampleRow).where(
                t.samples.c.at >= since, t.samples.c.at < until).order_by(t.samples.c.at))

    def sample_series(self, since: datetime, until: datetime, points: int
                      ) -> dict[str, list[tuple[float, float, float, float]]]:
        """Per pool, the samples of [since, until) averaged into at most `points` equal time
        buckets, in SQL (GROUP BY pool, bucket): (bucket's mean time, nodes up, busy, pending
        GPUs). A month at 20 pools is 864,000 rows; what comes back is 20 x `points`."""
        width = max(1, math.ceil((until - since).total_seconds() / max(1, points)))
        epoch = func.extract("epoch", t.samples.c.at)
        # integer division of whole seconds: SQLite (without its math functions) and
        # PostgreSQL alike
        bucket = cast(epoch - int(since.timestamp()), Integer) // width
        q = (select(t.samples.c.pool, func.avg(epoch), func.avg(t.samples.c.nodes_up),
                    func.avg(t.samples.c.nodes_busy), func.avg(t.samples.c.pending_gpus))
             .where(t.samples.c.at >= since, t.samples.c.at < until)
             .group_by(t.samples.c.pool, bucket).order_by(t.samples.c.pool, bucket))
        out: dict[str, list[tuple[float, float, float, float]]] = {}
        with self.session() as s:
            for pool, at, up, busy, gpus in s.execute(q):
                out.setdefault(pool, []).append((float(at), float(up), float(busy),
                                                 float(gpus)))
        return out

    def prune_samples(self, before: datetime) -> None:
        with self.session() as s:
            s.execute(delete(SampleRow).where(t.samples.c.at < before))
            self._commit(s)

    def instances_between(self, since: datetime, until: datetime) -> list[InstanceRow]:
        """Instances that ran for some of [since, until)."""
        with self.session() as s:
            return self._rows(s, select(InstanceRow).where(
                t.instances.c.launched_at < until,
                or_(t.instances.c.terminated_at.is_(None), t.instances.c.terminated_at >= since)))

    def gangs_between(self, since: datetime, until: datetime) -> list[GangRow]:
        with self.session() as s:
            return self._rows(s, select(GangRow).where(
                t.gangs.c.created_at >= since, t.gangs.c.created_at < until)
                .order_by(t.gangs.c.created_at))

    def event_counts(self, since: datetime, until: datetime) -> dict[str, int]:
        with self.session() as s:
            return {k: n for k, n in s.execute(
                select(t.events.c.kind, func.count()).where(
                    t.events.c.at >= since, t.events.c.at < until).group_by(t.events.c.kind))}
