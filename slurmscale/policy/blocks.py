"""Capacity Blocks for ML as time windows. Pure: the blocks as EC2 reports them and the clock
in, what Slurm should be told out.

A block is usable from its start until its end less a margin (time to requeue what still runs
and power the nodes down before EC2 takes the instances back). Outside those windows a block
pool's nodes sit in slurmscale reservations, so Slurm starts no job there: `<pool>-before`
from now to the next block's start (jobs pend, and backfill plans them for the start), and
`<pool>-after` from that window's close on. Both exist before the block opens: the first
ends by itself at the start, and the second is already in Slurm's plan at that moment, so the
scheduler never sees the pool open without its close (deleting one reservation and creating
the next left a gap in which Slurm started a job that outlasted the block). Blocks that touch
or overlap are one window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from slurmscale.model import CapacityReservation

# States in which a block will never (again) take instances (AWS's list for reservations).
GONE_STATES = frozenset({"expired", "cancelled", "failed", "payment-failed", "unsupported",
                         "cancelling", "unavailable"})
# "Until further notice": a closed window with no block after it ends this far ahead.
FOREVER_S = 365 * 86400.0


def at(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@dataclass(frozen=True)
class Window:
    blocks: tuple[str, ...]
    start: float
    close: float  # end - margin: no job may run past this
    end: float
    nodes: int  # the blocks' instance count


@dataclass(frozen=True)
class Closed:
    """One reservation slurmscale keeps in Slurm over a block pool's nodes."""

    name: str
    start: float | None  # None: from now
    end: float  # the next window's start, or FOREVER_S on


@dataclass(frozen=True)
class BlockPlan:
    pool: str
    closed: tuple[Closed, ...]  # the reservations the pool should have now
    open: Window | None  # the window open now
    next: Window | None  # the next window to open
    reason: str

    @property
    def closed_from(self) -> float | None:
        """When the pool next closes (None: it is closed now)."""
        return self.closed[-1].start if self.open is not None else None

    @property
    def closed_until(self) -> float:
        return self.closed[0].end

    @property
    def is_open(self) -> bool:
        return self.open is not None


def windows(blocks: Sequence[CapacityReservation], margin_s: float) -> list[Window]:
    """The usable windows, merged where blocks touch, in time order."""
    spans = sorted((b.start, b.end, b.id, b.total) for b in blocks
                   if b.state not in GONE_STATES and b.start is not None and b.end is not None)
    out: list[Window] = []
    for start, end, bid, total in spans:
        if out and start <= out[-1].end:
            w = out[-1]
            out[-1] = Window(w.blocks + (bid,), w.start, max(w.close, end - margin_s),
                             max(w.end, end), max(w.nodes, total))
        else:
            out.append(Window((bid,), start, end - margin_s, end, total))
    return [w for w in out if w.close > w.start]


def plan_block(pool: str, prefix: str, blocks: Sequence[CapacityReservation], now: float,
               margin_s: float) -> BlockPlan:
    before, after = f"{prefix}{pool}-before", f"{prefix}{pool}-after"
    ws = [w for w in windows(blocks, margin_s) if w.close > now]
    current = ws[0] if ws and ws[0].start <= now else None
    upcoming = ws[1] if current is not None and len(ws) > 1 else (
        ws[0] if ws and current is None else None)

    def after_of(w: Window) -> Closed:
        later = [x for x in ws if x.start > w.start]
        return Closed(after, w.close, later[0].start if later else w.close + FOREVER_S)
    if current is not None:
        return BlockPlan(pool, (after_of(current),), current, upcoming,
                         f"block {','.join(current.blocks)} open until {at(current.close)} "
                         f"(it ends {at(current.end)}; the margin requeues and powers down)")
    if upcoming is not None:
        return BlockPlan(pool, (Closed(before, None, upcoming.start), after_of(upcoming)),
                         None, upcoming, f"waiting for block {','.join(upcoming.blocks)} to "
                         f"open at {at(upcoming.start)}")
    return BlockPlan(pool, (Closed(after, None, now + FOREVER_S),), None, None,
                     "no block open or to come: the pool is closed")


def starts_at_open(plan: BlockPlan, gangs: Sequence[tuple[str, int, float | None]]
                   ) -> list[tuple[str, str]]:
    """Which pending jobs (job id, nodes, time limit s) start when the next block opens, in
    priority order: those that fit whole in what is left of its nodes and whose time limit
    ends before its window closes. (job id, why) for each, the others say why not."""
    w = plan.next
    if w is None or plan.is_open:
        return []
    left = w.nodes
    out = []
    for job_id, nodes, limit in gangs:
        if limit is not None and w.start + limit > w.close:
            out.append((job_id, "not in this block: its time limit runs past the window's "
                                f"close at {at(w.close)}"))
        elif nodes > left:
            out.append((job_id, f"not in this block: {nodes} node(s), {left} left"))
        else:
            left -= nodes
            out.append((job_id, f"starts when block {','.join(w.blocks)} opens at "
                                f"{at(w.start)}"))
    return out
