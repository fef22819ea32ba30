"""SuspendExcNodes: the nodes Slurm never powers down on its own however long they idle.

Slurm 23.02 and later change it at run time (`scontrol update SuspendExcNodes=...`; 22.05
accepts the command and ignores it), and slurmscale uses that for the nodes it keeps idle on
purpose past SuspendTime: those in its holds (reservations gathering a starving gang's
nodes), the on-demand safety buffer, a pool's min_nodes, idle capacity already paid for. On
22.05 the config must instead keep SuspendTime above the longest hold (`slurmscale check`).

The value is shared with the admin's slurm.conf, so it is split by ownership, not by memory:
a pool node listed plainly (no `:count`) is slurmscale's to add or remove; every other part
(other nodes, any group with a count such as `nid[1-8]:2`) is the admin's and is written
back as it was. Nothing needs remembering across a daemon restart, and `scontrol
reconfigure` (which restores slurm.conf's list) is repaired at the next pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from slurmscale.hostlists import HostlistError, compress, expand

# `scontrol show config` prints an empty list as "(null)"
EMPTY = ("", "(null)")


class Exclusions(NamedTuple):
    theirs: tuple[str, ...]  # the admin's groups, in their order, as written
    ours: frozenset[str]  # pool nodes listed without a count


def groups(value: str) -> list[str]:
    """The comma-separated groups of a SuspendExcNodes value; a comma inside brackets belongs
    to its hostlist (`gpu-[1,3]:1,login1` is two groups)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(value):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            out.append(value[start:i])
            start = i + 1
    out.append(value[start:])
    return [g.strip() for g in out if g.strip()]


def parse(value: str, is_pool_node: Callable[[str], bool]) -> Exclusions:
    theirs: list[str] = []
    ours: set[str] = set()
    if value.strip() in EMPTY:
        return Exclusions((), frozenset())
    for g in groups(value):
        if ":" in g:
            theirs.append(g)  # a count: "keep N of these up", the admin's rule
            continue
        try:
            names = expand(g)
        except HostlistError:
            theirs.append(g)  # not ours to judge: written back untouched
            continue
        mine = [n for n in names if is_pool_node(n)]
        ours.update(mine)
        if len(mine) < len(names):
            theirs.append(compress([n for n in names if not is_pool_node(n)]))
    return Exclusions(tuple(theirs), frozenset(ours))


def render(theirs: Iterable[str], ours: Iterable[str]) -> str:
    """The value to write: the admin's groups, then slurmscale's nodes as one hostlist ("":
    an empty list, which `scontrol update SuspendExcNodes=` takes)."""
    mine = compress(set(ours))
    return ",".join([*theirs, *([mine] if mine else [])])
