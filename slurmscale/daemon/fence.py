"""Effects under the lease: a pass calls EC2, Slurm and the event queue only while its daemon
still leads.

The lease is checked at the start of every pass (`service.py`), but a pass can last seconds
(a gang's launch, a hundred `scontrol` updates) and the lease can go in the middle: the
leader's PostgreSQL connection drops, the server releases its advisory lock, and a standby
takes over on its next pass. Without a fence the old leader would go on launching,
terminating and draining until its pass ended, beside the new one. So every call a pass makes
to the outside goes through `fenced`, which asks the lease first (`Lease.held`: one
`SELECT 1` on the lease's own connection for PostgreSQL, nothing for a file lock) and raises
`LeaseLost` instead of calling once it is gone. The pass ends there; the daemon stands by.

What the pass had recorded stays recorded, in the order every side effect follows (intent,
call, outcome), so the new leader finishes or undoes it as it would after a crash: a gang
recorded as launching is finished or rolled back, an instance nobody tracks is a leak.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from slurmscale.daemon.wrapping import calls_through
from slurmscale.store.protocol import LeaseLost

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["Fence", "LeaseLost", "fenced"]


class Fence:
    """`held`: asks the lease, without taking it, whether this daemon still holds it. Once
    it has said no, the fence stays shut: the daemon drops the reconciler it guards and
    builds a new one, with a new fence, once it leads again."""

    def __init__(self, held: Callable[[], bool]) -> None:
        self._held = held
        self._lock = threading.Lock()  # (a gang's tags go out from several threads)
        self.lost_before: str | None = None  # the call the fence refused first

    def check(self, what: str) -> None:
        with self._lock:
            if self.lost_before is None and self._held():
                return
            if self.lost_before is None:
                self.lost_before = what
                log.error("lost the leader lease mid-pass: not calling %s, nor anything after",
                          what)
        raise LeaseLost(f"the leader lease is gone: {what} not called")


def fenced(target: T, fence: Fence, name: str) -> T:
    """`target` (an adapter: EC2, Slurm, the event queue) with every method call checked
    against `fence` first. Attributes that are not methods are read through."""
    def around(what: str, method: Callable[..., Any], args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> Any:
        fence.check(what)
        return method(*args, **kwargs)
    return calls_through(target, name, around)
