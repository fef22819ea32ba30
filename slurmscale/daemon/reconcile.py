"""One reconcile pass: drain the spool, decide, act, record.

Order of every side effect: record the intent, call the cloud or Slurm, record the outcome.
No network call happens inside a database transaction.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from slurmscale.cloud.protocol import (
    TAG_CLUSTER,
    TAG_GANG,
    TAG_NODE,
    TAG_POOL,
    TAG_REQUEST,
    CloudError,
    CloudProvider,
    EventQueue,
)
from slurmscale.config import AddressSource, Config
from slurmscale.daemon.backoff import CapacityBackoff
from slurmscale.daemon.capacity import CapacityPass
from slurmscale.daemon.interruptions import InterruptionPass
from slurmscale.gangs import PendingRequest, gang_id, plan_requests
from slurmscale.hostlists import compress
from slurmscale.model import Gang, LaunchedInstance, LaunchResult, RequestKind
from slurmscale.policy.model import ActionKind
from slurmscale.slurm.protocol import SlurmClient, SlurmError
from slurmscale.spool import Spool
from slurmscale.store.repo import Store, utc
from slurmscale.store.tables import GangRow, InstanceRow

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


def client_token(gid: str) -> str:
    """EC2 ClientToken (<= 64 ASCII chars) derived from the gang id: a retried launch of the
    same gang is the same request to EC2, so it never launches twice."""
    return "slurmscale-" + hashlib.sha256(gid.encode()).hexdigest()[:40]


@dataclass
class TickResult:
    drained: int = 0
    launched_gangs: int = 0
    failed_gangs: int = 0
    released_nodes: int = 0
    policy_actions: int = 0
    events: int = 0  # EC2 event messages consumed
    next_due: float | None = None


class Reconciler:
    def __init__(self, cfg: Config, store: Store, slurm: SlurmClient, cloud: CloudProvider,
                 clock: Clock = utcnow, events: EventQueue | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.slurm = slurm
        self.cloud = cloud
        self.spool = Spool(cfg.spool_dir)
        self.clock = clock
        self.capacity = CapacityPass(cfg, store, slurm, self.event)
        self.backoff = CapacityBackoff(cfg, store, slurm, self.event)
        self.interruptions = InterruptionPass(cfg, store, slurm, events, self.event,
                                              self.backoff)

    # --- helpers -------------------------------------------------------------------
    def event(self, kind: str, message: str, **kw: str | None) -> None:
        log.info("%s: %s", kind, message)
        self.store.add_event(kind, message, self.clock(), **kw)

    def _pool_name(self, node: str) -> str | None:
        p = self.cfg.pool_of(node)
        return p.name if p else None

    def _address(self, node: str, inst: LaunchedInstance) -> tuple[str, str]:
        match self.cfg.node_address:
            case AddressSource.LOOPBACK:
                return "127.0.0.1", node
            case AddressSource.PRIVATE_DNS:
                return inst.private_dns or inst.private_ip, inst.private_dns or node
            case _:
                return inst.private_ip, node

    # --- the pass ------------------------------------------------------------------
    def drain_spool(self) -> int:
        n = 0
        for path, req in self.spool.pending():
            if req is None:
                self.spool.reject(path)
                self.event("spool_rejected", f"unreadable spool file {path.name} set aside")
                continue
            if self.store.add_request(req):
                n += 1
                self.event("request_received",
                           f"{req.kind.value} {req.hostlist} ({len(req.nodes)} nodes)",
                           request_id=req.id, node=req.hostlist)
            self.spool.done(path)
        return n

    def tick(self) -> TickResult:
        """Slurm's requests first (a resume is a job waiting), then the capacity policy."""
        res = TickResult()
        res.drained = self.drain_spool()
        self.handle_requests(res)
        # interruptions before the capacity pass: a node about to vanish is not capacity
        res.events = self.interruptions.run(self.clock())
        self._sweep_instances()
        self._node_upkeep()
        p = self.capacity.run(self.clock())
        if p is not None:
            res.policy_actions = len(p.holds.actions) + sum(
                1 for a in p.capacity.actions if a.kind is not ActionKind.KEEP)
        return res

    def handle_requests(self, res: TickResult) -> None:
        rows = self.store.pending_requests()
        if not rows:
            return
        now = self.clock()
        pending = [
            PendingRequest(id=r.id, kind=RequestKind(r.kind), nodes=tuple(json.loads(r.nodes)),
                           resume_file=r.resume_file, received_at=utc(r.received_at).timestamp())
            for r in rows
        ]
        active = {i.node for i in self.store.active_instances()}
        plan = plan_requests(pending, active, self._pool_name, now.timestamp(),
                             self.cfg.daemon.batch_window_seconds)
        res.next_due = plan.next_due
        for n in plan.unknown_nodes:
            self.event("node_unknown", f"node {n} is in no pool; not launched", node=n)
        if plan.already_up:
            self.event("resume_skipped",
                       f"{compress(list(plan.already_up))} already has instances; "
                       "not launched again", node=compress(list(plan.already_up)))
        if plan.release:
            res.released_nodes = self.release(plan.release)
        failed_requests: dict[str, str] = {}
        for gang in plan.launch:
            ok, why = self.launch_gang(gang)
            if ok:
                res.launched_gangs += 1
            else:
                res.failed_gangs += 1
                for rid in gang.request_ids:
                    failed_requests[rid] = why
        done_ok = [r for r in plan.done if r not in failed_requests]
        self.store.finish_requests(done_ok, "done", self.clock())
        for rid, why in failed_requests.items():
            self.store.finish_requests([rid], "failed", self.clock(), error=why)

    def _sweep_instances(self) -> None:
        """Instances that vanished without an event (one DescribeInstances, only while the
        store has instances running)."""
        if not self.store.active_instances():
            return
        try:
            seen = self.cloud.find({TAG_CLUSTER: self.cfg.cluster_name}, include_terminated=True)
        except CloudError as e:
            log.warning("cannot list instances to look for vanished ones: %s", e)
            return
        self.interruptions.sweep(seen, self.clock())

    def _node_upkeep(self) -> None:
        """Drains slurmscale placed and must lift (or place) as time passes: nodes back from
        an interruption, pools whose capacity TTL started or ended."""
        try:
            nodes = self.slurm.nodes()
        except SlurmError:
            return  # the capacity pass reports an unreachable Slurm
        self.interruptions.return_powered_down_nodes(nodes)
        self.backoff.upkeep(nodes, self.clock())

    # --- launch --------------------------------------------------------------------
    def launch_gang(self, gang: Gang) -> tuple[bool, str]:
        """Launch one gang with one CreateFleet; keep all of it or none of it."""
        pool = self.cfg.pool(gang.pool)
        gid = gang_id(gang)
        token = client_token(gid)
        now = self.clock()
        nodes_expr = compress(list(gang.nodes))
        existing = self.store.get_gang(gid)
        if existing is None:
            self.store.add_gang(GangRow(
                id=gid, pool=gang.pool, nodes=nodes_expr, size=gang.size,
                job_ids=json.dumps(list(gang.job_ids)),
                request_ids=json.dumps(list(gang.request_ids)), coalesced=gang.coalesced,
                status="launching", client_token=token,
                launch_template_version=pool.launch_template.version,
                created_at=now, updated_at=now,
            ))
        what = (f"job {gang.job_ids[0]} gang" if gang.job_ids else "batch of single nodes")
        self.event("launch_requested",
                   f"{what} {nodes_expr}: CreateFleet instant x{gang.size} "
                   f"(min {gang.min_capacity}, {pool.capacity_type.value}, "
                   f"{','.join(pool.instance_types)}, LT v{pool.launch_template.version})",
                   gang_id=gid, node=nodes_expr)
        tags = {TAG_CLUSTER: self.cfg.cluster_name, TAG_POOL: pool.name, TAG_GANG: gid,
                TAG_REQUEST: gang.request_ids[0] if gang.request_ids else ""}
        try:
            result = self.cloud.launch(pool, gang.size, gang.min_capacity, token, tags)
        except CloudError as e:
            self._fail_gang(gang, gid, e.code, e.message, obtained=[])
            self.backoff.launch_failed(pool.name, e.code, e.message, self.clock())
            return False, e.code
        if len(result.instances) < gang.min_capacity:
            code = result.error_code or "PartialCapacity"
            msg = result.error_message or (
                f"EC2 gave {len(result.instances)} of {gang.size} instances")
            self._fail_gang(gang, gid, code, msg,
                            obtained=[i.instance_id for i in result.instances])
            self.backoff.launch_failed(pool.name, code, msg, self.clock())
            return False, code
        self._accept(gang, gid, result)
        self.backoff.launched(pool.name, self.clock())
        return True, ""

    def _accept(self, gang: Gang, gid: str, result: LaunchResult) -> None:
        pool = self.cfg.pool(gang.pool)
        now = self.clock()
        pairs = list(zip(gang.nodes, sorted(result.instances, key=lambda i: i.instance_id),
                         strict=False))
        assigned = {i.instance_id for _, i in pairs}
        surplus = [i.instance_id for i in result.instances if i.instance_id not in assigned]
        if surplus:
            self._terminate(surplus, f"surplus instances of {gid}")
        self.store.add_instances([
            InstanceRow(instance_id=i.instance_id, node=node, pool=pool.name, gang_id=gid,
                        instance_type=i.instance_type, lifecycle=i.lifecycle,
                        image_id=i.image_id,
                        launch_template_version=pool.launch_template.version,
                        private_ip=i.private_ip, state="running", launched_at=now)
            for node, i in pairs
        ])
        for node, inst in pairs:
            try:
                self.cloud.tag(inst.instance_id, {TAG_NODE: node,
                                                  "Name": f"{self.cfg.cluster_name}-{node}"})
            except CloudError as e:
                self.event("tag_failed", f"{inst.instance_id} ({node}): {e}", node=node,
                           gang_id=gid)
            addr, host = self._address(node, inst)
            try:
                self.slurm.set_node_address(node, addr, host)
            except SlurmError as e:
                self.event("slurm_update_failed", f"{node} nodeaddr={addr}: {e}", node=node,
                           gang_id=gid)
        missing = list(gang.nodes[len(pairs):])
        images = sorted({i.image_id for _, i in pairs if i.image_id})
        self.store.update_gang(gid, status="launched", fleet_id=result.fleet_id,
                               error_code=result.error_code or None,
                               error_message=result.error_message or None, updated_at=now)
        self.event("launched",
                   f"{compress([n for n, _ in pairs])}: "
                   + ", ".join(f"{n}={i.instance_id}" for n, i in pairs)
                   + f" (AMI {','.join(images) or '?'}, LT v{pool.launch_template.version})",
                   gang_id=gid, node=compress([n for n, _ in pairs]))
        if missing:
            self._power_down(missing, result.error_code or "PartialCapacity", gid)

    def _fail_gang(self, gang: Gang, gid: str, code: str, message: str,
                   obtained: list[str]) -> None:
        """All or nothing: terminate what we got (and anything EC2 launched under this gang's
        tag that the response did not list), then tell Slurm so the job requeues."""
        strays: list[str] = []
        try:
            strays = [i.instance_id for i in self.cloud.find(
                {TAG_CLUSTER: self.cfg.cluster_name, TAG_GANG: gid})]
        except CloudError as e:
            self.event("cloud_error", f"listing instances of failed gang {gid}: {e}",
                       gang_id=gid)
        to_kill = sorted(set(obtained) | set(strays))
        if to_kill:
            self._terminate(to_kill, f"rollback of gang {gid}")
        self.store.update_gang(gid, status="failed", error_code=code,
                               error_message=message[:2000], updated_at=self.clock())
        self.event("launch_failed",
                   f"{compress(list(gang.nodes))}: {code}: {message}; "
                   f"rolled back {len(to_kill)} instance(s)",
                   gang_id=gid, node=compress(list(gang.nodes)))
        self._power_down(list(gang.nodes), code, gid)

    def _power_down(self, nodes: list[str], code: str, gid: str) -> None:
        reason = f"slurmscale launch failed: {code}"
        try:
            self.slurm.power_down_force(nodes, reason)
            self.event("nodes_powered_down", f"{compress(nodes)}: {reason}",
                       node=compress(nodes), gang_id=gid)
        except SlurmError as e:
            self.event("slurm_update_failed", f"power down {compress(nodes)}: {e}",
                       node=compress(nodes), gang_id=gid)

    def _terminate(self, instance_ids: list[str], why: str) -> None:
        try:
            self.cloud.terminate(instance_ids)
        except CloudError as e:
            self.event("terminate_failed", f"{','.join(instance_ids)} ({why}): {e}")
            return
        self.store.mark_terminated(instance_ids, self.clock())
        self.event("terminated", f"{','.join(instance_ids)} ({why})")

    # --- release (suspend / resume-fail) -------------------------------------------
    def release(self, items: tuple[tuple[str, RequestKind, str], ...]) -> int:
        nodes = [n for n, _, _ in items]
        by_node: dict[str, set[str]] = {n: set() for n in nodes}
        for inst in self.store.active_instances(nodes):
            by_node[inst.node].add(inst.instance_id)
        try:
            for ci in self.cloud.find({TAG_CLUSTER: self.cfg.cluster_name}):
                n = ci.tags.get(TAG_NODE)
                if n in by_node:
                    by_node[n].add(ci.instance_id)
        except CloudError as e:
            self.event("cloud_error", f"listing instances for release: {e}")
        ids = sorted({i for s in by_node.values() for i in s})
        kinds = {k.value for _, k, _ in items}
        if ids:
            self._terminate(ids, f"{'/'.join(sorted(kinds))} of {compress(nodes)}")
        for node, kind, rid in items:
            if kind is RequestKind.RESUME_FAIL:
                self.event("resume_failed",
                           f"Slurm gave up on {node} (ResumeTimeout); instance released",
                           node=node, request_id=rid)
            try:
                self.slurm.set_node_address(node, node, node)
            except SlurmError as e:
                self.event("slurm_update_failed", f"reset nodeaddr of {node}: {e}", node=node)
        self.event("released", f"{compress(nodes)} ({'/'.join(sorted(kinds))}): "
                   f"{len(ids)} instance(s) terminated", node=compress(nodes))
        return len(nodes)
