"""The store: short transactions, never a network call inside one (load, compute, apply)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Float as PlainFloat
from sqlalchemy import (
    Integer,
    cast,
    delete,
    func,
    insert,
    or_,
    select,
    type_coerce,
    update,
)
from sqlalchemy import String as PlainString
from sqlalchemy.exc import DBAPIError, IntegrityError

from slurmscale.audit import Kind
from slurmscale.lifecycles import (
    GANG_EDGES,
    GRACE_EDGES,
    HOLD_EDGES,
    INSTANCE_EDGES,
    REQUEST_EDGES,
    GangStatus,
    GraceState,
    InstanceState,
    RequestStatus,
    check,
)
from slurmscale.policy.model import PoolMemory
from slurmscale.spool import SpooledRequest
from slurmscale.store import tables as t
from slurmscale.store.engine import ALEMBIC_INI as ALEMBIC_INI
from slurmscale.store.engine import current_revision as current_revision
from slurmscale.store.engine import schema_head as schema_head
from slurmscale.store.fenced import DECODE_ERRORS
from slurmscale.store.fenced import StoreError as StoreError
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
    LaunchPhasesRow,
    OfferingRow,
    PoolStateRow,
    PreemptionRow,
    ReplacementRow,
    RequestRow,
    SampleRow,
    TimerKind,
    utc,
)
from slurmscale.store.warm_rows import WarmRows

ACTIVE_INSTANCE_STATES = (InstanceState.RUNNING.value,)


class Store(WarmRows):
    """What slurmscale keeps between passes and for its reports, by table."""

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
                if r.state == InstanceState.RUNNING:
                    self._started(s, r)
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
        c = t.instances.c
        with self.session() as s:
            # (a warm one's terminated_at stays its stop: its run ended there)
            warm = list(self._values(s, select(c.instance_id).where(
                c.instance_id.in_(ids), c.state == InstanceState.WARM.value)))
            self._move(s, c.instance_id, c.state, [i for i in ids if i not in warm],
                       INSTANCE_EDGES, "instance", InstanceState.TERMINATED.value,
                       terminated_at=now)
            if warm:
                self._move(s, c.instance_id, c.state, warm, INSTANCE_EDGES, "instance",
                           InstanceState.TERMINATED.value)
                self._end_stop(s, warm, now)
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
    def timers(self, kind: TimerKind) -> dict[str, float]:
        """(A time that is not one, written by hand or a broken disk, is skipped: that wait
        starts again, which errs on the side of waiting.)"""
        tt = t.timers
        raw = type_coerce(tt.c.since_s, PlainFloat)  # (read as stored; checked here)
        with self.session() as s:
            found = s.execute(select(tt.c.subject, raw).where(tt.c.kind == kind)).all()
        return {str(k): float(v) for k, v in found
                if isinstance(v, int | float) and not isinstance(v, bool)
                and math.isfinite(v) and abs(v) <= t.MAX_ABS}

    def set_timers(self, kind: TimerKind, since: Mapping[str, float],
                   notes: Mapping[str, str] | None = None) -> None:
        if not since:
            return
        tt = t.timers
        notes = notes or {}
        with self.session() as s:
            s.execute(delete(tt).where(tt.c.kind == kind, tt.c.subject.in_(list(since))))
            s.execute(insert(tt), [{"kind": kind, "subject": k, "since_s": v,
                                    "note": notes.get(k)} for k, v in since.items()])
            self._commit(s)

    def end_timers(self, kind: TimerKind, subjects: Iterable[str]) -> None:
        gone = list(subjects)
        if not gone:
            return
        tt = t.timers
        with self.session() as s:
            s.execute(delete(tt).where(tt.c.kind == kind, tt.c.subject.in_(gone)))
            self._commit(s)

    def timer_notes(self, kind: TimerKind) -> dict[str, str]:
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

    # launch phases (time to run) -----------------------------------------------------------
    def put_launch_phases(self, rows: Sequence[LaunchPhasesRow]) -> None:
        if not rows:
            return
        with self.session() as s:
            for r in rows:
                self._overwrite(s, r)
            self._commit(s)

    def set_launch_phases_apart(self, instance_ids: Sequence[str]) -> None:
        if not instance_ids:
            return
        lp = t.launch_phases.c
        with self.session() as s:
            for iid, answered in s.execute(select(lp.instance_id, lp.answered_s).where(
                    lp.instance_id.in_(list(instance_ids)))).all():
                s.execute(update(t.launch_phases).where(lp.instance_id == iid).values(
                    instance_id=f"{iid}@{int(answered or 0)}"))
            self._commit(s)

    def launch_phases(self, since_s: float | None = None,
                      open_only: bool = False) -> list[LaunchPhasesRow]:
        lp = t.launch_phases.c
        q = select(LaunchPhasesRow)
        if since_s is not None:
            q = q.where(lp.answered_s >= since_s)
        if open_only:
            q = q.where(lp.started_s.is_(None))
        with self.session() as s:
            return self._rows(s, q.order_by(lp.answered_s, lp.instance_id))

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
