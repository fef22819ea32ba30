"""Node names in DNS (`dns:`): one A record per node with an instance, in the cluster's Route
53 private hosted zone, so every instance resolves every node name (`SLURM_NODELIST`'s
`spot-p5-1` as MPI's or torchrun's MASTER_ADDR), as ParallelCluster does with its zone.

A reconcile, not a log of changes: each pass compares the instances the store has running
(their nodes' private IPs, the addresses NodeAddr is given) with the zone's records of this
cluster's node names, and one batch UPSERTs what is missing or wrong and DELETEs what has no
instance. So a record is written in the pass that wrote the node's NodeAddr, deleted in the
pass after its release, and whatever a killed daemon left undone (a fleet without its
records, a record of a terminated instance) is done by the next pass, like the leak sweep.
The zone is listed when the wanted records change and every `dns.resync_s` otherwise; a name
no pool has (the head node's, the site's) is never touched."""

from __future__ import annotations

import logging
from datetime import datetime

from slurmscale.audit import Kind
from slurmscale.cloud.protocol import CloudError, DnsRecord, DnsZone
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.executor.effects import Names
from slurmscale.hostlists import compress
from slurmscale.store.protocol import ReconcileStore
from slurmscale.store.rows import InstanceRow

log = logging.getLogger(__name__)


class NodeNamePass:
    def __init__(self, ctx: PassContext[ReconcileStore]) -> None:
        assert ctx.cfg.dns is not None and ctx.zone is not None
        self.ctx = ctx
        self.dns = ctx.cfg.dns
        self.zone: DnsZone = ctx.zone
        self.written: dict[str, str] | None = None  # what the zone had after the last change
        self.listed_at: datetime | None = None
        self.failing = False  # a failure said once until it works again

    def wanted(self, active: list[InstanceRow]) -> dict[str, str]:
        cfg = self.ctx.cfg
        return {i.node: i.private_ip for i in active
                if i.private_ip and cfg.pool_of(i.node) is not None}

    def run(self, active: list[InstanceRow], now: datetime) -> None:
        assert self.ctx.cfg.dns is not None
        want = self.wanted(active)
        fresh = (self.listed_at is not None and
                 (now - self.listed_at).total_seconds() < self.ctx.cfg.dns.resync_s)
        if want == self.written and fresh:
            return
        try:
            have = {n: r for n, r in self.zone.records().items()
                    if self.ctx.cfg.pool_of(n) is not None}
        except CloudError as e:
            self._failed(str(e))
            return
        upsert = {n: ip for n, ip in want.items() if have.get(n, DnsRecord("", 0)).ip != ip}
        delete = {n: r for n, r in have.items() if n not in want}
        if upsert or delete:
            said = []
            if upsert:
                said.append(f"{compress(sorted(upsert))} written")
            if delete:
                said.append(f"{compress(sorted(delete))} deleted")
            (done,) = self.ctx.effects.apply([Names(upsert, delete, (
                Kind.DNS_RECORDS_CHANGED, f"{self.dns.domain.rstrip('.')}: "
                f"{'; '.join(said)} (A records of nodes with an instance)"))])
            if not done.taken:
                self._failed(done.error)
                return
        self.failing = False
        self.written, self.listed_at = want, now

    def _failed(self, why: str) -> None:
        """Said once until it works again; the zone is listed again next pass."""
        if not self.failing:
            self.ctx.event(Kind.DNS_FAILED, f"Route 53 zone {self.dns.hosted_zone_id}: "
                           f"{why}; node names are tried again next pass")
        self.failing = True
        self.written = None
