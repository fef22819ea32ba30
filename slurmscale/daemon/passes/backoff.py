"""Capacity backoff, per offering: after an insufficient-capacity error naming an instance
type in a subnet (CreateFleet's Errors name each override EC2 could not fill) or a spot
interruption of one, that offering (type, AZ, spot or on-demand, as Karpenter keys its
unavailable offerings) is unavailable for a TTL (3 min by default, doubling with each error
in a row, capped at 30 min, kept in the store), and the pool's next fleets leave it out of
their overrides. Only when every offering of a pool is out (or EC2 named none) is the pool
out: its powered-down nodes are then held out of scheduling (drained with slurmscale's
reason) so Slurm places jobs submitted to both partitions (-p spot,on-demand) on the pool's
on-demand fallback instead of retrying a launch that will fail; when the TTL ends they are
undrained and the next launch tries the pool again. The pool's own row ("" offering) is
written here, so what reads a pool's state needs no AZ of EC2's."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

from slurmscale.audit import Kind
from slurmscale.cloud.errors import ErrorClass, classify, unavailable_ttl
from slurmscale.config import Pool
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.executor import edits
from slurmscale.daemon.passes.drains import undrain
from slurmscale.model import FleetError, Offering, SlurmNode
from slurmscale.slurm import reasons
from slurmscale.slurm.protocol import SlurmError
from slurmscale.slurm.reasons import Why
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.rows import OfferingRow

log = logging.getLogger(__name__)

WHOLE_POOL = ""  # the offering key of a pool's own row


def _stamp(until: float) -> str:
    return datetime.fromtimestamp(until, UTC).isoformat(timespec="seconds")


class CapacityBackoff:
    def __init__(self, ctx: PassContext[LaunchStore],
                 zones: Callable[[Pool], Mapping[str, str]] = lambda _p: {}) -> None:
        self.cfg = ctx.cfg
        self.store = ctx.store
        self.slurm = ctx.slurm
        self.event = ctx.event
        self.edits = ctx.edits
        self.zones = zones  # a pool's subnets -> their AZs ({}: not known)

    def offering(self, pool: Pool, instance_type: str, subnet: str, capacity: str) -> Offering:
        return Offering(instance_type, self.zones(pool).get(subnet, subnet), capacity)

    def offerings(self, pool: Pool, capacity: str) -> dict[tuple[str, str], Offering]:
        """Every (type, subnet) override of the pool's normal fleets, and its offering."""
        return {(t, s): self.offering(pool, t, s, capacity)
                for t in pool.instance_types for s in pool.subnets}

    def excluded(self, pool: Pool, capacity: str, now: datetime) -> frozenset[tuple[str, str]]:
        """The overrides whose offering is out now: the next fleet leaves them out."""
        out = {r.offering for r in self.store.offerings()
               if r.pool == pool.name and r.offering and r.until_s > now.timestamp()}
        if not out:
            return frozenset()
        return frozenset(o for o, off in self.offerings(pool, capacity).items()
                         if off.key in out)

    def launch_failed(self, pool: str, code: str, message: str, now: datetime,
                      errors: Iterable[FleetError] = (), capacity: str = "") -> None:
        """A launch got less than its minimum. `errors`: those EC2 named an override for;
        `capacity`: the fleet's (spot | on-demand; "" for a reserved fleet, whose
        capacity is the reservations', not an offering's)."""
        cls = classify(code)
        if cls is ErrorClass.CAPACITY:
            refused = self._refused(pool, errors, capacity)
            if refused:
                self._out(pool, refused, code, now)
            else:
                self._unavailable(pool, WHOLE_POOL, code, now)
        elif cls is ErrorClass.CONFIG:
            self.event(Kind.LAUNCH_CONFIG_ERROR, f"{pool}: {code}: {message} — launches in this "
                       "pool will keep failing until the config or IAM is fixed")
        elif cls is ErrorClass.QUOTA:
            self.event(Kind.LAUNCH_QUOTA_ERROR, f"{pool}: {code}: {message} — an account limit; "
                       "raise the quota or lower max_nodes")

    def launched(self, pool: str, now: datetime, errors: Iterable[FleetError] = (),
                 capacity: str = "", where: tuple[str, str] | None = None) -> None:
        """A launch worked (on `where`: its instance type and subnet): that offering and the
        pool are available again; the overrides EC2 could not fill beside it (`errors`) are
        out."""
        refused = self._refused(pool, errors, capacity)
        if refused:
            self._out(pool, refused, refused[0][1], now)
        rows = [r for r in self.store.offerings() if r.pool == pool and r.repeats]
        if not rows:
            return  # (the common case: no AZ is looked up)
        keys = {WHOLE_POOL}
        if where is not None and capacity:
            keys.add(self.offering(self.cfg.pool(pool), *where, capacity).key)
        for row in rows:
            if row.offering in keys:
                row.repeats, row.until_s, row.updated_at = 0, 0.0, now
                self.store.put_offering(row)

    def reclaimed(self, pool: str, now: datetime, where: Offering | None = None) -> None:
        """AWS is taking spot capacity back (an interruption): launching the same offering at
        once would likely fail or be interrupted again, so it is unavailable for the TTL, as
        after an insufficient-capacity error (the whole pool where the instance's offering is
        not known). Several warnings at once count as one."""
        key = WHOLE_POOL if where is None else where.key
        row = self.store.offering(pool, key)
        if row is not None and row.until_s > now.timestamp():
            return
        if where is None:
            self._unavailable(pool, WHOLE_POOL, "SpotInterruption", now)
        else:
            self._out(pool, [(where, "SpotInterruption")], "SpotInterruption", now)

    def _refused(self, pool_name: str, errors: Iterable[FleetError], capacity: str
                 ) -> list[tuple[Offering, str]]:
        """The offerings of these errors that are capacity errors, each once."""
        if not capacity:
            return []
        pool = self.cfg.pool(pool_name)
        out: dict[Offering, str] = {}
        for e in errors:
            if classify(e.code) is ErrorClass.CAPACITY and e.instance_type:
                out.setdefault(self.offering(pool, e.instance_type, e.subnet, capacity), e.code)
        return list(out.items())

    def _out(self, pool_name: str, refused: list[tuple[Offering, str]], code: str,
             now: datetime) -> None:
        """These offerings are out for their TTL; the pool too when none of its offerings
        is left."""
        t = now.timestamp()
        for off, why in refused:
            row = self.store.offering(pool_name, off.key)
            repeats = (row.repeats if row else 0) + 1
            until = t + unavailable_ttl(repeats, self.cfg.capacity.unavailable_ttl_s,
                                        self.cfg.capacity.max_unavailable_ttl_s)
            self.store.put_offering(OfferingRow(pool=pool_name, offering=off.key,
                                                until_s=until, repeats=repeats,
                                                last_code=why, updated_at=now))
        pool = self.cfg.pool(pool_name)
        until_of = {r.offering: r for r in self.store.offerings()
                    if r.pool == pool_name and r.offering and r.until_s > t}
        mine = set(self.offerings(pool, refused[0][0].capacity).values())
        left = [o for o in mine if o.key not in until_of]
        said = ", ".join(f"{o} until {_stamp(until_of[o.key].until_s)} "
                         f"({until_of[o.key].repeats} in a row)" for o, _ in refused)
        if left:
            self.event(Kind.CAPACITY_UNAVAILABLE,
                       f"{pool_name}: {code}: {said} unavailable; the pool's next launches "
                       f"go to its {len(left)} other offering(s)")
            return
        # every offering out: the pool is, until the first of them comes back
        back = min(until_of[o.key].until_s for o in mine)
        worst = max(until_of[o.key].repeats for o in mine)
        self.store.put_offering(OfferingRow(pool=pool_name, offering=WHOLE_POOL, until_s=back,
                                            repeats=worst, last_code=code, updated_at=now))
        self._pool_out(pool_name, f"{code}: {said}: no offering of the pool left", back, now)

    def _unavailable(self, pool: str, key: str, code: str, now: datetime) -> None:
        row = self.store.offering(pool, key)
        repeats = (row.repeats if row else 0) + 1
        ttl = unavailable_ttl(repeats, self.cfg.capacity.unavailable_ttl_s,
                              self.cfg.capacity.max_unavailable_ttl_s)
        until = now.timestamp() + ttl
        self.store.put_offering(OfferingRow(pool=pool, offering=key, until_s=until,
                                            repeats=repeats, last_code=code, updated_at=now))
        self._pool_out(pool, f"{code} ({repeats} in a row)", until, now)

    def _pool_out(self, pool: str, why: str, until: float, now: datetime) -> None:
        fb = self.cfg.pool(pool).fallback_pool
        self.event(Kind.CAPACITY_UNAVAILABLE,
                   f"{pool}: {why}: unavailable for {until - now.timestamp():.0f}s, until "
                   f"{_stamp(until)}"
                   + (f"; jobs that may run on {fb} go there meanwhile" if fb else ""))
        # Held at once, not at the pass's node upkeep: the jobs an interruption requeues next
        # would otherwise be placed on the pool's powered-down nodes in between, and draining
        # a node already powering up for a job requeues that job a second time.
        try:
            self.upkeep(self.slurm.nodes(self.cfg.pool(pool).node_names()), now)
        except SlurmError as e:
            log.warning("%s: powered-down nodes not held yet (%s): the pass's upkeep will", pool,
                        e)

    def upkeep(self, nodes: list[SlurmNode], now: datetime) -> None:
        """Hold unavailable pools' powered-down nodes; return them when the TTL is over."""
        t = now.timestamp()
        until = {r.pool: r.until_s for r in self.store.offerings() if not r.offering}
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
            self.edits.apply(edits.drain(names, reasons.reason(Why.NO_CAPACITY, stamp), said=(
                Kind.NODES_HELD_NO_CAPACITY, f"{pool_name}: {','.join(names)} held out of "
                f"scheduling until {stamp}")))
        undrain(self.edits, back, Kind.CAPACITY_RETRY,
                "capacity TTL over; the next launch tries the pool again")
