"""The SQL store's rows of warm pools (daemon/passes/warm_pool.py): an instance moved to and
from `warm`, and its earlier runs and its stops kept as `instance_periods` so that `report`
counts each run as node hours and each stop as volume hours (the instance row holds its
current or last run). `Store` (repo.py) is one of these."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from slurmscale.lifecycles import INSTANCE_EDGES, InstanceState
from slurmscale.store import tables as t
from slurmscale.store.fenced import FencedStore
from slurmscale.store.rows import InstancePeriodRow, InstanceRow


class WarmRows(FencedStore):
    """The instance moves a warm pool makes, with their periods (`Store` adds the rest)."""

    def _started(self, s: Session, new: InstanceRow) -> None:
        """A warm instance started again: its last run kept as a period, its stop ended."""
        c = t.instances.c
        old = s.execute(select(c.state, c.launched_at, c.terminated_at).where(
            c.instance_id == new.instance_id)).first()
        if old is None or old.state != InstanceState.WARM.value:
            return
        s.add(InstancePeriodRow.of(new, InstanceState.RUNNING.value, old.launched_at,
                                   old.terminated_at))
        self._end_stop(s, [new.instance_id], new.launched_at)

    @staticmethod
    def _end_stop(s: Session, ids: list[str], at: datetime) -> None:
        p = t.instance_periods.c
        s.execute(update(t.instance_periods).where(
            p.instance_id.in_(ids), p.state == InstanceState.WARM.value, p.until.is_(None))
            .values(until=at))

    def keep_warm(self, instance_ids: Iterable[str], now: datetime) -> None:
        ids = list(instance_ids)
        if not ids:
            return
        c = t.instances.c
        with self.session() as s:
            running = self._rows(s, select(InstanceRow).where(
                c.instance_id.in_(ids), c.state == InstanceState.RUNNING.value))
            # (one stopped again - a warm start given back - was never started on the store)
            self._move(s, c.instance_id, c.state, [r.instance_id for r in running],
                       INSTANCE_EDGES, "instance", InstanceState.WARM.value, terminated_at=now)
            self._move(s, c.instance_id, c.state,
                       [i for i in ids if i not in {r.instance_id for r in running}],
                       INSTANCE_EDGES, "instance", InstanceState.WARM.value)
            for r in running:
                s.add(InstancePeriodRow.of(r, InstanceState.WARM.value, now))
            self._commit(s)

    def instance_periods(self, since: datetime, until: datetime) -> list[InstancePeriodRow]:
        """The warm pool instances' periods that overlap [since, until)."""
        p = t.instance_periods.c
        with self.session() as s:
            return self._rows(s, select(InstancePeriodRow).where(
                p.since < until, or_(p.until.is_(None), p.until >= since))
                .order_by(p.since, p.id))

    def warm_instances(self, pool: str | None = None) -> list[InstanceRow]:
        q = select(InstanceRow).where(t.instances.c.state == InstanceState.WARM.value)
        if pool is not None:
            q = q.where(t.instances.c.pool == pool)
        with self.session() as s:
            return self._rows(s, q.order_by(t.instances.c.launched_at,
                                            t.instances.c.instance_id))
