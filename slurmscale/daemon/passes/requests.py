"""Slurm's requests: the hooks' spool files into the store, then each pass the pending
resume, suspend and resume-fail requests carried out: gangs launched whole, released nodes'
instances terminated and their addresses reset. A request is finished only once done; one
that cannot be read is failed with its reason, never left to stop the loop."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from slurmscale import timeframe
from slurmscale.audit import Kind
from slurmscale.cloud.protocol import TAG_CLUSTER, TAG_NODE, CloudError
from slurmscale.daemon.context import PassContext, TickResult
from slurmscale.daemon.executor import edits
from slurmscale.daemon.passes.addresses import NodeAddresses
from slurmscale.daemon.passes.launch import GangLauncher, Outcome
from slurmscale.daemon.passes.retry import EndpointRetry
from slurmscale.gangs import PendingRequest, plan_requests
from slurmscale.hostlists import compress
from slurmscale.lifecycles import RequestStatus
from slurmscale.spool import RequestKind, RequestSource, Spool
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.rows import utc

log = logging.getLogger(__name__)


class RequestPass:
    def __init__(self, ctx: PassContext[LaunchStore], launcher: GangLauncher,
                 addresses: NodeAddresses, ec2_retry: EndpointRetry,
                 spool: RequestSource | None = None) -> None:
        """`spool`: where the hooks' requests wait (the spool directory unless given)."""
        self.ctx = ctx
        self.spool: RequestSource = Spool(ctx.cfg.spool_dir) if spool is None else spool
        self.launcher = launcher
        self.addresses = addresses
        self.ec2_retry = ec2_retry
        self.spool_stuck = False  # a spool file could not be removed (said once)

    def _pool_name(self, node: str) -> str | None:
        p = self.ctx.cfg.pool_of(node)
        return p.name if p else None

    def drain_spool(self) -> int:
        """Move spooled requests into the store. A file that cannot be taken, whatever the
        reason, is set aside in `rejected/` with an event, and the others are still taken: one
        bad file must never stop every pass. The store being down is no reason to reject: that
        error ends the pass, and the file is taken next time."""
        n = 0
        for path, req in self.spool.pending():
            if isinstance(req, str):
                self._reject(path, req)
                continue
            # (the hook's clock is the host's: its time read into the daemon's steady time)
            req = req._replace(received_at=timeframe.FRAME.from_host(req.received_at))
            try:
                added = self.ctx.store.add_request(req)
            except Exception as e:  # noqa: BLE001 - any failure but the store's is this file's
                if self.ctx.store.is_outage(e):
                    raise
                self._reject(path, f"not storable ({type(e).__name__}: {e})"[:300])
                continue
            if added:
                n += 1
                self.ctx.event(Kind.REQUEST_RECEIVED,
                           f"{req.kind.value} {req.hostlist} ({len(req.nodes)} nodes)",
                           request_id=req.id, node=req.hostlist)
            self._done(path)
        return n

    def _done(self, path: Path) -> None:
        """The file's request is in the store: the file goes. A spool the daemon cannot
        write (read-only, its owner changed) costs the spool its clean-up, never the pass:
        the request is taken once however often its file is drained again (`add_request`),
        and the event says so once until a file can be removed again."""
        try:
            self.spool.done(path)
        except OSError as e:
            if not self.spool_stuck:
                self.ctx.event(Kind.SPOOL_UNWRITABLE, f"cannot remove spool file {path.name} "
                               f"({e.strerror or e}): its request is taken, the file is read "
                               "again every pass until the spool is writable")
            self.spool_stuck = True
            return
        self.spool_stuck = False

    def _reject(self, path: Path, why: str) -> None:
        try:
            self.spool.reject(path)
        except OSError as e:
            log.error("cannot set aside spool file %s: %s", path, e)
        self.ctx.event(Kind.SPOOL_REJECTED, f"spool file {path.name} {why}: set aside in rejected/")

    def handle_requests(self, res: TickResult) -> None:
        rows = self.ctx.store.pending_requests()
        if not rows:
            return
        now = self.ctx.clock()
        pending, good = [], []
        for r in rows:
            try:
                nodes = json.loads(r.nodes)
                if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
                    raise ValueError(f"nodes {r.nodes[:80]!r} is not a list of names")
                pending.append(PendingRequest(
                    id=r.id, kind=RequestKind(r.kind), nodes=tuple(nodes),
                    resume_file=r.resume_file,
                    received_at=utc(r.received_at).timestamp()))
                good.append(r)
            except (ValueError, TypeError, AttributeError, RecursionError) as e:
                # one bad row must not stop every pass: it is failed, with its reason
                self.ctx.store.finish_requests([r.id], RequestStatus.FAILED, now,
                                          error=f"unreadable: {e}")
                self.ctx.event(Kind.REQUEST_REJECTED, f"request {r.id} in the store is unreadable "
                           f"({e}); marked failed", request_id=r.id)
        rows = good
        if not rows:
            return
        active = {i.node for i in self.ctx.store.active_instances()}
        plan = plan_requests(pending, active, self._pool_name, now.timestamp(),
                             self.ctx.cfg.daemon.batch_window_seconds)
        res.next_due = plan.next_due
        for n in plan.unknown_nodes:
            self.ctx.event(Kind.NODE_UNKNOWN, f"node {n} is in no pool; not launched", node=n)
        if plan.already_up:
            self.ctx.event(Kind.RESUME_SKIPPED,
                       f"{compress(list(plan.already_up))} already has instances; "
                       "not launched again", node=compress(list(plan.already_up)))
            self.addresses.readdress(list(plan.already_up))
        kept: set[str] = set()  # request ids left pending for a retry
        if plan.release:
            res.released_nodes, unfinished = self.release(plan.release)
            kept.update(unfinished)
        failed_requests: dict[str, str] = {}
        received = {r.id: p.received_at for r, p in zip(rows, pending, strict=True)}
        give_up_s = self.ctx.cfg.power_saving.resume_timeout / 2
        for gang in plan.launch:
            # a request EC2 never answered is given up at half of ResumeTimeout: the job then
            # requeues with the error as the node reason instead of a bare timeout
            give_up_at = min(received[r] for r in gang.request_ids) + give_up_s
            if self.ec2_retry.waiting(now.timestamp()) and now.timestamp() < give_up_at:
                kept.update(gang.request_ids)
                continue
            launch = self.launcher.launch_gang(gang, give_up_at)
            if launch.outcome is Outcome.LAUNCHED:
                res.launched_gangs += 1
            elif launch.outcome is Outcome.DEFERRED:
                kept.update(gang.request_ids)
                if launch.retry_at is not None:
                    res.next_due = min(res.next_due or launch.retry_at, launch.retry_at)
            else:
                res.failed_gangs += 1
                for rid in gang.request_ids:
                    failed_requests[rid] = launch.why
        due = self.ec2_retry.due() if kept else 0.0
        if due:
            res.next_due = min(res.next_due or due, due)
        done_ok = [r for r in plan.done if r not in failed_requests and r not in kept]
        self.ctx.store.finish_requests(done_ok, RequestStatus.DONE, self.ctx.clock())
        for rid, why in failed_requests.items():
            self.ctx.store.finish_requests([rid], RequestStatus.FAILED, self.ctx.clock(), error=why)

    # --- release (suspend / resume-fail) -------------------------------------------
    def release(self, items: tuple[tuple[str, RequestKind, str], ...]
                ) -> tuple[int, list[str]]:
        """Terminate the nodes' instances (or stop them into their pool's warm pool).
        Returns the nodes released and the requests to keep pending: a terminate EC2 did not
        carry out is retried next pass, or the instance would run on, tracked, under a
        powered-down node."""
        nodes = [n for n, _, _ in items]
        by_node: dict[str, set[str]] = {n: set() for n in nodes}
        rows = self.ctx.store.active_instances(nodes)
        for inst in rows:
            by_node[inst.node].add(inst.instance_id)
        try:
            for ci in self.ctx.cloud.find({TAG_CLUSTER: self.ctx.cfg.cluster_name}):
                n = ci.tags.get(TAG_NODE)
                if n in by_node:
                    by_node[n].add(ci.instance_id)
        except CloudError as e:
            self.ctx.event(Kind.CLOUD_ERROR, f"listing instances for release: {e}")
        ids = sorted({i for s in by_node.values() for i in s})
        kinds = {k.value for _, k, _ in items}
        why = f"{'/'.join(sorted(kinds))} of {compress(nodes)}"
        # a suspended node's instance into its pool's warm pool, where it has room (a failed
        # resume's instance is not trusted to boot again: terminated)
        suspended = {n for n, k, _ in items if k is RequestKind.SUSPEND}
        warm = self.launcher.warm.stop(self.launcher.warm.keep(
            [r for r in rows if r.node in suspended]), why)
        ids = [i for i in ids if i not in warm]
        if ids and not self.ctx.terminate(ids, why):
            return 0, [rid for _, _, rid in items]
        for node, kind, rid in items:
            if kind is RequestKind.RESUME_FAIL:
                self.ctx.event(Kind.RESUME_FAILED,
                           f"Slurm gave up on {node} (ResumeTimeout); instance released",
                           node=node, request_id=rid)
        self.ctx.effects.apply([self.addresses.addressed([(n, n, n) for n in nodes]),
                                edits.instances([(n, "", "") for n in nodes])])
        self.ctx.event(Kind.RELEASED, f"{compress(nodes)} ({'/'.join(sorted(kinds))}): "
                       f"{len(ids)} instance(s) terminated"
                       + (f", {len(warm)} stopped into the warm pool" if warm else ""),
                       node=compress(nodes))
        return len(nodes), []
