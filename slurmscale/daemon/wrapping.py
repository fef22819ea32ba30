"""An adapter seen through a wrapper: every method call made through one function, which may
check something first (the lease: fence.py) or note how the call went (failures:
call_failures.py). Attributes that are not methods are read through as they are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

T = TypeVar("T")

# (what: "EC2.launch", the bound method, its args, its kwargs) -> its result
Around = Callable[[str, Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]


class _Through:
    def __init__(self, target: object, name: str, around: Around) -> None:
        self._target = target
        self._name = name
        self._around = around

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if not callable(value):
            return value
        what, around = f"{self._name}.{attr}", self._around

        def call(*args: Any, **kwargs: Any) -> Any:
            return around(what, value, args, kwargs)
        return call


def calls_through(target: T, name: str, around: Around) -> T:
    """`target` with each method call made as `around(f"{name}.{method}", method, args,
    kwargs)`."""
    return cast(T, _Through(target, name, around))
