"""Where a pass's time goes: the seconds of each of its passes (requests, sweep, capacity,
...) and, inside them, the seconds spent waiting on Slurm, EC2 and the store. An admin whose
passes grow slow asks which pass and which outside (the metrics'
`slurmscale_pass_phase_seconds_total` and `slurmscale_pass_wait_seconds_total`, `status`'s
last pass); what is in a phase but in no wait is slurmscale's own work.

Waits are summed over threads (a gang's tags go out from several at once), so they can add up
to more than the pass's wall time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from slurmscale.daemon.wrapping import calls_through

T = TypeVar("T")


class PassTimes:
    """Seconds by phase and by what was waited on, since the last `take`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._phases: dict[str, float] = {}
        self._waits: dict[str, float] = {}

    def phase(self, name: str) -> _Phase:
        """A `with` block whose seconds are added to phase `name` (a plain object, not a
        generator: ten a pass, and the simulator makes tens of thousands of passes)."""
        return _Phase(self, name)

    def timed(self, target: T, name: str) -> T:
        """`target` with the time each of its method calls takes added to the wait `name`."""
        def around(what: str, method: Callable[..., Any], args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> Any:
            t0 = self._clock()
            try:
                return method(*args, **kwargs)
            finally:
                self._add(self._waits, name, self._clock() - t0)
        return calls_through(target, name, around)

    def _add(self, into: dict[str, float], key: str, seconds: float) -> None:
        with self._lock:
            into[key] = into.get(key, 0.0) + seconds

    def take(self) -> tuple[dict[str, float], dict[str, float]]:
        """(seconds by phase, seconds by wait) since the last take, and a clean slate."""
        with self._lock:
            out = self._phases, self._waits
            self._phases, self._waits = {}, {}
        return out


class _Phase:
    __slots__ = ("times", "name", "t0")

    def __init__(self, times: PassTimes, name: str) -> None:
        self.times, self.name = times, name

    def __enter__(self) -> None:
        self.t0 = self.times._clock()

    def __exit__(self, *exc: object) -> None:
        times = self.times
        times._add(times._phases, self.name, times._clock() - self.t0)
