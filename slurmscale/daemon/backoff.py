"""Capacity backoff: after an insufficient-capacity error a pool is unavailable for a TTL
(3 min by default, doubling with each error in a row, capped at 30 min, kept in the store).
Meanwhile its powered-down nodes are held out of scheduling (drained with slurmscale's reason)
so Slurm places jobs submitted to both partitions (-p spot,on-demand) on the pool's on-demand
fallback instead of retrying a launch that will fail; when the TTL ends they are undrained and
the next launch tries the pool again."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from slurmscale.audit import Event, Kind
from slurmscale.cloud.errors import ErrorClass, classify, unavailable_ttl
from slurmscale.config import Config
from slurmscale.daemon.drains import undrain
from slurmscale.model import SlurmNode
from slurmscale.slurm import reasons
from slurmscale.slurm.protocol import SlurmClient, SlurmError
from slurmscale.slurm.reasons import Why
from slurmscale.store.protocol import PassStore
from slurmscale.store.rows import OfferingRow

log = logging.getLogger(__name__)




class CapacityBackoff:
    def __init__(self, cfg: Config, store: PassStore, slurm: SlurmClient, event: Event) -> None:
        self.cfg = cfg
        self.store = store
        self.slurm = slurm
        self.event = event

    def launch_failed(self, pool: str, code: str, message: str, now: datetime) -> None:
        cls = classify(code)
        if cls is ErrorClass.CAPACITY:
            self._unavailable(pool, code, now)
        elif cls is ErrorClass.CONFIG:
            self.event(Kind.LAUNCH_CONFIG_ERROR, f"{pool}: {code}: {message} — launches in this "
                       "pool will keep failing until the config or IAM is fixed")
        elif cls is ErrorClass.QUOTA:
            self.event(Kind.LAUNCH_QUOTA_ERROR, f"{pool}: {code}: {message} — an account limit; "
                       "raise the quota or lower max_nodes")

    def reclaimed(self, pool: str, now: datetime) -> None:
        """AWS is taking a spot pool's capacity back (an interruption): launching the same
        offering at once would likely fail or be interrupted again, so the pool is unavailable
        for the TTL, as after an insufficient-capacity error. Several warnings at once count
        as one."""
        row = self.store.offering(pool)
        if row is not None and row.until_s > now.timestamp():
            return
        self._unavailable(pool, "SpotInterruption", now)

    def _unavailable(self, pool: str, code: str, now: datetime) -> None:
        row = self.store.offering(pool)
        repeats = (row.repeats if row else 0) + 1
        ttl = unavailable_ttl(repeats, self.cfg.capacity.unavailable_ttl_s,
                              self.cfg.capacity.max_unavailable_ttl_s)
        until = now.timestamp() + ttl
        self.store.put_offering(OfferingRow(pool=pool, until_s=until, repeats=repeats,
                                            last_code=code, updated_at=now))
        fb = self.cfg.pool(pool).fallback_pool
        self.event(Kind.CAPACITY_UNAVAILABLE,
                   f"{pool}: {code} ({repeats} in a row): unavailable for {ttl:.0f}s, until "
                   f"{datetime.fromtimestamp(until, UTC).isoformat(timespec='seconds')}"
                   + (f"; jobs that may run on {fb} go there meanwhile" if fb else ""))
        # Held at once, not at the pass's node upkeep: the jobs an interruption requeues next
        # would otherwise be placed on the pool's powered-down nodes in between, and draining
        # a node already powering up for a job requeues that job a second time.
        try:
            self.upkeep(self.slurm.nodes(self.cfg.pool(pool).node_names()), now)
        except SlurmError as e:
            log.warning("%s: powered-down nodes not held yet (%s): the pass's upkeep will", pool,
                        e)

    def launched(self, pool: str, now: datetime) -> None:
        row = self.store.offering(pool)
        if row is not None and row.repeats:
            row.repeats, row.until_s, row.updated_at = 0, 0.0, now
            self.store.put_offering(row)

    def upkeep(self, nodes: list[SlurmNode], now: datetime) -> None:
        """Hold unavailable pools' powered-down nodes; return them when the TTL is over."""
        t = now.timestamp()
        until = {r.pool: r.until_s for r in self.store.offerings()}
        hold: dict[str, list[str]] = {}
        back: list[str] = []
        out = {pool for pool, end in until.items() if end > t}
        for n in nodes:
            drained = "DRAIN" in n.flags
            if not drained and not out:
                continue  # (the common case, every node every pass: nothing to do)
            why = reasons.ours(n.reason) if drained else None
            ours = why is Why.NO_CAPACITY
            if not out and not ours:
                continue  # drained for another reason, and no pool is out
            pool = self.cfg.pool_of(n.name)
            if pool is None:
                continue
            if pool.name in out:
                down = n.flags & {"POWERED_DOWN", "POWERING_DOWN"}
                # a node drained by us for another reason may be marked unavailable too (the
                # reason is replaced); an admin's drain never
                # (nor one left drained for an admin after too many replacements)
                if down and not ours and (not drained or why not in (None, Why.REPLACE_LOOP)):
                    hold.setdefault(pool.name, []).append(n.name)
            elif ours and drained:
                back.append(n.name)
        for pool_name, names in hold.items():
            stamp = datetime.fromtimestamp(until[pool_name], UTC).isoformat(timespec="seconds")
            try:
                self.slurm.drain(names, reasons.reason(Why.NO_CAPACITY, stamp))
            except SlurmError as e:
                self.event(Kind.SLURM_UPDATE_FAILED, f"hold {','.join(names)}: {e}")
                continue
            self.event(Kind.NODES_HELD_NO_CAPACITY, f"{pool_name}: {','.join(names)} held out of "
                       f"scheduling until {stamp}")
        undrain(self.slurm, self.event, back, Kind.CAPACITY_RETRY,
                "capacity TTL over; the next launch tries the pool again")
