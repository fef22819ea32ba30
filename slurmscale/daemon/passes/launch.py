"""Launching a gang: its pool's warm instances started whole (warm_pool.py), or one
all-or-nothing CreateFleet decision (or several fleets for a gang too large for one),
recorded before and after the call so a daemon killed at any point neither launches twice
nor leaks; a gang that falls short is rolled back and its nodes powered down
with EC2's reason, so Slurm requeues the job."""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import NamedTuple

from slurmscale.audit import Kind
from slurmscale.cloud.errors import is_transient
from slurmscale.cloud.protocol import (
    TAG_CLUSTER,
    TAG_GANG,
    TAG_POOL,
    TAG_REQUEST,
    CloudError,
    FleetSpec,
)
from slurmscale.config import CapacityType, Config, Pool
from slurmscale.crashpoints import crash_point
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.executor import edits
from slurmscale.daemon.executor.edits import Edit
from slurmscale.daemon.executor.effects import GangUpdate, PhasesApart, Record, Say, Terminate
from slurmscale.daemon.metrics import Metrics
from slurmscale.daemon.passes.addresses import NodeAddresses
from slurmscale.daemon.passes.backoff import CapacityBackoff
from slurmscale.daemon.passes.fleets import GangFleets
from slurmscale.daemon.passes.reserved_capacity import STATE_DUE_TTL_S, ReservedCapacity
from slurmscale.daemon.passes.retry import EndpointRetry
from slurmscale.daemon.passes.warm_pool import WarmInstances
from slurmscale.gangs import gang_id
from slurmscale.hostlists import compress
from slurmscale.lifecycles import GangStatus, InstanceState
from slurmscale.model import Gang, LaunchResult
from slurmscale.policy.blocks import at as stamp
from slurmscale.policy.routing import (
    NO_RESERVED_FIT,
    Route,
    Routed,
    RouteKind,
    fleet_parts,
)
from slurmscale.slurm import reasons
from slurmscale.slurm.reasons import Why
from slurmscale.store.protocol import LaunchStore
from slurmscale.store.rows import GangRow, InstanceRow, LaunchPhasesRow, PreemptionCause

# a deferral's cause: a reservation due to start that EC2 did not yet report active
RESERVATION_STARTING = "ReservationStarting"
# a launch's code in the launches metric when the pool's warm pool started it whole
WARM_STARTED = "WarmStarted"


# `plan` shows where the gangs launched in this many seconds went, and why
ROUTES_SHOWN_S = 600.0


class Outcome(StrEnum):
    LAUNCHED = "launched"
    FAILED = "failed"  # rolled back, nodes powered down with the reason: the job requeues
    DEFERRED = "deferred"  # EC2 did not answer: the request stays pending, retried later


class Launch(NamedTuple):
    """What became of one gang's launch: `why` names the error of a failure or the cause of a
    deferral; `retry_at` (Unix s) is when a deferred launch is worth trying again - the
    request stays pending and the next pass is due by then."""

    outcome: Outcome
    why: str = ""
    retry_at: float | None = None


def client_token(gid: str) -> str:
    """EC2 ClientToken (<= 64 ASCII chars) derived from the gang id: a retried launch of the
    same gang is the same request to EC2, so it never launches twice."""
    return "slurmscale-" + hashlib.sha256(gid.encode()).hexdigest()[:40]


