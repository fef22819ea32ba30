"""What the capacity and interruption passes (policy, holds, capacity backoff, evacuating an
interrupted node) need of a store.

The daemon gives them the SQL store; the simulator gives them `MemoryStore`, so it runs the
daemon's own passes without a database. Both refuse an illegal hold transition."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Protocol

from slurmscale.policy.model import PoolMemory
from slurmscale.store.tables import (
    CapacityReservationRow,
    HoldRow,
    InstanceRow,
    OfferingRow,
    PreemptionRow,
)


class PassStore(Protocol):
    def pool_memory(self) -> dict[str, PoolMemory]: ...

    def save_pool_memory(self, memory: dict[str, PoolMemory], now: datetime) -> None: ...

    def holds(self, states: tuple[str, ...] | None = None) -> list[HoldRow]: ...

    def hold(self, name: str) -> HoldRow | None: ...

    def put_hold(self, row: HoldRow) -> None: ...

    def exhausted_jobs(self) -> frozenset[str]: ...

    def offering(self, pool: str) -> OfferingRow | None: ...

    def offerings(self) -> list[OfferingRow]: ...

    def put_offering(self, row: OfferingRow) -> None: ...

    def capacity_reservations(self) -> list[CapacityReservationRow]: ...

    def reserved_nodes(self) -> frozenset[str]: ...

    def add_preemption(self, row: PreemptionRow) -> None: ...

    def preemptions(self, job_id: str | None = None,
                    since: float | None = None) -> list[PreemptionRow]: ...

    def has_preemption(self, job_id: str, instance_id: str) -> bool: ...

    def instance(self, instance_id: str) -> InstanceRow | None: ...

    def active_instances(self, nodes: Iterable[str] | None = None) -> list[InstanceRow]: ...
