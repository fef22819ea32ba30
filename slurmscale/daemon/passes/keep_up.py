"""Keeps Slurm's own power saving off the nodes slurmscale keeps idle on purpose.

Slurm powers down any node idle for SuspendTime, a backstop for when the daemon is down. Some
idle nodes the daemon means to keep longer: a hold's nodes, gathered one by one while a starving
gang waits for the rest (minutes); the on-demand safety buffer, a pool's min_nodes and idle
capacity already paid for (indefinitely). On Slurm 23.02+ this pass lists exactly those in
SuspendExcNodes after each capacity pass (slurm/suspend_exc.py says which part of the list is
slurmscale's); on 22.05, which cannot change the list at run time, it does nothing and
`slurmscale check` requires SuspendTime to outlast the longest hold instead.
"""

from __future__ import annotations

import logging
import time

from slurmscale.audit import Kind
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.executor import edits
from slurmscale.daemon.passes.capacity import PassPlan
from slurmscale.hostlists import compress
from slurmscale.policy.model import ActionKind
from slurmscale.slurm.protocol import SlurmError
from slurmscale.slurm.suspend_exc import parse, render
from slurmscale.store.protocol import LaunchStore

log = logging.getLogger(__name__)


# A Slurm that cannot change the list is asked again this seldom (an upgraded slurmctld under
# a running daemon), not every pass: the answer costs a `scontrol show config`.
RECHECK_UNSUPPORTED_S = 600.0


def kept_up(p: PassPlan) -> frozenset[str]:
    """The nodes this pass's plan keeps idle past max_idle_s: its holds' and the lasting
    KEEPs (a node kept for a forecast reuse is released by max_idle_s, before SuspendTime)."""
    held = {n for h in p.holds.holds for n in h.nodes}
    kept = {n for a in p.capacity.actions if a.kind is ActionKind.KEEP and a.lasting
            for n in a.nodes}
    return frozenset(held | kept)


class KeepUpPass:
    def __init__(self, ctx: PassContext[LaunchStore]) -> None:
        self.slurm = ctx.slurm
        self.event = ctx.event
        self.edits = ctx.edits
        self.pools = ctx.cfg.pools
        self._unsupported_until = 0.0  # monotonic: no run-time SuspendExcNodes until then

    def _is_pool_node(self, name: str) -> bool:
        return any(p.owns(name) for p in self.pools)

    def run(self, p: PassPlan) -> None:
        if time.monotonic() < self._unsupported_until:
            return
        try:
            value = self.slurm.suspend_exc_nodes()
        except SlurmError as e:
            log.warning("SuspendExcNodes unreadable (%s): left as it is this pass", e)
            return
        if value is None:
            if not self._unsupported_until:
                log.info("this Slurm cannot change SuspendExcNodes at run time (before "
                         "23.02): SuspendTime alone protects held and kept nodes")
            self._unsupported_until = time.monotonic() + RECHECK_UNSUPPORTED_S
            return
        now, want = parse(value, self._is_pool_node), kept_up(p)
        if now.ours == want:
            return
        new = render(now.theirs, want)
        added, removed = want - now.ours, now.ours - want
        parts = ([f"+{compress(added)}"] if added else []) + (
            [f"-{compress(removed)}"] if removed else [])
        self.edits.apply(edits.suspend_exc(new, said=(
            Kind.SUSPEND_EXCLUSIONS_SET,
            f"SuspendExcNodes {' '.join(parts)}: held for a gang or kept idle on purpose "
            f"(buffer, min_nodes, paid capacity); now {new or '(empty)'}")))