class GangLauncher:
    def __init__(self, ctx: PassContext[LaunchStore], addresses: NodeAddresses,
                 backoff: CapacityBackoff, reserved: ReservedCapacity, fleets: GangFleets,
                 ec2_retry: EndpointRetry, warm: WarmInstances,
                 metrics: Metrics | None = None) -> None:
        self.ctx = ctx
        self.warm = warm
        self.addresses = addresses
        self.backoff = backoff
        self.reserved = reserved
        self.fleets = fleets
        self.ec2_retry = ec2_retry
        self.metrics = metrics
        # the gangs routed in the last ROUTES_SHOWN_S, oldest first (what `plan` shows)
        self.routed: list[Routed] = []

    def routes(self, now: float) -> list[Routed]:
        """The gangs routed in the last ROUTES_SHOWN_S (what `plan` shows)."""
        return [r for r in self.routed if now - r.at < ROUTES_SHOWN_S]

    def _count_launch(self, pool: Pool, outcome: Outcome, code: str = "") -> None:
        if self.metrics is not None:
            self.metrics.launched(pool.name, pool.capacity_type.value, outcome.value, code)

    def _reclaimed(self, gang: Gang) -> int:
        """The most runs of one of the gang's jobs an interruptible reservation's owner took
        back (the interruption pass records each)."""
        if self.ctx.cfg.pool(gang.pool).capacity_reservations is None:
            return 0
        return max((sum(1 for p in self.ctx.store.preemptions(str(j))
                        if p.cause == PreemptionCause.RECLAIMED)
                    for j in gang.job_ids), default=0)

    def launch_gang(self, gang: Gang, give_up_at: float = float("inf")) -> Launch:
        """Launch one gang with one CreateFleet; keep all of it or none of it. EC2 not
        answering defers the launch (until `give_up_at`): an unanswered CreateFleet may have
        launched, so the gang stays `launching` and the retry first looks for its tag."""
        pool = self.ctx.cfg.pool(gang.pool)
        gid = gang_id(gang)
        token = client_token(gid)
        now = self.ctx.clock()
        nodes_expr = compress(list(gang.nodes))
        existing = self.ctx.store.get_gang(gid)
        if existing is not None and existing.status == GangStatus.FAILED:
            # failed and rolled back before a restart cut off failing its requests: they fail
            # now; launching again would be a second attempt Slurm never asked for
            return Launch(Outcome.FAILED, existing.error_code or "LaunchFailed")
        recovering = existing is not None and existing.status == GangStatus.LAUNCHING
        route = self.reserved.route(pool, gang, now.timestamp(), self._reclaimed(gang))
        self.routed = [*self.routes(now.timestamp()), Routed(
            now.timestamp(), pool.name, str(gang.job_ids[0]) if gang.job_ids else "",
            nodes_expr, route.kind, route.reason)]
        capacity = "" if route.kind is not RouteKind.NORMAL else \
            "spot" if pool.capacity_type is CapacityType.SPOT else "on-demand"
        spec = self.fleets.spec(pool, route, gid,
                                self.backoff.excluded(pool, capacity, now) if capacity
                                else frozenset())
        if existing is None:
            self.ctx.effects.apply([Record(GangRow(
                id=gid, pool=gang.pool, nodes=nodes_expr, size=gang.size,
                job_ids=json.dumps(list(gang.job_ids)),
                request_ids=json.dumps(list(gang.request_ids)), coalesced=gang.coalesced,
                status=GangStatus.LAUNCHING, client_token=token,
                launch_template_version=spec.launch_template_version,
                created_at=now, updated_at=now,
            ))])
        what = f"{_what(gang)} {nodes_expr}"
        # a launch cut off by a crash: whatever it launched (or started from the warm pool)
        # carries the gang's tag
        warm = self.warm.resume(pool, gang, gid) if recovering else None
        recovered = self._recover(gid) if recovering and warm is None else None
        if route.kind is RouteKind.REFUSED and recovered is None and warm is None:
            return self._refused(pool, gang, gid, route, what, nodes_expr, now.timestamp(),
                                 give_up_at)
        # stopped instances of the pool's warm pool first, the whole gang or none
        if warm is None and recovered is None:
            warm = self.warm.start(pool, gang, gid)
        if warm is None:
            asked = _request_text(self.ctx.cfg, pool, gang, route, spec)
            self.ctx.event(Kind.LAUNCH_REQUESTED, f"{what}: {asked}", gang_id=gid,
                           node=nodes_expr)
            crash_point("launch:before_fleet")
        result = recovered if warm is None else LaunchResult(warm, "", "", "")
        if result is None or (len(result.instances) < gang.size and not gang.coalesced):
            # (a recovered gang of several fleets: the daemon died between them; the parts
            # never sent are sent now, with their own ClientTokens)
            sent = self._send(pool, gang, gid, spec, result, what, nodes_expr, give_up_at)
            if isinstance(sent, Launch):
                return sent
            result = sent
        self.ec2_retry.answered()
        crash_point("launch:after_fleet")
        if len(result.instances) < gang.min_capacity:
            code = result.error_code or "PartialCapacity"
            msg = result.error_message or (
                f"EC2 gave {len(result.instances)} of {gang.size} instances")
            self._fail_gang(gang, gid, code, msg,
                            obtained=[i.instance_id for i in result.instances])
            self.backoff.launch_failed(pool.name, code, msg, self.ctx.clock(), result.errors,
                                       capacity)
            self._count_launch(pool, Outcome.FAILED, code)
            return Launch(Outcome.FAILED, code)
        self._accept(gang, gid, result, spec.launch_template_version, warm is not None)
        self._count_reserved(route, result)
        first = result.instances[0] if result.instances else None
        self.backoff.launched(pool.name, self.ctx.clock(), result.errors, capacity,
                              (first.instance_type, first.subnet_id) if first else None)
        self._count_launch(pool, Outcome.LAUNCHED, "" if warm is None else WARM_STARTED)
        return Launch(Outcome.LAUNCHED)

    def _refused(self, pool: Pool, gang: Gang, gid: str, route: Route, what: str,
                 nodes_expr: str, now: float, give_up_at: float) -> Launch:
        """No reserved capacity takes the gang whole (preference `only`, or a block pool)."""
        starting = self.reserved.starting(pool, now)
        if starting is not None and now < give_up_at:
            # read at the moment a block opens: refused on a read from just before
            # (failing it would power the nodes down and lose the block's first minutes)
            self.reserved.changed()
            self._count_launch(pool, Outcome.DEFERRED, RESERVATION_STARTING)
            self.ctx.event(Kind.LAUNCH_DEFERRED, f"{what}: {starting.id} was due to start at "
                           f"{stamp(starting.start or 0)} and EC2 last reported it "
                           f"{starting.state}; read again and retried next pass",
                           gang_id=gid, node=nodes_expr)
            # (the reservations are read again by then)
            return Launch(Outcome.DEFERRED, RESERVATION_STARTING, now + STATE_DUE_TTL_S)
        # (a recovered gang may find short the reserved capacity it took itself)
        self._fail_gang(gang, gid, NO_RESERVED_FIT, route.reason, obtained=[])
        self._count_launch(pool, Outcome.FAILED, NO_RESERVED_FIT)
        return Launch(Outcome.FAILED, NO_RESERVED_FIT)

    def _send(self, pool: Pool, gang: Gang, gid: str, spec: FleetSpec,
              have: LaunchResult | None, what: str, nodes_expr: str, give_up_at: float
              ) -> LaunchResult | Launch:
        """The gang's CreateFleet(s) (the parts not yet sent, where `have` some); or, where
        EC2 refused or did not answer, what became of the launch."""
        tags = {TAG_CLUSTER: self.ctx.cfg.cluster_name, TAG_POOL: pool.name, TAG_GANG: gid,
                TAG_REQUEST: gang.request_ids[0] if gang.request_ids else ""}
        sent = self.fleets.launch(pool, gang, gid, tags, spec,
                                  have.instances if have is not None else ())
        if isinstance(sent, LaunchResult):
            return sent
        code, at = sent.code, self.ctx.clock().timestamp()
        if is_transient(code) and at < give_up_at:
            delay = self.ec2_retry.failed(at)
            self._count_launch(pool, Outcome.DEFERRED, code)
            self.ctx.event(Kind.LAUNCH_DEFERRED,
                           f"{what}: EC2 did not answer ({code}); retrying in "
                           f"{delay:.0f}s, giving up in {give_up_at - at:.0f}s",
                           gang_id=gid, node=nodes_expr)
            return Launch(Outcome.DEFERRED, code, self.ec2_retry.until)
        self._fail_gang(gang, gid, code, sent.error, obtained=[])
        self.backoff.launch_failed(pool.name, code, sent.error, self.ctx.clock())
        self._count_launch(pool, Outcome.FAILED, code)
        return Launch(Outcome.FAILED, code)

    def _count_reserved(self, route: Route, result: LaunchResult) -> None:
        """Gangs routed later this pass must not count the capacity this one took."""
        if route.kind is RouteKind.RESERVED:
            self.reserved.launched(route.reservation_ids, len(result.instances))

    def _recover(self, gid: str) -> LaunchResult | None:
        """This gang was being launched when the daemon died: whatever its CreateFleet
        launched carries its gang tag. Take those instead of launching again (EC2's
        ClientToken would make a repeat idempotent too, but not every endpoint honours it)."""
        try:
            found = self.ctx.cloud.launched_with({TAG_CLUSTER: self.ctx.cfg.cluster_name,
                                              TAG_GANG: gid})
        except CloudError as e:
            self.ctx.event(Kind.CLOUD_ERROR,
                           f"looking for instances of interrupted launch {gid}: {e}", gang_id=gid)
            return None
        if not found:
            return None
        self.ctx.event(Kind.LAUNCH_RECOVERED, f"gang {gid}: an earlier attempt launched "
                   f"{', '.join(i.instance_id for i in found)}; taking them", gang_id=gid)
        return LaunchResult(instances=found, error_code="", error_message="", fleet_id="")

    def _accept(self, gang: Gang, gid: str, result: LaunchResult, lt_version: str,
                warm: bool = False) -> None:
        """The instances recorded with their nodes (before anything else: a daemon killed
        after it finishes them from the store), then tagged and addressed, the gang
        launched, and any node EC2 gave no instance powered down with EC2's reason."""
        pool = self.ctx.cfg.pool(gang.pool)
        now = self.ctx.clock()
        pairs = list(zip(gang.nodes, sorted(result.instances, key=lambda i: i.instance_id),
                         strict=False))
        assigned = {i.instance_id for _, i in pairs}
        surplus = tuple(i.instance_id for i in result.instances
                        if i.instance_id not in assigned)
        asked = dict(zip(gang.nodes, gang.requested_s, strict=False))
        self.ctx.effects.apply([
            # (a warm start: the instances' earlier launches keep their own rows)
            *([PhasesApart(tuple(i.instance_id for _, i in pairs))] if warm else []),
            *([Terminate(surplus, f"surplus instances of {gid}")] if surplus else []),
            Record(tuple(
                InstanceRow(instance_id=i.instance_id, node=node, pool=pool.name, gang_id=gid,
                            instance_type=i.instance_type, lifecycle=i.lifecycle,
                            image_id=i.image_id, launch_template_version=lt_version,
                            capacity_reservation_id=i.capacity_reservation_id,
                            subnet_id=i.subnet_id, private_ip=i.private_ip,
                            state=InstanceState.RUNNING, launched_at=now)
                for node, i in pairs)),
            # (where its time to run begins: launch_phases.py carries it on)
            Record(tuple(LaunchPhasesRow(
                instance_id=i.instance_id, node=node, pool=pool.name,
                job_nodes=1 if gang.coalesced else gang.size, requested_s=asked.get(node),
                answered_s=now.timestamp(), warm=warm) for node, i in pairs))])
        crash_point("launch:after_record")
        missing = list(gang.nodes[len(pairs):])
        images = sorted({i.image_id for _, i in pairs if i.image_id})
        self.ctx.effects.apply([
            *self.addresses.finish(pairs, address=True, gid=gid),
            GangUpdate(gid, dict(status=GangStatus.LAUNCHED, fleet_id=result.fleet_id,
                                 error_code=result.error_code or None,
                                 error_message=result.error_message or None, updated_at=now)),
            Say(Kind.LAUNCHED,
                f"{compress([n for n, _ in pairs])}: "
                + ", ".join(f"{n}={i.instance_id}" for n, i in pairs)
                + f" (AMI {','.join(images) or '?'}, LT v{lt_version}"
                + "".join(sorted({f", {i.instance_type} in {i.capacity_reservation_id}"
                                  for _, i in pairs if i.capacity_reservation_id}))
                + ")",
                node=compress([n for n, _ in pairs]), gang=gid),
            *([self._power_down(missing, result.error_code or "PartialCapacity", gid)]
              if missing else [])])

    def _fail_gang(self, gang: Gang, gid: str, code: str, message: str,
                   obtained: list[str]) -> None:
        """All or nothing: terminate what we got (and anything EC2 launched under this gang's
        tag that the response did not list), then tell Slurm so the job requeues."""
        strays: list[str] = []
        try:
            strays = [i.instance_id for i in self.ctx.cloud.find(
                {TAG_CLUSTER: self.ctx.cfg.cluster_name, TAG_GANG: gid})]
        except CloudError as e:
            self.ctx.event(Kind.CLOUD_ERROR, f"listing instances of failed gang {gid}: {e}",
                       gang_id=gid)
        to_kill = tuple(sorted(set(obtained) | set(strays)))
        nodes = compress(list(gang.nodes))
        self.ctx.effects.apply([
            *([Terminate(to_kill, f"rollback of gang {gid}")] if to_kill else []),
            GangUpdate(gid, dict(status=GangStatus.FAILED, error_code=code,
                                 error_message=message[:2000], updated_at=self.ctx.clock())),
            Say(Kind.LAUNCH_FAILED, f"{nodes}: {code}: {message}; rolled back "
                f"{len(to_kill)} instance(s)", node=nodes, gang=gid),
            self._power_down(list(gang.nodes), code, gid)])

    @staticmethod
    def _power_down(nodes: list[str], code: str, gid: str) -> Edit:
        reason = reasons.reason(Why.LAUNCH_FAILED, code)
        return edits.power_down(nodes, reason, gang=gid, said=(
            Kind.NODES_POWERED_DOWN, f"{compress(nodes)}: {reason}"))


def _what(gang: Gang) -> str:
    return f"job {gang.job_ids[0]} gang" if gang.job_ids else "batch of single nodes"


def _request_text(cfg: Config, pool: Pool, gang: Gang, route: Route, spec: FleetSpec) -> str:
    """What the launch_requested event says is asked of EC2, and why there."""
    parts = fleet_parts(gang.size, cfg.aws.max_instances_per_fleet)
    where = (f"reserved: {route.reason}" if route.kind is RouteKind.RESERVED
             else pool.capacity_type.value + (f": {route.reason}"
                                              if pool.capacity_reservations else ""))
    return (f"CreateFleet instant x{gang.size}"
            + (f" in {len(parts)} fleets ({'+'.join(map(str, parts))})" if len(parts) > 1
               else "")
            + f" (min {gang.min_capacity}, {where}, {','.join(spec.instance_types)}, "
            f"LT v{spec.launch_template_version}"
            + (f", placement group {spec.placement_group}" if spec.placement_group else "")
            + ")")
