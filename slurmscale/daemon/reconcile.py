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
from enum import StrEnum
from pathlib import Path

from sqlalchemy.exc import DBAPIError

from slurmscale.cloud.errors import is_transient
from slurmscale.cloud.protocol import (
    TAG_CLUSTER,
    TAG_GANG,
    TAG_NODE,
    TAG_POOL,
    TAG_REQUEST,
    CloudError,
    CloudInstance,
    CloudProvider,
    EventQueue,
)
from slurmscale.config import AddressSource, Config, Pool
from slurmscale.crashpoints import crash_point
from slurmscale.daemon.backoff import CapacityBackoff
from slurmscale.daemon.blocks import BlockPass
from slurmscale.daemon.capacity import CapacityPass
from slurmscale.daemon.fleets import GangFleets, ReservedCapacity
from slurmscale.daemon.interruptions import InterruptionPass
from slurmscale.daemon.lost_nodes import LostNodes, nodes_without_instances
from slurmscale.daemon.metrics import Metrics
from slurmscale.daemon.retry import EndpointRetry
from slurmscale.gangs import PendingRequest, gang_id, plan_requests
from slurmscale.hostlists import compress
from slurmscale.lifecycles import GangStatus, InstanceState, RequestStatus
from slurmscale.model import (
    CapacityReservation,
    Gang,
    LaunchedInstance,
    LaunchResult,
    RequestKind,
    SlurmNode,
)
from slurmscale.policy.model import ActionKind
from slurmscale.policy.routing import NO_RESERVED_FIT, Route, RouteKind, fleet_parts
from slurmscale.slurm import reasons
from slurmscale.slurm.protocol import SlurmClient, SlurmError
from slurmscale.slurm.reasons import Why
from slurmscale.spool import Spool
from slurmscale.store.repo import Store, utc
from slurmscale.store.tables import CapacityReservationRow, GangRow, InstanceRow

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


def leaked_instances(seen: list[CloudInstance], cluster: str, tracked: set[str],
                     now: datetime, grace_s: float) -> list[CloudInstance]:
    """Instances of this cluster (by tag, checked again here) that are up, that the store does
    not track as running, and that are older than the grace period. Anything without this
    cluster's tag is never a leak of ours."""
    out = []
    for i in seen:
        if i.tags.get(TAG_CLUSTER) != cluster or i.state not in ("pending", "running"):
            continue
        if i.instance_id in tracked or i.launched_at is None:
            continue
        if (now - utc(i.launched_at)).total_seconds() >= grace_s:  # type: ignore[operator]
            out.append(i)
    return out


def client_token(gid: str) -> str:
    """EC2 ClientToken (<= 64 ASCII chars) derived from the gang id: a retried launch of the
    same gang is the same request to EC2, so it never launches twice."""
    return "slurmscale-" + hashlib.sha256(gid.encode()).hexdigest()[:40]


def _launched(row: InstanceRow) -> LaunchedInstance:
    """A recorded instance as a launch returned it (the store keeps no DNS name)."""
    return LaunchedInstance(row.instance_id, row.instance_type, row.lifecycle,
                            row.image_id or "", row.private_ip or "")


