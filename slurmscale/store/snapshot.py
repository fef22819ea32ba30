"""What the capacity policy reads of the store, read once: a read-only `PassStore`.

`plan --live` makes the policy's decisions without carrying them out, so of the store it only
reads - the policy's memory, the holds, the pools in capacity backoff, the capacity
reservations as last read, the recent preemptions. Those reads are small, but opening the SQL
store means importing SQLAlchemy, a third of the command's time at 50,000 jobs; so the command
makes them in a child process (`ReadAside`) while it reads and parses Slurm itself, and the
child hands them back as this snapshot, its records as plain field values through a pipe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn

from slurmscale.aside import Aside, AsideFailed
from slurmscale.policy.model import PoolMemory
from slurmscale.store.protocol import PassStore
from slurmscale.store.rows import (
    CapacityReservationRow,
    GraceRow,
    HoldRow,
    InstanceRow,
    JobRun,
    OfferingRow,
    PreemptionRow,
    ReplacementRow,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


class ReadOnly(RuntimeError):
    """A write, or a read the snapshot was not made with: a caller bug, never data's."""


class StoreUnreadable(RuntimeError):
    """The child could not read the store (the database failed mid-read, say): the message
    says why, for the command's one line."""


@dataclass(frozen=True)
class StoreSnapshot:
    """`preemptions_since`: the preemptions read are those since then (Unix s)."""

    memory: dict[str, PoolMemory]
    hold_rows: tuple[HoldRow, ...]
    offering_rows: tuple[OfferingRow, ...]
    reservation_rows: tuple[CapacityReservationRow, ...]
    preemption_rows: tuple[PreemptionRow, ...]
    reserved: frozenset[str]
    preemptions_since: float
    # the jobs that ended since `runs_since` (None: not read), for limit_use: auto
    runs: tuple[JobRun, ...] = ()
    runs_since: float | None = None
    # the jobs in their grace (signalled before a requeue), for `plan`
    grace_rows: tuple[GraceRow, ...] = ()

    @classmethod
    def read(cls, store: PassStore, preemptions_since: float,
             runs_since: float | None = None) -> StoreSnapshot:
        runs = (() if runs_since is None
                else tuple(store.job_runs(datetime.fromtimestamp(runs_since, UTC))))
        return cls(store.pool_memory(), tuple(store.holds()), tuple(store.offerings()),
                   tuple(store.capacity_reservations()),
                   tuple(store.preemptions(since=preemptions_since)), store.reserved_nodes(),
                   preemptions_since, runs, runs_since, tuple(store.graces()))

    # --- across a pipe: records as their field values, so the reader needs no ORM --------
    def to_plain(self) -> dict[str, Any]:
        def plain(rows: Iterable[DataclassInstance]) -> list[dict[str, Any]]:
            # (field by field: a record the SQL store loaded also carries the ORM's state)
            return [{f.name: getattr(r, f.name) for f in fields(r)} for r in rows]
        return {"memory": {k: asdict(v) for k, v in self.memory.items()},
                "holds": plain(self.hold_rows), "offerings": plain(self.offering_rows),
                "reservations": plain(self.reservation_rows),
                "preemptions": plain(self.preemption_rows), "reserved": sorted(self.reserved),
                "since": self.preemptions_since, "runs": list(self.runs),
                "runs_since": self.runs_since, "graces": plain(self.grace_rows)}

    @classmethod
    def from_plain(cls, d: dict[str, Any]) -> StoreSnapshot:
        return cls({k: PoolMemory(**v) for k, v in d["memory"].items()},
                   tuple(HoldRow(**r) for r in d["holds"]),
                   tuple(OfferingRow(**r) for r in d["offerings"]),
                   tuple(CapacityReservationRow(**r) for r in d["reservations"]),
                   tuple(PreemptionRow(**r) for r in d["preemptions"]),
                   frozenset(d["reserved"]), d["since"], tuple(JobRun(*r) for r in d["runs"]),
                   d["runs_since"], tuple(GraceRow(**r) for r in d["graces"]))

    # --- PassStore's reads (copies: a caller that edits one changes nothing) --------------
    def pool_memory(self) -> dict[str, PoolMemory]:
        return dict(self.memory)

    def holds(self, states: tuple[str, ...] | None = None) -> list[HoldRow]:
        return [replace(h) for h in self.hold_rows if states is None or h.state in states]

    def hold(self, name: str) -> HoldRow | None:
        return next((replace(h) for h in self.hold_rows if h.name == name), None)

    def exhausted_jobs(self) -> frozenset[str]:
        return frozenset(h.job_id for h in self.hold_rows if h.exhausted)

    def offering(self, pool: str, offering: str = "") -> OfferingRow | None:
        return next((replace(o) for o in self.offering_rows
                     if (o.pool, o.offering) == (pool, offering)), None)

    def offerings(self) -> list[OfferingRow]:
        return [replace(o) for o in self.offering_rows]

    def capacity_reservations(self) -> list[CapacityReservationRow]:
        return [replace(r) for r in self.reservation_rows]

    def reserved_nodes(self) -> frozenset[str]:
        return self.reserved

    def preemptions(self, job_id: str | None = None,
                    since: float | None = None) -> list[PreemptionRow]:
        if since is None or since < self.preemptions_since:
            raise ReadOnly(f"preemptions since {since}: the snapshot holds those since "
                           f"{self.preemptions_since}")
        return [replace(p) for p in self.preemption_rows
                if p.at.timestamp() >= since and (job_id is None or p.job_id == job_id)]

    def job_runs(self, since: datetime) -> list[JobRun]:
        # (the runs read from `runs_since`, the same window's start as the plan's now gives)
        if self.runs_since is None or since.timestamp() < self.runs_since - 1:
            raise ReadOnly(f"job runs since {since}: the snapshot holds those since "
                           f"{self.runs_since}")
        return list(self.runs)

    # --- what the snapshot was not made for ----------------------------------------------
    def _refuse(self, what: str) -> NoReturn:
        raise ReadOnly(f"{what}: a store snapshot is read-only and holds the policy's reads")

    def save_pool_memory(self, memory: dict[str, PoolMemory], now: datetime) -> None:
        self._refuse("save_pool_memory")

    def put_hold(self, row: HoldRow) -> None:
        self._refuse("put_hold")

    def put_offering(self, row: OfferingRow) -> None:
        self._refuse("put_offering")

    def add_preemption(self, row: PreemptionRow) -> None:
        self._refuse("add_preemption")

    def add_replacement(self, row: ReplacementRow) -> None:
        self._refuse("add_replacement")

    def graces(self, open_only: bool = True) -> list[GraceRow]:
        if not open_only:
            self._refuse("graces(open_only=False)")
        return [replace(r) for r in self.grace_rows]

    def put_grace(self, row: GraceRow) -> None:
        self._refuse("put_grace")

    def replacements(self, since: float | None = None) -> list[ReplacementRow]:
        self._refuse("replacements")

    def instance(self, instance_id: str) -> InstanceRow | None:
        self._refuse("instance")

    def active_instances(self, nodes: Iterable[str] | None = None) -> list[InstanceRow]:
        self._refuse("active_instances")


class ReadAside:
    """A `StoreSnapshot` read by a child process while this one goes on (reading Slurm):
    `snapshot()` waits for it (raises StoreUnreadable). `open_store`: the CLI's opener, which
    prints one line and exits on a store that cannot be used - what it printed comes back
    with its code, and `snapshot()` prints the same and exits the same. `close()` ends a
    child whose answer was never waited for (slurmscale/aside.py)."""

    def __init__(self, open_store: Callable[[], Any], preemptions_since: float,
                 runs_since: float | None = None) -> None:
        def read() -> dict[str, Any]:
            store = open_store()
            try:
                return StoreSnapshot.read(store, preemptions_since, runs_since).to_plain()
            finally:
                store.close()
        self._aside = Aside(read)
        self._got: StoreSnapshot | None = None

    def snapshot(self) -> StoreSnapshot:
        if self._got is None:
            try:
                self._got = StoreSnapshot.from_plain(self._aside.result())
            except AsideFailed as e:
                raise StoreUnreadable(str(e)) from None
        return self._got

    def close(self) -> None:
        self._aside.close()
