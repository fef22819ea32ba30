"""Prometheus metrics (`metrics.port`; off by default). One registry per daemon, so tests can
run several. Names and labels are kept few and stable: a Grafana dashboard
(docs/grafana-dashboard.json) is built on them.

Gauges are set after every pass from what the pass read (pools, holds); counters and the
histograms are fed where the thing happens (a launch, a job's first start, a pass's end).
`slurmscale_events_total{kind}` counts every audit-log event, so any decision or failure the
audit log shows (node_evacuated, job_requeued, leak_terminated, ...) can be graphed or alerted
on without a metric of its own."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.exposition import generate_latest

from slurmscale.audit import Kind
from slurmscale.daemon.passes.ledger import PoolNow
from slurmscale.policy.health import Cause
from slurmscale.policy.limit_use import LimitUse
from slurmscale.report.compute import PaidUsage

log = logging.getLogger(__name__)

WAIT_BUCKETS = (30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400)
TICK_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
PHASE_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 180, 300, 600, 900, 1800, 3600)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self._demand(r)
        self._passes(r)
        self._capacity(r)
        self._server: Any = None
        # every audit kind from the start, at 0: `increase(...{kind=...}[1h]) > 0` sees the
        # first event of a kind after a restart (a series born at 1 has no increase)
        for kind in Kind:
            self.events.labels(kind.value)

    def _demand(self, r: CollectorRegistry) -> None:
        """The queue, the nodes, the launches and the jobs' starts, and the audit log."""
        self.pending_gpu_hours = Gauge("slurmscale_pending_gpu_hours",
                                       "GPU-hours of jobs pending for capacity", ["pool"],
                                       registry=r)
        self.pending_gpus = Gauge("slurmscale_pending_gpus", "GPUs pending jobs ask for",
                                  ["pool"], registry=r)
        self.pending_gangs = Gauge("slurmscale_pending_gangs",
                                   "pending jobs of two or more nodes", ["pool"], registry=r)
        self.nodes = Gauge("slurmscale_nodes", "nodes by state (up = not powered down)",
                           ["pool", "state"], registry=r)
        self.launches = Counter("slurmscale_launches", "gang launches (one CreateFleet each; "
                                "code WarmStarted: started whole from the warm pool)",
                                ["pool", "capacity_type", "result", "code"], registry=r)
        self.gang_start = Histogram("slurmscale_gang_time_to_start_seconds",
                                    "submission to first start of jobs of 2+ nodes",
                                    ["pool"], buckets=WAIT_BUCKETS, registry=r)
        self.job_start = Histogram("slurmscale_job_time_to_start_seconds",
                                   "submission to first start, every job", ["pool"],
                                   buckets=WAIT_BUCKETS, registry=r)
        self.events = Counter("slurmscale_events", "audit-log events by kind", ["kind"],
                              registry=r)
        self.launch_phases = Histogram(
            "slurmscale_launch_phase_seconds", "each launch's time to run, phase by phase "
            "(docs/operations.md: Time to run), once its node has run its first job",
            ["pool", "kind", "phase"], buckets=PHASE_BUCKETS, registry=r)
        self.hold_gpu_hours = Gauge("slurmscale_reservation_hold_gpu_hours",
                                    "idle GPU-hours spent by active reservation holds",
                                    ["pool"], registry=r)
        self.limit_use = Gauge("slurmscale_reservation_limit_use",
                               "the share of their time limits jobs run, as the hold rule "
                               "uses it (reservations.limit_use)", ["pool"], registry=r)
        self.limit_use_jobs = Gauge("slurmscale_reservation_limit_use_jobs",
                                    "ended jobs limit_use: auto was learned from",
                                    ["pool"], registry=r)

    def _passes(self, r: CollectorRegistry) -> None:
        """The reconcile passes: their time, their waits, their failures, the lead."""
        self.tick = Histogram("slurmscale_tick_duration_seconds", "one reconcile pass",
                              buckets=TICK_BUCKETS, registry=r)
        self.phase_s = Counter("slurmscale_pass_phase_seconds",
                               "seconds spent in each phase of the reconcile pass", ["phase"],
                               registry=r)
        self.wait_s = Counter("slurmscale_pass_wait_seconds",
                              "seconds the passes waited on each outside (Slurm, EC2, store, "
                              "...; summed over threads)", ["on"], registry=r)
        self.last_ok = Gauge("slurmscale_last_successful_reconcile_timestamp_seconds",
                             "Unix time the last pass completed with every EC2 call answered",
                             registry=r)
        self.quarantined = Counter("slurmscale_store_rows_quarantined",
                                   "store rows skipped because they cannot be decoded",
                                   ["table"], registry=r)
        self.ec2_failures = Counter("slurmscale_ec2_call_failures",
                                    "EC2 calls a pass made that failed (the pass went on)",
                                    ["call"], registry=r)
        self.failed_in_a_row = Gauge("slurmscale_reconcile_failures_in_a_row",
                                     "passes that failed since the last one that completed",
                                     registry=r)
        self.leader = Gauge("slurmscale_leader", "1 while this daemon leads its cluster",
                            registry=r)

    def _capacity(self, r: CollectorRegistry) -> None:
        """Paid capacity, node health and replacements, the capacity backoff."""
        self.reserved = Gauge("slurmscale_capacity_reservation_instances",
                              "a capacity reservation's or block's instances (total, available)"
                              " as EC2 last reported them", ["reservation", "pool", "kind",
                                                             "count"], registry=r)
        self.paid_hours = Gauge("slurmscale_paid_node_hours",
                                "node-hours paid and used in a capacity reservation (last 24h)"
                                " or block (since its start)", ["reservation", "pool", "kind",
                                                                "measure"], registry=r)
        self.block_window = Gauge("slurmscale_capacity_block_window_timestamp_seconds",
                                  "a Capacity Block's start and end (Unix time)",
                                  ["reservation", "pool", "edge"], registry=r)
        self.replacements = Counter("slurmscale_node_replacements",
                                    "unhealthy nodes replaced (jobs requeued, instance "
                                    "terminated)", ["pool", "cause"], registry=r)
        self.boot_failures = Counter("slurmscale_boot_failures",
                                     "launched nodes that failed to join Slurm, by the "
                                     "bootstrap's cause and what followed (replaced: a fresh "
                                     "instance; gave-up: powered down, job requeued)",
                                     ["pool", "cause", "outcome"], registry=r)
        self.left = Counter("slurmscale_nodes_left_drained",
                            "nodes replaced too often, left drained for an admin", ["pool"],
                            registry=r)
        self.unhealthy_gpu_hours = Counter("slurmscale_unhealthy_gpu_hours",
                                           "GPU-hours of nodes from detected unhealthy to "
                                           "replaced", ["pool"], registry=r)
        self.replacement_seconds = Histogram("slurmscale_node_replacement_seconds",
                                             "detected unhealthy to back in service",
                                             ["pool"], buckets=WAIT_BUCKETS, registry=r)
        self.warm = Gauge("slurmscale_warm_instances", "stopped instances a pool's warm pool "
                          "keeps for its next resumes (warm_pool)", ["pool"], registry=r)
        self.backoff_s = Gauge("slurmscale_capacity_backoff_seconds",
                               "seconds until a pool out of capacity is tried again (0: not "
                               "backed off)", ["pool"], registry=r)

    def preset(self, pools: Iterable[tuple[str, str]]) -> None:
        """The pools' (name, capacity type) labelled counters at 0, for the same reason."""
        for pool, capacity_type in pools:
            for outcome in ("launched", "failed", "deferred"):
                self.launches.labels(pool, capacity_type, outcome, "")
            for cause in Cause:
                self.replacements.labels(pool, cause.value)
            self.backoff_s.labels(pool).set(0)

    def warm_instances(self, counts: Mapping[str, int]) -> None:
        for pool, n in counts.items():
            self.warm.labels(pool).set(n)

    def backoff(self, until_s: dict[str, float], pools: Iterable[str], now_s: float) -> None:
        for pool in pools:
            self.backoff_s.labels(pool).set(max(0.0, until_s.get(pool, 0.0) - now_s))

    def pass_times(self, phases: Mapping[str, float], waits: Mapping[str, float]) -> None:
        for phase, s in phases.items():
            self.phase_s.labels(phase).inc(s)
        for on, s in waits.items():
            self.wait_s.labels(on).inc(s)

    def serve(self, address: str, port: int) -> None:
        server = start_http_server(port, addr=address, registry=self.registry)
        self._server = server[0] if isinstance(server, tuple) else server
        log.info("metrics on http://%s:%d/metrics", address, port)

    @property
    def serving(self) -> bool:
        return self._server is not None

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None

    def text(self) -> str:
        return generate_latest(self.registry).decode()

    # --- fed by the daemon ---------------------------------------------------------------
    def event(self, kind: str) -> None:
        self.events.labels(kind).inc()

    def launched(self, pool: str, capacity_type: str, result: str, code: str = "") -> None:
        self.launches.labels(pool, capacity_type, result, code).inc()

    def job_started(self, pool: str, nodes: int, wait_s: float) -> None:
        self.job_start.labels(pool).observe(wait_s)
        if nodes >= 2:
            self.gang_start.labels(pool).observe(wait_s)

    def launch_phase(self, pool: str, kind: str, phase: str, seconds: float) -> None:
        self.launch_phases.labels(pool, kind, phase).observe(seconds)

    def replaced(self, pool: str, cause: str, gpu_hours: float) -> None:
        self.replacements.labels(pool, cause).inc()
        self.unhealthy_gpu_hours.labels(pool).inc(gpu_hours)

    def boot_failed(self, pool: str, cause: str, outcome: str) -> None:
        self.boot_failures.labels(pool, cause, outcome).inc()

    def left_drained(self, pool: str) -> None:
        self.left.labels(pool).inc()

    def replacement_time(self, pool: str, seconds: float) -> None:
        self.replacement_seconds.labels(pool).observe(seconds)

    def pools(self, current: Iterable[PoolNow]) -> None:
        for p in current:
            self.pending_gpu_hours.labels(p.pool).set(p.pending_gpu_hours)
            self.pending_gpus.labels(p.pool).set(p.pending_gpus)
            self.pending_gangs.labels(p.pool).set(p.pending_gangs)
            for state, n in (("up", p.nodes_up), ("busy", p.nodes_busy),
                             ("booting", p.nodes_booting), ("held", p.nodes_held),
                             ("idle", p.nodes_idle)):
                self.nodes.labels(p.pool, state).set(n)

    def paid(self, usage: Iterable[PaidUsage]) -> None:
        for u in usage:
            self.reserved.labels(u.id, u.pool, u.kind, "total").set(u.total)
            self.reserved.labels(u.id, u.pool, u.kind, "available").set(u.available)
            self.paid_hours.labels(u.id, u.pool, u.kind, "paid").set(u.paid_node_hours)
            self.paid_hours.labels(u.id, u.pool, u.kind, "used").set(u.used_node_hours)
            if u.kind == "capacity-block" and u.start and u.end:
                self.block_window.labels(u.id, u.pool, "start").set(
                    datetime.fromisoformat(u.start).timestamp())
                self.block_window.labels(u.id, u.pool, "end").set(
                    datetime.fromisoformat(u.end).timestamp())

    def holds(self, spent_gpu_s_by_pool: dict[str, float], pools: Iterable[str]) -> None:
        for pool in pools:
            self.hold_gpu_hours.labels(pool).set(spent_gpu_s_by_pool.get(pool, 0.0) / 3600)

    def limit_uses(self, uses: Mapping[str, LimitUse]) -> None:
        for pool, u in uses.items():
            self.limit_use.labels(pool).set(u.value)
            self.limit_use_jobs.labels(pool).set(u.jobs)
