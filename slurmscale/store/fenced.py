"""The store's transactions, whatever they hold (repo.py's `Store` builds on them): fenced by
the leader's epoch, transitions conditioned on the state read, rows that cannot be decoded
quarantined, never a stop of the pass."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from typing import cast as typed

from sqlalchemy import Column, delete, insert, inspect, select, type_coerce, update
from sqlalchemy import String as PlainString
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session, make_transient, sessionmaker
from sqlalchemy.sql import Select, Update

from slurmscale.lifecycles import ChangedMeanwhile, check
from slurmscale.store import tables as t
from slurmscale.store.engine import make_engine
from slurmscale.store.protocol import LeaseLost

# what decoding a stored value raises when it is not what its column says (SQLite keeps any
# text in any column: a date column's 'not-a-date' fails as the row is read)
DECODE_ERRORS = (ValueError, TypeError, OverflowError, UnicodeDecodeError)


def rowcount(s: Session, statement: Update) -> int:
    """How many rows an UPDATE matched."""
    return typed(CursorResult[Any], s.execute(statement)).rowcount


class StoreError(RuntimeError):
    """The store cannot be opened from its URL: not a database URL, a driver that is not
    installed, a SQLite path that cannot be created. The message names it, password hidden."""


class FencedStore:
    """How the store reads and writes, whatever it holds: each write committed only while
    this store's leadership epoch is the latest (`lead`), each transition only from the
    state it was read in, and a row that cannot be decoded quarantined rather than failing
    the read. `Store` (repo.py) is what slurmscale keeps, on top of it."""

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
            if not rowcount(s, update(lt).where(lt.c.cluster == cluster).values(
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
            if rowcount(s, update(lt).where(lt.c.cluster == cluster, lt.c.epoch == epoch)
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
        if rowcount(s, update(key.table).where(key.in_(list(keys)), state == old)
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