class Outcome(StrEnum):
    LAUNCHED = "launched"
    FAILED = "failed"  # rolled back, nodes powered down with the reason: the job requeues
    DEFERRED = "deferred"  # EC2 did not answer: the request stays pending, retried later


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
                 clock: Clock = utcnow, events: EventQueue | None = None,
                 metrics: Metrics | None = None) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.store = store
        self.slurm = slurm
        self.cloud = cloud
        self.spool = Spool(cfg.spool_dir)
        self.clock = clock
        self.capacity = CapacityPass(cfg, store, slurm, self.event,
                                     metrics.job_started if metrics else None)
        self.backoff = CapacityBackoff(cfg, store, slurm, self.event)
        self.untracked_reported: set[str] = set()
        # powered-down nodes whose NodeAddr was judged not slurmscale's (slurm.conf's): not
        # looked up again until the node powers up or its address changes
        self.addr_kept: dict[str, str] = {}
        self.interruptions = InterruptionPass(cfg, store, slurm, events, self.event,
                                              self.backoff)
        self.ec2_retry = EndpointRetry(base_s=max(2.0, cfg.daemon.tick_seconds))
        self.lost = LostNodes(cfg.daemon.lost_node_grace_s)
        self.reserved = ReservedCapacity(cfg, cloud, self.event, self._save_reservations)
        self.fleets = GangFleets(cfg, cloud, client_token)
        self.blocks = BlockPass(cfg, slurm, self.reserved, self.event)

    # --- helpers -------------------------------------------------------------------
    def event(self, kind: str, message: str, **kw: str | None) -> None:
        log.info("%s: %s", kind, message)
        self.store.add_event(kind, message, self.clock(), **kw)
        if self.metrics is not None:
            self.metrics.event(kind)

    def _count_launch(self, pool: Pool, outcome: Outcome, code: str = "") -> None:
        if self.metrics is not None:
            self.metrics.launched(pool.name, pool.capacity_type.value, outcome.value, code)

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
        """Move spooled requests into the store. A file that cannot be taken, whatever the
        reason, is set aside in `rejected/` with an event, and the others are still taken: one
        bad file must never stop every pass. The store being down is no reason to reject: that
        error ends the pass, and the file is taken next time."""
        n = 0
        for path, req in self.spool.pending():
            if req is None:
                self._reject(path, "unreadable or invalid")
                continue
            try:
                added = self.store.add_request(req)
            except DBAPIError:
                raise
            except Exception as e:  # noqa: BLE001 - any other failure is this file's
                self._reject(path, f"not storable ({type(e).__name__}: {e})"[:300])
                continue
            if added:
                n += 1
                self.event("request_received",
                           f"{req.kind.value} {req.hostlist} ({len(req.nodes)} nodes)",
                           request_id=req.id, node=req.hostlist)
            self.spool.done(path)
        return n

    def _reject(self, path: Path, why: str) -> None:
        try:
            self.spool.reject(path)
        except OSError as e:
            log.error("cannot set aside spool file %s: %s", path, e)
        self.event("spool_rejected", f"spool file {path.name} {why}: set aside in rejected/")

    def tick(self) -> TickResult:
        """Slurm's requests first (a resume is a job waiting), then the capacity policy."""
        res = TickResult()
        res.drained = self.drain_spool()
        self.handle_requests(res)
        # interruptions before the capacity pass: a node about to vanish is not capacity
        res.events = self.interruptions.run(self.clock())
        try:
            nodes: list[SlurmNode] | None = self.slurm.nodes()
        except SlurmError:
            nodes = None  # the capacity pass reports an unreachable Slurm
        active = self._sweep_instances(nodes)
        # the reservations' state and free count (one cached call): status, plan, metrics
        self.reserved.reservations(self.clock().timestamp())
        if nodes is not None:
            self.blocks.run(nodes, self.clock())
            self._node_upkeep(nodes, active)
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
        pending, good = [], []
        for r in rows:
            try:
                nodes = json.loads(r.nodes)
                if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
                    raise ValueError(f"nodes {r.nodes[:80]!r} is not a list of names")
                pending.append(PendingRequest(
                    id=r.id, kind=RequestKind(r.kind), nodes=tuple(nodes),
                    resume_file=r.resume_file,
                    received_at=utc(r.received_at).timestamp()))  # type: ignore[union-attr]
                good.append(r)
            except (ValueError, TypeError, AttributeError, RecursionError) as e:
                # one bad row must not stop every pass: it is failed, with its reason
                self.store.finish_requests([r.id], RequestStatus.FAILED, now,
                                          error=f"unreadable: {e}")
                self.event("request_rejected", f"request {r.id} in the store is unreadable "
                           f"({e}); marked failed", request_id=r.id)
        rows = good
        if not rows:
            return
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
            self._readdress(list(plan.already_up))
        kept: set[str] = set()  # request ids left pending for a retry
        if plan.release:
            res.released_nodes, unfinished = self.release(plan.release)
            kept.update(unfinished)
        failed_requests: dict[str, str] = {}
        received = {r.id: p.received_at for r, p in zip(rows, pending, strict=True)}
        give_up_s = self.cfg.power_saving.resume_timeout / 2
        for gang in plan.launch:
            # a request EC2 never answered is given up at half of ResumeTimeout: the job then
            # requeues with the error as the node reason instead of a bare timeout
            give_up_at = min(received[r] for r in gang.request_ids) + give_up_s
            if self.ec2_retry.waiting(now.timestamp()) and now.timestamp() < give_up_at:
                kept.update(gang.request_ids)
                continue
            outcome, why = self.launch_gang(gang, give_up_at)
            if outcome is Outcome.LAUNCHED:
                res.launched_gangs += 1
            elif outcome is Outcome.DEFERRED:
                kept.update(gang.request_ids)
            else:
                res.failed_gangs += 1
                for rid in gang.request_ids:
                    failed_requests[rid] = why
        if kept and self.ec2_retry.until:
            res.next_due = min(res.next_due or self.ec2_retry.until, self.ec2_retry.until)
        done_ok = [r for r in plan.done if r not in failed_requests and r not in kept]
        self.store.finish_requests(done_ok, RequestStatus.DONE, self.clock())
        for rid, why in failed_requests.items():
            self.store.finish_requests([rid], RequestStatus.FAILED, self.clock(), error=why)

    def _sweep_instances(self, nodes: list[SlurmNode] | None) -> list[InstanceRow] | None:
        """One DescribeInstances by the cluster tag: instances that vanished without an event,
        instances running that no node expects (leaks), and nodes Slurm has up with no
        instance at all. `nodes`: Slurm's nodes this pass, None when Slurm was unreadable.
        Returns the instances the store tracks as running (read once for the pass), or None
        when EC2 did not answer."""
        try:
            seen = self.cloud.find({TAG_CLUSTER: self.cfg.cluster_name}, include_terminated=True)
        except CloudError as e:
            log.warning("cannot list instances to look for vanished ones: %s", e)
            return None
        now = self.clock()
        self.interruptions.sweep(seen, now)
        active = self.store.active_instances()
        leaks = leaked_instances(seen, self.cfg.cluster_name,
                                 {i.instance_id for i in active}, now,
                                 self.cfg.daemon.leak_grace_s)
        if leaks:
            leaks = self._not_in_use(leaks, {i.node for i in active}, nodes)
        if leaks and self._terminate(
                [i.instance_id for i in leaks],
                f"leaked: tagged for cluster {self.cfg.cluster_name}, no node expects it, "
                f"older than {self.cfg.daemon.leak_grace_s:g}s"):
            for i in leaks:
                self.event("leak_terminated", f"{i.instance_id} ({i.state}, node tag "
                           f"{i.tags.get(TAG_NODE, 'none')}, launched {i.launched_at}) was "
                           "running untracked", node=i.tags.get(TAG_NODE))
        if nodes:
            self._terminate_nodeless(active, nodes, now)
            self._power_down_lost(nodes, seen, {i.node for i in active}, now)
        for name in self.fleets.sweep_groups(self.store.live_gangs()):
            self.event("placement_group_deleted", f"{name}: its gang's instances are gone")
        return active

    def _terminate_nodeless(self, active: list[InstanceRow], nodes: list[SlurmNode],
                            now: datetime) -> None:
        """A tracked instance whose node Slurm does not have (a name Slurm refused, a node
        taken out of slurm.conf) can never run a job: terminated once older than the leak
        grace, like an untracked one. Slurm's node list must be non-empty to judge."""
        known = {n.name for n in nodes}
        grace = self.cfg.daemon.leak_grace_s
        orphans = [i for i in active if i.node not in known
                   and (now - utc(i.launched_at)).total_seconds() >= grace]  # type: ignore[operator]
        if orphans and self._terminate([i.instance_id for i in orphans],
                                       f"no Slurm node of that name for {grace:g}s"):
            for i in orphans:
                self.event("leak_terminated", f"{i.instance_id} was launched for node "
                           f"{i.node!r}, which Slurm does not have", node=i.node)

    def _power_down_lost(self, nodes: list[SlurmNode], seen: list[CloudInstance],
                         tracked: set[str], now: datetime) -> None:
        lost = nodes_without_instances(nodes, lambda n: self.cfg.pool_of(n) is not None,
                                       seen, tracked)
        due = self.lost.due(lost, now)
        if not due:
            return
        try:
            self.slurm.power_down_force(due, reasons.reason(Why.LOST))
        except SlurmError as e:
            self.event("slurm_update_failed", f"power down {compress(due)}: {e}",
                       node=compress(due))
            return
        self.event("node_without_instance",
                   f"{compress(due)}: up in Slurm, but neither EC2 nor the store has an "
                   f"instance for {self.cfg.daemon.lost_node_grace_s:g}s; powered down (jobs "
                   "requeue)", node=compress(due))

    def _not_in_use(self, leaks: list[CloudInstance], tracked_nodes: set[str],
                    nodes: list[SlurmNode] | None) -> list[CloudInstance]:
        """Of untracked instances, those Slurm cannot be using: no node tag, a node no pool
        has, a node powered down, or a node whose tracked instance is another one. An
        untracked instance of a node Slurm has up (a store lost or pointed elsewhere, say) is
        never terminated on that missing information: it is reported once instead. Slurm
        unreadable: nothing is terminated this pass."""
        if nodes is None:
            log.warning("leak check skipped: Slurm not readable")
            return []
        by_name = {n.name: n for n in nodes}
        out = []
        for i in leaks:
            node = i.tags.get(TAG_NODE, "")
            n = by_name.get(node)
            if (not node or n is None or node in tracked_nodes
                    or ("POWERED_DOWN" in n.flags and "POWERING_UP" not in n.flags)):
                out.append(i)
            elif i.instance_id not in self.untracked_reported:
                self.untracked_reported.add(i.instance_id)
                self.event("untracked_instance", f"{i.instance_id} is tagged for node {node}, "
                           f"which Slurm has {n.state}, but slurmscale does not track it; "
                           "not terminated: check the store (store_url) and the node",
                           node=node)
        return out

    def _node_upkeep(self, nodes: list[SlurmNode], active: list[InstanceRow] | None) -> None:
        """Drains slurmscale placed and must lift (or place) as time passes: nodes back from
        an interruption, pools whose capacity TTL started or ended; and node addresses.
        `active`: the instances the sweep read this pass (None: read them here)."""
        self.interruptions.return_powered_down_nodes(nodes)
        self.backoff.upkeep(nodes, self.clock())
        self._reset_stale_addresses(nodes)
        self._keep_addresses(nodes, self.store.active_instances() if active is None else active)

    def _keep_addresses(self, nodes: list[SlurmNode], active: list[InstanceRow]) -> None:
        """A node with an instance up whose NodeAddr is not the address slurmscale gave it
        (the `scontrol update` after the launch failed: slurmctld was down, say) is addressed
        again, every pass until it holds: otherwise slurmctld cannot reach the new slurmd, the
        job is requeued and a second launch follows. Costs nothing while addresses hold.
        With private_dns the store has no DNS name to compare: left to the launch."""
        if self.cfg.node_address is AddressSource.PRIVATE_DNS:
            return
        by_name = {n.name: n for n in nodes}
        for row in active:
            n = by_name.get(row.node)
            if n is None or {"POWERED_DOWN", "POWERING_DOWN"} & n.flags:
                continue  # being released: release resets the address
            addr, host = self._address(row.node, _launched(row))
            if not addr or n.addr == addr:
                continue
            try:
                self.slurm.set_node_address(row.node, addr, host)
            except SlurmError as e:
                log.warning("cannot readdress %s: %s", row.node, e)
                continue
            self.event("node_address_fixed", f"{row.node} runs on {row.instance_id} but Slurm "
                       f"had NodeAddr={n.addr}: set to {addr}", node=row.node)

    def _reset_stale_addresses(self, nodes: list[SlurmNode]) -> None:
        """A powered-down node still addressed at its released instance (the reset at release
        failed because slurmctld did not answer) is pointed back at its own name, as release
        does, so Slurm never keeps the address of an instance that is gone. Only an address
        slurmscale itself gave the node's last instance counts as stale: a NodeAddr from
        slurm.conf is the admin's. Nodes in transition or with an instance tracked are left
        alone; with private_dns addressing slurmscale never sets NodeAddr at all."""
        if self.cfg.node_address is AddressSource.PRIVATE_DNS:
            return
        candidates = {}
        for n in nodes:
            if ("POWERED_DOWN" not in n.flags or {"POWERING_UP", "POWERING_DOWN"} & n.flags
                    or n.addr == n.name or self.cfg.pool_of(n.name) is None):
                self.addr_kept.pop(n.name, None)
            elif self.addr_kept.get(n.name) != n.addr:
                candidates[n.name] = n
        if not candidates:
            return
        tracked = {i.node for i in self.store.active_instances(candidates)}
        last_of = self.store.last_instances(candidates)
        for name, n in candidates.items():
            if name in tracked:
                continue  # its release is pending; that resets the address
            last = last_of.get(name)
            given = self._address(name, _launched(last))[0] if last else ""
            if not given or n.addr != given:
                self.addr_kept[name] = n.addr
                continue
            try:
                self.slurm.set_node_address(name, name, name)
            except SlurmError as e:
                log.warning("cannot reset the address of %s: %s", name, e)
                continue
            self.event("node_address_reset", f"{name} is powered down and its instance "
                       f"{last.instance_id} gone, but Slurm still addressed it at {n.addr}: "
                       "reset to its name", node=name)

    # --- launch --------------------------------------------------------------------
    def launch_gang(self, gang: Gang, give_up_at: float = float("inf")) -> tuple[Outcome, str]:
        """Launch one gang with one CreateFleet; keep all of it or none of it. EC2 not
        answering defers the launch (until `give_up_at`): an unanswered CreateFleet may have
        launched, so the gang stays `launching` and the retry first looks for its tag."""
        pool = self.cfg.pool(gang.pool)
        gid = gang_id(gang)
        token = client_token(gid)
        now = self.clock()
        nodes_expr = compress(list(gang.nodes))
        existing = self.store.get_gang(gid)
        if existing is not None and existing.status == GangStatus.FAILED:
            # failed and rolled back before a restart cut off failing its requests: they fail
            # now; launching again would be a second attempt Slurm never asked for
            return Outcome.FAILED, existing.error_code or "LaunchFailed"
        recovering = existing is not None and existing.status == GangStatus.LAUNCHING
        route = self.reserved.route(pool, gang, now.timestamp())
        spec = self.fleets.spec(pool, route, gid)
        if existing is None:
            self.store.add_gang(GangRow(
                id=gid, pool=gang.pool, nodes=nodes_expr, size=gang.size,
                job_ids=json.dumps(list(gang.job_ids)),
                request_ids=json.dumps(list(gang.request_ids)), coalesced=gang.coalesced,
                status=GangStatus.LAUNCHING, client_token=token,
                launch_template_version=spec.launch_template_version,
                created_at=now, updated_at=now,
            ))
        what = (f"job {gang.job_ids[0]} gang" if gang.job_ids else "batch of single nodes")
        # a launch cut off by a crash: whatever it launched carries the gang's tag
        recovered = self._recover(gid) if recovering else None
        if route.kind is RouteKind.REFUSED and recovered is None:
            # (a recovered gang may find short the reserved capacity it took itself)
            self._fail_gang(gang, gid, NO_RESERVED_FIT, route.reason, obtained=[])
            self._count_launch(pool, Outcome.FAILED, NO_RESERVED_FIT)
            return Outcome.FAILED, NO_RESERVED_FIT
        parts = fleet_parts(gang.size, self.cfg.aws.max_instances_per_fleet)
        self.event("launch_requested",
                   f"{what} {nodes_expr}: CreateFleet instant x{gang.size}"
                   + (f" in {len(parts)} fleets ({'+'.join(map(str, parts))})"
                      if len(parts) > 1 else "")
                   + f" (min {gang.min_capacity}, "
                   + (f"reserved: {route.reason}" if route.kind is RouteKind.RESERVED
                      else pool.capacity_type.value + (f": {route.reason}"
                                                       if pool.capacity_reservations else ""))
                   + f", {','.join(spec.instance_types)}, LT v{spec.launch_template_version}"
                   + (f", placement group {spec.placement_group}" if spec.placement_group
                      else "") + ")",
                   gang_id=gid, node=nodes_expr)
        tags = {TAG_CLUSTER: self.cfg.cluster_name, TAG_POOL: pool.name, TAG_GANG: gid,
                TAG_REQUEST: gang.request_ids[0] if gang.request_ids else ""}
        crash_point("launch:before_fleet")
        result = recovered
        if result is None:
            try:
                result = self.fleets.launch(pool, gang, gid, tags, spec)
            except CloudError as e:
                at = self.clock().timestamp()
                if is_transient(e.code) and at < give_up_at:
                    delay = self.ec2_retry.failed(at)
                    self._count_launch(pool, Outcome.DEFERRED, e.code)
                    self.event("launch_deferred",
                               f"{what} {nodes_expr}: EC2 did not answer ({e.code}); retrying "
                               f"in {delay:.0f}s, giving up in {give_up_at - at:.0f}s",
                               gang_id=gid, node=nodes_expr)
                    return Outcome.DEFERRED, e.code
                self._fail_gang(gang, gid, e.code, e.message, obtained=[])
                self.backoff.launch_failed(pool.name, e.code, e.message, self.clock())
                self._count_launch(pool, Outcome.FAILED, e.code)
                return Outcome.FAILED, e.code
        self.ec2_retry.answered()
        crash_point("launch:after_fleet")
        if len(result.instances) < gang.min_capacity:
            code = result.error_code or "PartialCapacity"
            msg = result.error_message or (
                f"EC2 gave {len(result.instances)} of {gang.size} instances")
            self._fail_gang(gang, gid, code, msg,
                            obtained=[i.instance_id for i in result.instances])
            self.backoff.launch_failed(pool.name, code, msg, self.clock())
            self._count_launch(pool, Outcome.FAILED, code)
            return Outcome.FAILED, code
        self._accept(gang, gid, result, spec.launch_template_version)
        self._count_reserved(route, result)
        self.backoff.launched(pool.name, self.clock())
        self._count_launch(pool, Outcome.LAUNCHED)
        return Outcome.LAUNCHED, ""

    def _save_reservations(self, found: list[CapacityReservation], now: float) -> None:
        pool_of = {i: p.name for p in self.cfg.pools if p.capacity_reservations
                   for i in p.capacity_reservations.ids}

        def at(t: float | None) -> datetime | None:
            return None if t is None else datetime.fromtimestamp(t, UTC)
        self.store.save_capacity_reservations([CapacityReservationRow(
            id=r.id, pool=pool_of.get(r.id, ""), kind=r.reservation_type,
            instance_type=r.instance_type, availability_zone=r.availability_zone,
            total=r.total, available=r.available, state=r.state, start_at=at(r.start),
            end_at=at(r.end), read_at=datetime.fromtimestamp(now, UTC)) for r in found])

    def _count_reserved(self, route: Route, result: LaunchResult) -> None:
        """Gangs routed later this pass must not count the capacity this one took."""
        if route.kind is RouteKind.RESERVED:
            self.reserved.launched(route.reservation_ids, len(result.instances))

    def _readdress(self, nodes: list[str]) -> None:
        """Nodes whose instances are recorded: tag and address them again (both idempotent),
        in case the daemon died between recording an instance and finishing its node; and
        finish the gang the daemon died in the middle of (recorded, still `launching`)."""
        rows = self.store.active_instances(nodes)
        for row in rows:
            # the store keeps no DNS name: with private-dns the first launch's address stands
            self._finish_node(row.node, _launched(row),
                              address=self.cfg.node_address is not AddressSource.PRIVATE_DNS)
        for gid in sorted({r.gang_id for r in rows}):
            gang = self.store.get_gang(gid)
            if gang is None or gang.status != GangStatus.LAUNCHING:
                continue
            mine = [r for r in rows if r.gang_id == gid]
            self.store.update_gang(gid, status=GangStatus.LAUNCHED, updated_at=self.clock())
            self.event("launched", f"{compress([r.node for r in mine])}: "
                       + ", ".join(f"{r.node}={r.instance_id}" for r in mine)
                       + " (recorded before a restart; the launch is finished now)",
                       gang_id=gid, node=compress([r.node for r in mine]))

    def _finish_node(self, node: str, inst: LaunchedInstance, address: bool,
                     gid: str | None = None) -> None:
        """Tag the instance with its node and point Slurm's NodeAddr at it; failures are
        events (the resume is replayed, and both steps are idempotent)."""
        try:
            self.cloud.tag(inst.instance_id, {TAG_NODE: node,
                                              "Name": f"{self.cfg.cluster_name}-{node}"})
        except CloudError as e:
            self.event("tag_failed", f"{inst.instance_id} ({node}): {e}", node=node,
                       gang_id=gid)
        if not address:
            return
        addr, host = self._address(node, inst)
        try:
            self.slurm.set_node_address(node, addr, host)
        except SlurmError as e:
            self.event("slurm_update_failed", f"{node} nodeaddr={addr}: {e}", node=node,
                       gang_id=gid)

    def _recover(self, gid: str) -> LaunchResult | None:
        """This gang was being launched when the daemon died: whatever its CreateFleet
        launched carries its gang tag. Take those instead of launching again (EC2's
        ClientToken would make a repeat idempotent too, but not every endpoint honours it)."""
        try:
            found = self.cloud.launched_with({TAG_CLUSTER: self.cfg.cluster_name,
                                              TAG_GANG: gid})
        except CloudError as e:
            self.event("cloud_error", f"looking for instances of interrupted launch {gid}: {e}",
                       gang_id=gid)
            return None
        if not found:
            return None
        self.event("launch_recovered", f"gang {gid}: an earlier attempt launched "
                   f"{', '.join(i.instance_id for i in found)}; taking them", gang_id=gid)
        return LaunchResult(instances=found, error_code="", error_message="", fleet_id="")

    def _accept(self, gang: Gang, gid: str, result: LaunchResult, lt_version: str) -> None:
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
                        image_id=i.image_id, launch_template_version=lt_version,
                        capacity_reservation_id=i.capacity_reservation_id,
                        private_ip=i.private_ip, state=InstanceState.RUNNING, launched_at=now)
            for node, i in pairs
        ])
        crash_point("launch:after_record")
        for node, inst in pairs:
            self._finish_node(node, inst, address=True, gid=gid)
        missing = list(gang.nodes[len(pairs):])
        images = sorted({i.image_id for _, i in pairs if i.image_id})
        self.store.update_gang(gid, status=GangStatus.LAUNCHED, fleet_id=result.fleet_id,
                               error_code=result.error_code or None,
                               error_message=result.error_message or None, updated_at=now)
        self.event("launched",
                   f"{compress([n for n, _ in pairs])}: "
                   + ", ".join(f"{n}={i.instance_id}" for n, i in pairs)
                   + f" (AMI {','.join(images) or '?'}, LT v{lt_version}"
                   + "".join(sorted({f", {i.instance_type} in {i.capacity_reservation_id}"
                                     for _, i in pairs if i.capacity_reservation_id}))
                   + ")",
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
        self.store.update_gang(gid, status=GangStatus.FAILED, error_code=code,
                               error_message=message[:2000], updated_at=self.clock())
        self.event("launch_failed",
                   f"{compress(list(gang.nodes))}: {code}: {message}; "
                   f"rolled back {len(to_kill)} instance(s)",
                   gang_id=gid, node=compress(list(gang.nodes)))
        self._power_down(list(gang.nodes), code, gid)

    def _power_down(self, nodes: list[str], code: str, gid: str) -> None:
        reason = reasons.reason(Why.LAUNCH_FAILED, code)
        try:
            self.slurm.power_down_force(nodes, reason)
            self.event("nodes_powered_down", f"{compress(nodes)}: {reason}",
                       node=compress(nodes), gang_id=gid)
        except SlurmError as e:
            self.event("slurm_update_failed", f"power down {compress(nodes)}: {e}",
                       node=compress(nodes), gang_id=gid)

    def _terminate(self, instance_ids: list[str], why: str) -> bool:
        crash_point("release:before_terminate")
        try:
            self.cloud.terminate(instance_ids)
        except CloudError as e:
            self.event("terminate_failed", f"{','.join(instance_ids)} ({why}): {e}")
            return False
        crash_point("release:after_terminate")
        self.store.mark_terminated(instance_ids, self.clock())
        self.event("terminated", f"{','.join(instance_ids)} ({why})")
        return True

    # --- release (suspend / resume-fail) -------------------------------------------
    def release(self, items: tuple[tuple[str, RequestKind, str], ...]
                ) -> tuple[int, list[str]]:
        """Terminate the nodes' instances. Returns the nodes released and the requests to keep
        pending: a terminate EC2 did not carry out is retried next pass, or the instance
        would run on, tracked, under a powered-down node."""
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
        if ids and not self._terminate(ids, f"{'/'.join(sorted(kinds))} of {compress(nodes)}"):
            return 0, [rid for _, _, rid in items]
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
        return len(nodes), []
