"""One reconcile pass, made of passes with one job each, in this order:

1. requests (`requests.py`): the hooks' spool into the store, then Slurm's resume, suspend
   and resume-fail requests carried out (gangs launched by `launch.py`);
2. interruptions (`interruptions.py`): EC2's spot events and AWS Health's scheduled changes;
3. the instance sweep (`sweep.py`): EC2 compared with the store and Slurm (vanished
   instances, leaks, nodes up with no instance);
4. boots (`boots.py`): nodes whose instance failed to join Slurm (its bootstrap tagged the
   failure, or no slurmd after `join_timeout_s`) get a fresh instance while Slurm waits;
   health (`health.py`): unhealthy nodes replaced (EC2 status checks, scheduled events,
   the site's health check, nodes slurmctld has DOWN or not responding);
5. capacity blocks (`blocks.py`) and node upkeep: drains placed as time passes (backoff,
   interruptions) and node addresses (`addresses.py`);
6. capacity (`capacity.py`): the policy's decisions carried out (pool sizes, holds);
7. keep-up (`keep_up.py`): the nodes it keeps idle on purpose listed in Slurm's
   SuspendExcNodes (Slurm 23.02+), so SuspendTime does not power them down.

Order of every side effect: record the intent, call the cloud or Slurm, record the outcome.
No network call happens inside a database transaction. Given a `Fence`, every call to EC2,
Slurm and the event queue is made only while the lease is still held (`fence.py`).
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from dataclasses import replace
from types import TracebackType

from slurmscale import timeframe
from slurmscale.audit import Kind
from slurmscale.cloud.protocol import CloudProvider, DnsZone, EventQueue
from slurmscale.config import Config
from slurmscale.daemon.call_failures import CallFailures, watched
from slurmscale.daemon.context import Clock, PassContext, TickResult, host_now, utcnow
from slurmscale.daemon.fence import Fence, fenced
from slurmscale.daemon.metrics import Metrics
from slurmscale.daemon.pass_times import PassTimes
from slurmscale.daemon.passes.addresses import NodeAddresses
from slurmscale.daemon.passes.backoff import CapacityBackoff
from slurmscale.daemon.passes.blocks import BlockPass
from slurmscale.daemon.passes.boots import BootPass
from slurmscale.daemon.passes.capacity import CapacityPass
from slurmscale.daemon.passes.fleets import GangFleets
from slurmscale.daemon.passes.health import HealthPass
from slurmscale.daemon.passes.interruptions import InterruptionPass
from slurmscale.daemon.passes.keep_up import KeepUpPass
from slurmscale.daemon.passes.launch import GangLauncher, client_token
from slurmscale.daemon.passes.launch_phases import LaunchPhasePass
from slurmscale.daemon.passes.ledger import Ledger
from slurmscale.daemon.passes.node_names import NodeNamePass
from slurmscale.daemon.passes.requests import RequestPass
from slurmscale.daemon.passes.reserved_capacity import ReservedCapacity
from slurmscale.daemon.passes.retry import EndpointRetry
from slurmscale.daemon.passes.sweep import InstanceSweep
from slurmscale.daemon.passes.topology import TopologyPass
from slurmscale.daemon.passes.warm_pool import WarmInstances
from slurmscale.lifecycles import ChangedMeanwhile
from slurmscale.model import SlurmNode
from slurmscale.policy.model import ActionKind
from slurmscale.slurm.node_writes import NodeWrites
from slurmscale.slurm.protocol import SlurmClient, SlurmError
from slurmscale.spool import RequestSource
from slurmscale.store.protocol import ReconcileStore
from slurmscale.store.rows import InstanceRow

log = logging.getLogger(__name__)

__all__ = ["Reconciler", "TickResult", "utcnow"]


class Reconciler:
    """The one place the passes are built and ordered. The daemon gives it the SQL store,
    `scontrol`/`squeue`, EC2 and the hooks' spool directory; the simulator
    (`sim/daemon.py`) gives it `MemoryStore`, `SimSlurm`, `SimEc2` and the requests its
    simulated hooks made (`spool`), and calls the same `tick`."""

    def __init__(self, cfg: Config, store: ReconcileStore, slurm: SlurmClient,
                 cloud: CloudProvider, clock: Clock = utcnow, queue: EventQueue | None = None,
                 metrics: Metrics | None = None, spool: RequestSource | None = None,
                 fence: Fence | None = None, dns_zone: DnsZone | None = None,
                 times: PassTimes | None = None) -> None:
        # where a pass's time goes: its phases always, the waits on the outside if asked
        self.times = times if times is not None else PassTimes()
        if times is not None:
            slurm, cloud = times.timed(slurm, "Slurm"), times.timed(cloud, "EC2")
            store = times.timed(store, "store")
            queue = None if queue is None else times.timed(queue, "the event queue")
        if fence is not None:  # the outside is called only while this daemon leads
            slurm, cloud = fenced(slurm, fence, "Slurm"), fenced(cloud, fence, "EC2")
            queue = None if queue is None else fenced(queue, fence, "the event queue")
        self.cloud_failures = CallFailures()  # EC2 calls that failed, taken once a pass
        cloud = watched(cloud, self.cloud_failures, "EC2")
        self.cfg = cfg
        self.metrics = metrics
        self.store = store
        # every pass shares it: the capacity pass re-reads only the nodes the others wrote
        self.slurm = slurm = NodeWrites(slurm)
        self.cloud = cloud
        self.clock = clock
        # the audit log's times: the host's clock (the timers' steady time lags it after a
        # step); a simulated or test clock is both
        self.recorded_at: Clock = host_now if clock is utcnow else clock
        zone: DnsZone | None = None
        if cfg.dns is not None:  # (its own fence and failure count: a Route 53 call is AWS's)
            if dns_zone is None:
                raise ValueError("dns: is configured but no DNS zone was given (the daemon's "
                                 "service builds the Route 53 one)")
            zone = dns_zone
            if times is not None:
                zone = times.timed(zone, "Route 53")
            if fence is not None:
                zone = fenced(zone, fence, "Route 53")
            zone = watched(zone, self.cloud_failures, "Route 53")
        ctx = PassContext(cfg, store, slurm, cloud, clock, self.event, queue, zone)
        self.capacity = CapacityPass(ctx, Ledger(
            cfg, store, metrics.job_started if metrics else None, slurm.ended_jobs))
        self.reserved = ReservedCapacity(ctx)
        # (an offering's AZ is its subnet's, read with the reservations' once)
        self.backoff = CapacityBackoff(ctx, self.reserved.zones)
        self.interruptions = InterruptionPass(ctx, self.backoff, self.reserved)
        fleets = GangFleets(ctx, client_token)
        self.addresses = NodeAddresses(ctx)
        # (its delay on the store: a standby waits out the leader's)
        ec2_retry = EndpointRetry(base_s=max(2.0, cfg.daemon.tick_seconds), store=store)
        self.warm = WarmInstances(ctx)
        self.launcher = GangLauncher(ctx, self.addresses, self.backoff, self.reserved, fleets,
                                     ec2_retry, self.warm, metrics)
        self.requests = RequestPass(ctx, self.launcher, self.addresses, ec2_retry, spool)
        self.sweep = InstanceSweep(ctx, self.interruptions, fleets, self.warm)
        self.names = NodeNamePass(ctx) if zone is not None else None
        self.topology = TopologyPass(ctx) if cfg.topology is not None else None
        self.boots = BootPass(ctx, fleets, self.addresses, metrics)
        self.health = HealthPass(ctx, self.interruptions, metrics)
        self.blocks = BlockPass(ctx, self.reserved)
        self.keep_up = KeepUpPass(ctx)
        self.launch_phases = LaunchPhasePass(ctx, metrics)
        self.quarantine_reported: set[tuple[str, str]] = set()
        self.steps_reported = len(timeframe.FRAME.eras)

    def event(self, kind: Kind, message: str, *, node: str | None = None,
              request_id: str | None = None, gang_id: str | None = None) -> None:
        log.info("%s: %s", kind, message)
        self.store.add_event(kind, message, self.recorded_at(), node=node, request_id=request_id,
                             gang_id=gang_id)
        if self.metrics is not None:
            self.metrics.event(kind)

    def tick(self) -> TickResult:
        """Slurm's requests first (a resume is a job waiting), then the capacity policy."""
        res = TickResult()
        phase = self._step
        nodes: list[SlurmNode] | None = None
        active: list[InstanceRow] | None = None
        p = None
        self.cloud_failures.take()  # (a pass cut off before its end left its own)
        self._report_steps()
        with phase("requests"):
            res.drained = self.requests.drain_spool()
            self.requests.handle_requests(res)
        # interruptions before the capacity pass: a node about to vanish is not capacity
        with phase("interruptions"):
            res.ec2_messages = self.interruptions.run(self.clock())
            res.queue_error = self.interruptions.queue_error
        with phase("sweep"):
            try:
                nodes = self.slurm.nodes()
            except SlurmError:
                nodes = None  # the capacity pass reports an unreachable Slurm
            active = self.sweep.run(nodes)
        if self.names is not None and active is not None:
            with phase("names"):
                self.names.run(active, self.clock())
        if self.topology is not None and active is not None:
            with phase("topology"):
                self.topology.run(active, self.clock().timestamp())
        with phase("reservations"):
            # the reservations' state and free count (one cached call): status, plan, metrics
            self.reserved.reservations(self.clock().timestamp())
        if nodes is not None:
            with phase("boots"):
                self.boots.run(nodes, active, self.sweep.seen)
            with phase("health"):
                self.health.run(nodes, active)
            with phase("blocks"):
                self.blocks.run(nodes, self.clock())
            with phase("upkeep"):
                self._node_upkeep(nodes, active)
        with phase("capacity"):
            p = self.capacity.run(self.clock(), self._nodes_now(nodes))
        if p is not None:
            # (what `plan` shows: where the gangs of the last minutes went, and why)
            p = self.capacity.last = replace(p, routes=tuple(
                self.launcher.routes(self.clock().timestamp())))
            with phase("keep_up"):
                self.keep_up.run(p)
            res.policy_actions = len(p.holds.actions) + sum(
                1 for a in p.capacity.actions if a.kind is not ActionKind.KEEP)
        if nodes is not None and active is not None:
            # (after the capacity pass: its ledger saw this pass's job starts)
            ledger = self.capacity.ledger
            with phase("launch_phases"):
                self.launch_phases.run(nodes, active, self.sweep.seen,
                                       ledger.started_on if ledger else {}, self.clock())
        self._report_quarantine()
        retry = self.requests.ec2_retry
        if self.cloud_failures.all_answered("EC2") and retry.waiting(self.clock().timestamp()):
            # EC2 is back (the sweep's read answered, nothing failed): a launch deferred while
            # it was away goes in the next pass, not at its delay's end (60 s at most)
            retry.answered()
            res.next_due = self.clock().timestamp()
        res.cloud_failures = self.cloud_failures.take()
        res.phase_seconds, res.wait_seconds = self.times.take()
        return res

    def _step(self, name: str) -> _Step:
        return _Step(self.times.phase(name), name)

    def _report_steps(self) -> None:
        """A step of the host's clock: recorded once (the timers are unmoved by it)."""
        self.clock()
        eras = timeframe.FRAME.eras
        for era in eras[self.steps_reported:]:
            self.event(Kind.CLOCK_STEP, f"the host's clock stepped (wall - steady now "
                       f"{era.offset:+.0f}s): slurmscale's timers run on unmoved; Slurm's times "
                       "are read into its steady time; restart the daemon to take the host's "
                       "time for its records")
        self.steps_reported = len(eras)

    def _report_quarantine(self) -> None:
        """Store rows the reads skipped because they cannot be decoded: an event and a
        metric once per row (they stay skipped; `status` lists them)."""
        for (table, key), why in sorted(self.store.quarantined.items()):
            if (table, key) in self.quarantine_reported:
                continue
            self.quarantine_reported.add((table, key))
            self.event(Kind.ROW_QUARANTINED, f"{table} row {key} cannot be read ({why}): "
                       "skipped by every pass until repaired or deleted")
            if self.metrics is not None:
                self.metrics.quarantined.labels(table).inc()

    def _nodes_now(self, read: list[SlurmNode] | None) -> list[SlurmNode] | None:
        """This pass's read as the passes since have left the nodes (None: read again)."""
        if read is None:
            return None
        try:
            return self.slurm.current(read)
        except SlurmError:
            return None  # the capacity pass reads again and reports what it finds

    def _node_upkeep(self, nodes: list[SlurmNode], active: list[InstanceRow] | None) -> None:
        """Drains slurmscale placed and must lift (or place) as time passes: nodes back from
        an interruption, pools whose capacity TTL started or ended; and node addresses.
        `active`: the instances the sweep read this pass (None: read them here)."""
        self.interruptions.return_powered_down_nodes(nodes)
        self.backoff.upkeep(nodes, self.clock())
        self.addresses.reset_stale(nodes)
        self.addresses.keep(nodes, self.store.active_instances() if active is None else active)


class _Step:
    """One phase of a pass, timed; a race it lost ends that phase only. A write conditioned
    on the state it read (`WHERE state = old`) that finds the row moved meanwhile (an admin's
    `reservations release` between the daemon's read and its write) raises ChangedMeanwhile,
    having written nothing: the phase's item is decided again from what is there next pass,
    and the rest of this pass goes on (before: the pass aborted with a traceback)."""

    __slots__ = ("phase", "name")

    def __init__(self, phase: AbstractContextManager[None], name: str) -> None:
        self.phase, self.name = phase, name

    def __enter__(self) -> None:
        self.phase.__enter__()

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> bool:
        self.phase.__exit__(kind, e, tb)
        if kind is not None and issubclass(kind, ChangedMeanwhile):
            log.warning("%s: %s; it is decided again next pass", self.name, e)
            return True
        return False
