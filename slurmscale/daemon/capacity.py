"""The capacity policy inside the daemon: read Slurm, run the pure `decide`, carry out the plan.

The plan is recomputed from live state every pass, so a step that failed (Slurm briefly
unreachable, say) is simply planned again next time; only the policy's memory (targets and the
sustained/cooldown clocks) is kept in the store between passes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from slurmscale.config import Config
from slurmscale.hostlists import compress
from slurmscale.policy.decide import decide
from slurmscale.policy.model import Action, ActionKind, Plan, PoolMemory
from slurmscale.policy.observe import HOLD_REASON, build_snapshot
from slurmscale.slurm.protocol import SlurmClient, SlurmError
from slurmscale.store.repo import Store

log = logging.getLogger(__name__)

Event = Callable[..., None]

# Audit-log kinds per action; KEEP is not logged (it would repeat every pass) but `plan` shows it.
EVENT_KIND = {
    ActionKind.RAISE_TARGET: "target_raised",
    ActionKind.LOWER_TARGET: "target_lowered",
    ActionKind.HOLD: "nodes_held",
    ActionKind.UNHOLD: "nodes_unheld",
    ActionKind.RELEASE: "scale_down",
}


def current_plan(cfg: Config, slurm: SlurmClient, memory: dict[str, PoolMemory],
                 now: float) -> Plan:
    """What the policy decides from Slurm as it is now (raises SlurmError if unreadable)."""
    return decide(build_snapshot(cfg, slurm.nodes(), slurm.active_jobs(), now, memory))


class CapacityPass:
    def __init__(self, cfg: Config, store: Store, slurm: SlurmClient, event: Event) -> None:
        self.cfg = cfg
        self.store = store
        self.slurm = slurm
        self.event = event
        self._read_failing = False

    def run(self, now: datetime) -> Plan | None:
        try:
            plan = current_plan(self.cfg, self.slurm, self.store.pool_memory(),
                                now.timestamp())
        except SlurmError as e:
            # Logged every pass, recorded once per outage: the audit log is for decisions.
            log.warning("capacity pass skipped: %s", e)
            if not self._read_failing:
                self.event("slurm_read_failed", f"capacity pass skipped until Slurm answers: {e}")
            self._read_failing = True
            return None
        if self._read_failing:
            self.event("slurm_read_ok", "Slurm readable again; capacity passes resumed")
            self._read_failing = False
        for a in plan.actions:
            self._apply(a)
        self.store.save_pool_memory(plan.memory, now)
        return plan

    def _apply(self, a: Action) -> None:
        nodes = list(a.nodes)
        expr = compress(nodes) if nodes else None
        try:
            match a.kind:
                case ActionKind.HOLD:
                    self.slurm.drain(nodes, HOLD_REASON)
                case ActionKind.UNHOLD:
                    self.slurm.undrain(nodes)
                case ActionKind.RELEASE:
                    self.slurm.power_down(nodes)
                case ActionKind.KEEP:
                    log.debug("%s: keep %s: %s", a.pool, expr, a.reason)
                    return
                case _:
                    pass
        except SlurmError as e:
            self.event("slurm_update_failed", f"{a.kind.value} {expr} in {a.pool}: {e}",
                       node=expr)
            return
        self.event(EVENT_KIND[a.kind], f"{a.pool}: {a.reason}" + (f" [{expr}]" if expr else ""),
                   node=expr)
