"""EC2 calls that failed in a pass, counted where every call goes through, so a pass that could
not read or write EC2 says so (`last_tick.ok` false with the error, `status` first, a metric)
however each pass handled its own failure. A pass goes on past a failed call on purpose (a
sweep skipped, a launch deferred, a terminate retried next pass): that is the loop staying up,
not the account being healthy. An answer EC2 gives in the normal course of things (a
placement group still in use while its instances shut down, tried again next pass) is not a
failure of the account."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from slurmscale.cloud.protocol import CloudError
from slurmscale.daemon.wrapping import calls_through

T = TypeVar("T")

# codes EC2 answers with while things go as they should
EXPECTED = frozenset({"InvalidPlacementGroup.InUse"})


class CallFailures:
    """The failed calls of the pass in flight: (call, error text), in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # (a gang's tags go out from several threads)
        self._seen: list[tuple[str, str]] = []
        self._answered: set[str] = set()  # the adapters that answered a call since `take`

    def answered(self, name: str) -> None:
        if name not in self._answered:
            with self._lock:
                self._answered.add(name)

    def all_answered(self, name: str) -> bool:
        """`name` (EC2) answered at least one call since the last take, and failed none."""
        with self._lock:
            return name in self._answered and not any(
                call.startswith(f"{name}.") for call, _ in self._seen)

    def add(self, call: str, e: CloudError) -> None:
        if e.code in EXPECTED:
            return
        with self._lock:
            self._seen.append((call, str(e)[:300]))

    def take(self) -> list[tuple[str, str]]:
        """What failed since the last take (the last pass), and a clean slate."""
        with self._lock:
            seen, self._seen = self._seen, []
            self._answered = set()
        return seen


def watched(target: T, failures: CallFailures, name: str) -> T:
    """`target` (the EC2 adapter) with every CloudError its methods raise recorded in
    `failures` and raised on, unchanged."""
    def around(what: str, method: Callable[..., Any], args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> Any:
        try:
            answer = method(*args, **kwargs)
        except CloudError as e:
            failures.add(what, e)
            raise
        failures.answered(name)
        return answer
    return calls_through(target, name, around)
