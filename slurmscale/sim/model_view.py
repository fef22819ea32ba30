"""What the simulated Slurm adapter (slurm_adapter.py) reads and changes of the engine's model:
the nodes and the simulated slurmctld as protocols, the reservations it keeps, and times as
Slurm prints them (trace second 0 is `EPOCH` to Slurm and the daemon)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from slurmscale.policy.model import PoolKnobs
from slurmscale.sim.slurm_model import YEAR_S, SlurmModel
from slurmscale.sim.trace import TraceJob


class SimNode(Protocol):
    """A node of the engine's model, as Slurm would report it."""

    name: str
    pool: str
    gpus: int
    state: str  # down | booting | up
    free: int
    jobs: int
    idle_since: float | None
    resv: str | None
    windows: tuple[tuple[float, float], ...]  # window reservations' spans over it
    drain: str
    failed_at: float | None  # hardware failed: Slurm has it DOWN, not responding


class SimModel(Protocol):
    """What this adapter reads and changes of the simulated Slurm (`sim/scheduler.py`'s
    SimSlurmctld), and through it of the world's nodes."""

    # (read-only here: the engine's own node type, not this protocol's, fills them)
    @property
    def nodes(self) -> Sequence[SimNode]: ...

    @property
    def by_name(self) -> Mapping[str, SimNode]: ...

    @property
    def node_index(self) -> Mapping[str, int]: ...

    @property
    def touched(self) -> set[str]: ...  # nodes changed since this adapter last read them

    @property
    def main(self) -> PoolKnobs: ...  # the main pool (spot, where there is an on-demand fallback)

    jobs: list[TraceJob]
    slurm_ids: list[str]  # each job's id as Slurm gives it (squeue, sprio, the resume file)
    idx_of: dict[str, int]  # Slurm's job id -> the job
    limit: list[float]
    pending: dict[int, TraceJob]
    eligible_at: dict[int, float]
    steered: set[int]
    attached: dict[int, str]  # pending job -> the reservation it is pointed at

    @property
    def expected(self) -> Mapping[int, float]: ...  # pending job -> backfill's planned start

    @property
    def placed(self) -> Mapping[int, Sequence[tuple[SimNode, int]]]: ...

    placed_serial: int  # moved on as a job is placed or its run is over
    start: dict[int, float]
    started_in: dict[str, str]  # the trace's job id -> the reservation it started in
    bf_dirty: bool
    main_wanted: bool  # a main scheduler run is asked for (what an update RPC does in Slurm)
    windowed: bool  # a node is in a window reservation (its `windows`)
    down: set[str]  # partitions set DOWN
    sched: SlurmModel

    @property
    def shown(self) -> Mapping[int, int]: ...  # each pending job's priority as squeue shows it

    def priority_factors(self, idx: int) -> tuple[float, float, float]: ...

    def partitions(self, idx: int) -> tuple[str, ...]: ...

    def release_nodes(self, names: list[str], now: float, force: bool = False) -> None: ...

    def requeue_job(self, idx: int, now: float) -> None: ...

    def signal(self, idx: int, now: float) -> None: ...

    def warm_nodes(self, names: list[str], now: float) -> None: ...

    def steer(self, idx: int) -> None: ...

def squeue_limit(limit_s: float) -> int | None:
    """A time limit as squeue gives it: UNLIMITED (None) for the model's infinite one."""
    return None if limit_s >= YEAR_S else int(limit_s)


EPOCH = 1_700_000_000.0  # what trace second 0 is to Slurm and the daemon


@functools.lru_cache(maxsize=1 << 16)
def stamp(t: float) -> str:
    """A trace time as Slurm prints times (here with an explicit UTC offset). Memoised: a
    job's record is made again with its same submit time, and backfill plans at the same
    few times (the running jobs' limits)."""
    return datetime.fromtimestamp(t + EPOCH, UTC).isoformat()


@dataclass
class SimReservation:
    name: str
    nodes: tuple[str, ...]
    users: tuple[str, ...]
    start: float
    end: float
    # over a time window (a block pool's closed span): its nodes' `windows`, no job in it;
    # otherwise a hold, its nodes' `resv`, its gang pointed at it
    window: bool = False
