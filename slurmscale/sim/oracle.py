"""The clairvoyant bound (`--policy oracle`): how little idle capacity any release rule could
have cost, at the waits no release rule can beat.

The oracle runs the same Slurm model with nodes launched when Slurm asks for them (as
`immediate`) and never released while the trace runs, so no job ever waits for a node that a
release took away (under a cap Slurm's choices are chaotic, so another rule's waits can still
come out lower by chance: ITP at 70 nodes, immediate's p50 below the oracle's). Its cost is
then worked out offline, knowing the future, from each node's timeline of runs: the
node must be up during its runs (merged where jobs share it) and for one boot before the
first; each gap between two runs costs min(gap, boot) - kept idle through it, or released and
relaunched one boot before the next run, whichever is cheaper (ski rental, knowing the gap);
the gap after its last run costs nothing (released at once). No rule that keeps these starts
on these nodes can have the node up for less, so the oracle's idle GPU-hours are a lower
bound on idle at those waits.

What it does not bound: a schedule that starts jobs later or on other nodes (Slurm's choices
would differ), idle GPUs inside a busy node (packing, which no release rule changes and which
is counted here as it happened), capacity priced other than on demand (spot, paid capacity:
the offline figures are not worked out with those models).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def node_up_s(runs: Iterable[tuple[float, float]], boot_s: float) -> float:
    """One node's least up time that keeps its runs ([start, end), in any order, possibly
    overlapping): one boot, the busy periods, and min(gap, boot) for each gap between them."""
    merged: list[list[float]] = []
    for start, end in sorted(runs):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    if not merged:
        return 0.0
    up = boot_s + sum(end - start for start, end in merged)
    return up + sum(min(b[0] - a[1], boot_s) for a, b in zip(merged, merged[1:], strict=False))


def offline_up_s(node_runs: Mapping[str, Iterable[tuple[float, float]]],
                 boot_s: float) -> float:
    """The node-seconds every node must be up, summed (`node_up_s` each)."""
    return sum(node_up_s(runs, boot_s) for runs in node_runs.values())
