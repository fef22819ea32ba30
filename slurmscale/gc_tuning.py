"""Python's garbage collector, tuned for a process that parses a big queue each pass.

A pass at 50,000 jobs allocates a million small objects (parsed lines, tuples, snapshots)
that are tracked by the cyclic collector; with the default thresholds (700 allocations per
young collection) the collector runs thousands of times per pass and re-walks everything
that survived, the start-up's modules included: 25-35 % of a pass's Python time, measured.
Almost nothing slurmscale makes is a cycle; reference counting frees it. So: everything alive
after start-up (modules, config, classes) is frozen out of the collector's walks, and a young
collection waits for 100,000 allocations; cycles are still collected, less often.
"""

from __future__ import annotations

import gc

YOUNG = 100_000  # allocations between young collections (default 700)


def tune_gc() -> None:
    """Call once start-up is done (CLI before a command runs, daemon before its first pass)."""
    gc.freeze()
    gc.set_threshold(YOUNG, 50, 100)
