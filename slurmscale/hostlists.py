"""Slurm hostlist expressions (`gpu-[1-4,7]`), with errors that name the bad expression."""

from __future__ import annotations

import hostlist as _hostlist


class HostlistError(ValueError):
    """A hostlist expression Slurm would not have produced."""


def expand(expr: str) -> list[str]:
    """Expand a hostlist into node names, in order, without duplicates."""
    text = expr.strip()
    if not text:
        raise HostlistError("empty hostlist")
    try:
        names = _hostlist.expand_hostlist(text)
    except _hostlist.BadHostlist as e:
        raise HostlistError(f"unparsable hostlist {expr!r}: {e}") from None
    for n in names:
        if not n or any(c.isspace() for c in n) or any(c in n for c in "[],"):
            raise HostlistError(f"unparsable hostlist {expr!r}: bad node name {n!r}")
    return names


def compress(names: list[str] | tuple[str, ...] | set[str]) -> str:
    """The shortest hostlist for these names (sorted, as Slurm prints them)."""
    if not names:
        return ""
    return _hostlist.collect_hostlist(sorted(set(names)))
