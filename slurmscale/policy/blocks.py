"""Capacity Blocks for ML as time windows. Pure: the blocks as EC2 reports them, the
reservations slurmscale holds in Slurm and the clock in, what Slurm should be told out.

A block is usable from its start until its end less a margin: EC2 begins terminating a block's
instances 30 minutes before its end (EC2 user guide, "Monitor Capacity Blocks using
EventBridge"), and before that slurmscale must requeue what still runs and power the nodes
down. Outside those windows a block pool's nodes sit in slurmscale reservations, so Slurm
starts no job there: one per gap between windows (before the first, between each two, after
the last), each in Slurm's plan before the window ahead of it opens, so the scheduler never
sees a window without its close and never starts a job whose limit runs past it.

Slurm's rules shape the edits (seen on 22.05 through 26.05): reservations on the same nodes
may not overlap, and a reservation that has started keeps its start. So a gap's reservation is
never recreated or moved once active: the pass matches the gaps it wants to the reservations
Slurm has (the active one to the gap the pool is in; the future ones by overlap) and changes
them in place, deleting first, shrinking before growing, creating last. Each block is its own
window, a block that follows another with no gap too (its instances are new ones); only blocks
whose usable times overlap share one.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from slurmscale.model import CapacityReservation

# States in which a block will never (again) take instances (AWS's list for reservations).
GONE_STATES = frozenset({"expired", "cancelled", "failed", "payment-failed", "unsupported",
                         "cancelling", "unavailable"})
# "Until further notice": a closed window with no block after it ends this far ahead.
FOREVER_S = 365 * 86400.0
# Slurm keeps whole seconds: times this close are the same time.
SAME_S = 90.0


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
    """One reservation over a block pool's nodes, wanted or held in Slurm."""

    name: str
    start: float | None  # None: from now
    end: float  # the next window's start, or FOREVER_S on


class BlockEditKind(StrEnum):
    CREATE = "create"
    UPDATE = "update"  # in place: the end, and the start unless it has begun
    DELETE = "delete"


@dataclass(frozen=True)
class BlockEdit:
    kind: BlockEditKind
    name: str
    start: float | None = None  # CREATE: None = now; UPDATE: None = leave it
    end: float = 0.0


@dataclass(frozen=True)
class BlockPlan:
    pool: str
    closed: tuple[Closed, ...]  # the reservations the pool should have, in time order
    open: Window | None  # the window open now
    next: Window | None  # the next window to open
    reason: str
    edits: tuple[BlockEdit, ...] = ()  # what makes Slurm's reservations `closed`

    @property
    def closed_from(self) -> float | None:
        """When the pool next closes (None: it is closed now)."""
        return self.closed[0].start if self.open is not None else None

    @property
    def closed_until(self) -> float:
        return self.closed[0].end

    @property
    def is_open(self) -> bool:
        return self.open is not None


def windows(blocks: Sequence[CapacityReservation], margin_s: float) -> list[Window]:
    """The usable windows, in time order: one per block. An instance belongs to the one
    block it was launched into and EC2 terminates it at that block's end (EC2 user guide,
    "Capacity Blocks for ML"): a block that follows another, even with no gap, is other
    capacity, so a job may not run across the boundary, and the pool is closed from the
    first block's close to the next one's start. Only blocks whose usable times overlap
    (bought for the same hours) share a window."""
    spans = sorted((b.start, b.end, b.id, b.total) for b in blocks
                   if b.state not in GONE_STATES and b.start is not None and b.end is not None)
    out: list[Window] = []
    for start, end, bid, total in spans:
        if end - margin_s <= start:
            continue  # no usable time
        if out and start < out[-1].close:
            w = out[-1]
            out[-1] = Window(w.blocks + (bid,), w.start, max(w.close, end - margin_s),
                             max(w.end, end), max(w.nodes, total))
        else:
            out.append(Window((bid,), start, end - margin_s, end, total))
    return out


def _same(a: float, b: float, now: float) -> bool:
    """Equal as Slurm keeps them (whole seconds), "until further notice" equal to itself."""
    forever = now + FOREVER_S / 2
    return abs(a - b) < SAME_S or (a > forever and b > forever)


def gaps(ws: Sequence[Window], now: float) -> list[tuple[float | None, float]]:
    """The pool's closed spans from now on, in time order: (start, None = now; end)."""
    out: list[tuple[float | None, float]] = []
    if not ws or ws[0].start > now:
        out.append((None, ws[0].start if ws else now + FOREVER_S))
    for i, w in enumerate(ws):
        end = ws[i + 1].start if i + 1 < len(ws) else w.close + FOREVER_S
        if end > w.close:  # (a block that starts at the close before it: no gap to hold)
            out.append((w.close, end))
    return out


