"""Test fixtures: records as they stand after their lifecycle (a terminated instance, say),
written straight into the store. The store's own writes walk the transition tables; a
fixture describing the past need not replay every step."""

from __future__ import annotations

from collections.abc import Sequence

from slurmscale.store.repo import Store


def seed(store: Store, rows: Sequence[object]) -> None:
    with store.session() as s:
        for r in rows:
            s.merge(r)
        s.commit()
