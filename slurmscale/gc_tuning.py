"""Python's garbage collector, tuned for a process that parses a big queue each pass.

A pass at 50,000 jobs allocates a million small objects (parsed lines, tuples, snapshots)
that are tracked by the cyclic collector; with the default thresholds (700 allocations per
young collection) the collector runs thousands of times per pass and re-walks everything
that survived, the start-up's modules included: 25-35 % of a pass's Python time, measured.
Almost nothing slurmscale makes is a cycle; reference counting frees it. So: everything alive
after start-up (modules, config, classes) is frozen out of the collector's walks, and a young
collection waits for 100,000 allocations. The older generations' thresholds then come round
almost never (a full collection every 500 million allocations), and the few cycles a pass
does make (SQLAlchemy's IN-clause copies, say) reach them and stay: an outside soak saw the
daemon grow 6.4 MiB per 10 minutes with no collection in 6 minutes of passes. So the daemon
also collects fully between passes, at most every `FULL_EVERY_S` (tens of milliseconds with
start-up frozen out).
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)

YOUNG = 100_000  # allocations between young collections (default 700)
FULL_EVERY_S = 300.0  # the daemon's full collection between passes, at most this often


def tune_gc() -> None:
    """Call once start-up is done (CLI before a command runs, daemon before its first pass)."""
    gc.freeze()
    gc.set_threshold(YOUNG, 50, 100)


class BetweenPasses:
    """A full collection after a pass once `every_s` has passed since the last (monotonic)."""

    def __init__(self, every_s: float = FULL_EVERY_S) -> None:
        self.every_s = every_s
        self.last = time.monotonic()
        self.collections = 0

    def after_pass(self) -> int | None:
        """Unreachable objects freed, or None when not due."""
        now = time.monotonic()
        if now - self.last < self.every_s:
            return None
        freed = gc.collect()
        self.last = time.monotonic()
        self.collections += 1
        log.debug("full collection: %d unreachable objects freed in %.3fs", freed,
                  self.last - now)
        return freed
