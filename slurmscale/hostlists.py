"""Slurm hostlist expressions (`gpu-[1-4,7]`), with errors that name the bad expression."""

from __future__ import annotations

import functools
import re
from collections.abc import Collection

import hostlist as _hostlist


class HostlistError(ValueError):
    """A hostlist expression Slurm would not have produced."""


# Slurm's node names are ASCII (a full-width or superscript digit is not a digit to Slurm,
# though Python's str.isdigit says it is); bounded like a hostname.
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def expand(expr: str) -> list[str]:
    """Expand a hostlist into node names, in order, without duplicates."""
    text = expr.strip()
    if not text:
        raise HostlistError("empty hostlist")
    try:
        names = _hostlist.expand_hostlist(text)
    except _hostlist.BadHostlist as e:
        raise HostlistError(f"unparsable hostlist {expr!r}: {e}") from None
    if not names:
        raise HostlistError(f"hostlist {expr!r} names no nodes")
    for n in names:
        if not NODE_NAME.fullmatch(n):
            raise HostlistError(f"unparsable hostlist {expr!r}: bad node name {n!r} (node "
                                "names are ASCII letters, digits, '.', '_' and '-')")
    return names


def owns(prefix: str, size: int, node: str) -> bool:
    """Whether a pool of `size` nodes named `<prefix>1`..`<prefix><size>` has this node
    (`gpu-01` and `gpu-٣` are not `gpu-1` and `gpu-3`)."""
    if not node.startswith(prefix):
        return False
    idx = node[len(prefix):]
    return idx.isascii() and idx.isdigit() and not idx.startswith("0") and 1 <= int(idx) <= size


@functools.lru_cache(maxsize=65536)
def expand_cached(expr: str) -> tuple[str, ...]:
    """`expand` for hostlists read again every pass (running jobs' node lists)."""
    return tuple(expand(expr))


def compress(names: Collection[str]) -> str:
    """The shortest hostlist for these names (sorted, as Slurm prints them)."""
    if not names:
        return ""
    return _hostlist.collect_hostlist(sorted(set(names)))


@functools.lru_cache(maxsize=65536)
def node_order_key(name: str) -> tuple[str, int, str]:
    """gpu-2 before gpu-10: pools number their nodes, and a numeric order is what admins read
    (holds and reservations take nodes in this order). Remembered per name: a cluster has
    a fixed set of node names, and each pass sorts them."""
    m = re.search(r"([0-9]+)$", name)
    return (name[:m.start()], int(m.group(1)), name) if m else (name, -1, name)
