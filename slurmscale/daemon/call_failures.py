"""EC2 calls that failed in a pass, counted where every call goes through, so a pass that could
not read or write EC2 says so (`last_tick.ok` false with the error, `status` first, a metric)
however each pass handled its own failure. A pass goes on past a failed call on purpose (a
sweep skipped, a launch deferred, a terminate retried next pass): that is the loop staying up,
not the account being healthy. An answer EC2 gives in the normal course of things (a
placement group still in use while its instances shut down, tried again next pass) is not a
failure of the account."""

from __future__ import annotations

import threading
from typing import Any, TypeVar, cast

from slurmscale.cloud.protocol import CloudError

T = TypeVar("T")

# codes EC2 answers with while things go as they should
EXPECTED = frozenset({"InvalidPlacementGroup.InUse"})


class CallFailures:
    """The failed calls of the pass in flight: (call, error text), in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # (a gang's tags go out from several threads)
        self._seen: list[tuple[str, str]] = []

    def add(self, call: str, e: CloudError) -> None:
        if e.code in EXPECTED:
            return
        with self._lock:
            self._seen.append((call, str(e)[:300]))

    def take(self) -> list[tuple[str, str]]:
        """What failed since the last take (the last pass), and a clean slate."""
        with self._lock:
            seen, self._seen = self._seen, []
        return seen


class _Watched:
    def __init__(self, target: object, failures: CallFailures, name: str) -> None:
        self._target = target
        self._failures = failures
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if not callable(value):
            return value
        failures, what = self._failures, f"{self._name}.{attr}"

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return value(*args, **kwargs)
            except CloudError as e:
                failures.add(what, e)
                raise
        return call


def watched(target: T, failures: CallFailures, name: str) -> T:
    """`target` (the EC2 adapter) with every CloudError its methods raise recorded in
    `failures` and raised on, unchanged."""
    return cast(T, _Watched(target, failures, name))