def _names(prefix: str, pool: str, taken: set[str]) -> Iterator[str]:
    """Free names for new reservations: <prefix><pool>-after, -after-2, ..."""
    for i in itertools.count(1):
        name = f"{prefix}{pool}-after" + ("" if i == 1 else f"-{i}")
        if name not in taken:
            yield name


def plan_block(pool: str, prefix: str, blocks: Sequence[CapacityReservation], now: float,
               margin_s: float, held: Sequence[Closed] = ()) -> BlockPlan:
    """`held`: the pool's reservations in Slurm now (start None: unreadable, treated as
    begun). The plan's `edits` turn them into its `closed`."""
    ws = [w for w in windows(blocks, margin_s) if w.close > now]
    current = ws[0] if ws and ws[0].start <= now else None
    upcoming = ws[1] if current is not None and len(ws) > 1 else (
        ws[0] if ws and current is None else None)
    # (one that has ended is Slurm's to purge: neither matched nor edited)
    edits, wanted = _match(pool, prefix, gaps(ws, now), [h for h in held if h.end > now], now)
    if current is not None:
        reason = (f"block {','.join(current.blocks)} open until {at(current.close)} (it ends "
                  f"{at(current.end)}; EC2's terminations begin 30 minutes before, the margin "
                  "requeues and powers down first)")
    elif upcoming is not None:
        reason = (f"waiting for block {','.join(upcoming.blocks)} to open at "
                  f"{at(upcoming.start)}")
    else:
        reason = "no block open or to come: the pool is closed"
    return BlockPlan(pool, tuple(wanted), current, upcoming, reason, tuple(edits))


def _match(pool: str, prefix: str, want: list[tuple[float | None, float]],
           held: Sequence[Closed], now: float) -> tuple[list[BlockEdit], list[Closed]]:
    """The edits that turn `held` into `want` under Slurm's rules, and `want` named."""
    begun = sorted((h for h in held if h.start is None or h.start <= now),
                   key=lambda h: -h.end)
    future = [h for h in held if h not in begun]
    creates: list[tuple[float | None, float]] = []
    updates: list[tuple[Closed, Closed]] = []  # (held, wanted)
    named: list[Closed] = []
    rest = list(want)
    if rest and rest[0][0] is None:  # closed now: the begun reservation (if any) is this gap
        _, end = rest.pop(0)
        if begun:
            h = begun.pop(0)
            named.append(Closed(h.name, None, end))
            if not _same(h.end, end, now):
                updates.append((h, Closed(h.name, None, end)))  # (its start stays)
        else:
            creates.append((None, end))
    # a begun reservation beyond the one matched: its gap is over (a window opened)
    deletes = [h.name for h in begun]
    for maybe_start, end in rest:
        assert maybe_start is not None  # (only the first window may begin before now)
        start: float = maybe_start
        best = max(future, default=None, key=lambda h: (_overlap(h, start, end),
                                                        -abs((h.start or 0) - start)))
        if best is not None and (_overlap(best, start, end) > 0
                                 or abs((best.start or 0) - start) < SAME_S):
            future.remove(best)
            named.append(Closed(best.name, start, end))
            moved = not _same(best.start or 0, start, now)
            if moved or not _same(best.end, end, now):
                updates.append((best, Closed(best.name, start if moved else None, end)))
        else:
            creates.append((start, end))
    deletes += [h.name for h in future]
    # shrinking first: a reservation moved into the time another still holds is refused
    updates.sort(key=lambda u: not _within(u[1], u[0]))
    edits = [BlockEdit(BlockEditKind.DELETE, n) for n in deletes]
    edits += [BlockEdit(BlockEditKind.UPDATE, w.name, w.start, w.end) for _, w in updates]
    taken = {h.name for h in held}
    names = _names(prefix, pool, taken)
    before = f"{prefix}{pool}-before"
    for begins, end in creates:
        name = before if begins is None and before not in taken else next(names)
        named.append(Closed(name, begins, end))
        edits.append(BlockEdit(BlockEditKind.CREATE, name, begins, end))
    named.sort(key=lambda c: -1.0 if c.start is None else c.start)
    return edits, named


def _overlap(h: Closed, start: float, end: float) -> float:
    return min(h.end, end) - max(h.start or 0.0, start)


def _within(new: Closed, old: Closed) -> bool:
    """Does the update keep `old` inside its span (a shrink, never a move into other time)?
    (`new.start` None: unchanged.)"""
    start = old.start if new.start is None else new.start
    return (start or 0.0) >= (old.start or 0.0) and new.end <= old.end


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
