"""`slurmscale daemon`: APScheduler runs the reconcile pass every tick, and at once when a
hook pokes the local API (or when a batching window closes)."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from slurmscale.cloud.ec2 import EC2Cloud
from slurmscale.cloud.sqs import SqsEventQueue
from slurmscale.config import Config, redact
from slurmscale.daemon.api import ApiServer, SocketInUse, resolve_uids
from slurmscale.daemon.leadership import identity, lease_for
from slurmscale.daemon.metrics import Metrics
from slurmscale.daemon.plan_view import SOURCE_DAEMON, plan_data, with_standings
from slurmscale.daemon.reconcile import Reconciler, utcnow
from slurmscale.gc_tuning import tune_gc
from slurmscale.report.compute import paid_now
from slurmscale.slurm.cli_backend import SlurmCLI
from slurmscale.store.repo import Store

log = logging.getLogger(__name__)

JOB_ID = "reconcile"


class Daemon:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        url = cfg.database_url()
        self.store = Store(url)
        self.lease = lease_for(url, cfg.cluster_name)
        # Built when this daemon starts to lead, dropped when it stops: what a reconciler
        # remembers between passes (backoff, evacuated instances) is only true for the
        # leader that saw it happen.
        self.reconciler: Reconciler | None = None
        self.metrics = Metrics() if cfg.metrics.port else None
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.stopping = threading.Event()
        # A poke that lands while a pass runs would be dropped by max_instances=1; remember it
        # and run again right after.
        self.poked = threading.Event()
        self.last_tick: dict[str, Any] = {}
        self.api: ApiServer | None = None
        self._socket_busy = False
        # the last pass's plan as `plan --json` prints it, made on the first ask after a pass
        self._plan_lock = threading.Lock()
        self._plan_json: tuple[object, bytes] | None = None  # (the pass's PassPlan, JSON)

    def _poke(self, _body: Any) -> tuple[int, Any]:
        self.poked.set()
        self.run_soon(datetime.now(UTC))
        return 202, {"queued": True}

    def _plan(self, _body: Any) -> tuple[int, Any]:
        """The plan of the last pass (`slurmscale plan`): what this daemon carried out, with
        every pending gang's standing completed from a sprio read now. Serialised once per
        pass: a second ask within the tick is a copy."""
        reconciler = self.reconciler
        if reconciler is None:
            return 503, {"error": "this daemon stands by: ask the leader, or use --live"}
        pp = reconciler.capacity.last
        if pp is None:
            return 503, {"error": "no capacity pass has completed yet"}
        with self._plan_lock:
            cached = self._plan_json
            if cached is None or cached[0] is not pp:
                full = with_standings(self.cfg, reconciler.slurm, pp)
                cached = self._plan_json = (pp, json.dumps(plan_data(full, SOURCE_DAEMON),
                                                           default=str).encode())
        return 200, cached[1]

    def run_soon(self, when: datetime) -> None:
        job = self.scheduler.get_job(JOB_ID)
        if job is not None and (job.next_run_time is None or when < job.next_run_time):
            job.modify(next_run_time=when)

    @property
    def role(self) -> str:
        return "leader" if self.reconciler is not None else "standby"

    def _new_reconciler(self) -> Reconciler:
        cfg = self.cfg
        events = (SqsEventQueue(cfg.aws, cfg.aws.interruption_queue_url)
                  if cfg.aws.interruption_queue_url else None)
        return Reconciler(cfg, self.store, SlurmCLI(cfg.slurm), EC2Cloud(cfg.aws),
                          events=events, metrics=self.metrics)

    def _lead(self) -> Reconciler | None:
        """The reconciler if this daemon leads now; None while it stands by."""
        if not self.lease.hold():
            if self.reconciler is not None:
                log.error("no longer the leader of cluster %s: standing by", self.cfg.cluster_name)
                self.reconciler = None
            return None
        if self.reconciler is None:
            # the schema is the leader's to upgrade: two daemons must not race a migration
            self.store.upgrade()
            self.reconciler = self._new_reconciler()
            self.reconciler.requests.spool.ensure()
            who = identity()
            log.warning("leading cluster %s as %s", self.cfg.cluster_name, who)
            self.store.add_event("leader_acquired", f"{who} leads cluster "
                                 f"{self.cfg.cluster_name}", utcnow())
        return self.reconciler

    def _tick(self) -> None:
        t0 = time.monotonic()
        self.poked.clear()
        if self.api is None and self._socket_busy:
            self._serve_api()
        try:
            reconciler = self._lead()
            if self.metrics is not None:
                self.metrics.leader.set(1 if reconciler is not None else 0)
            if reconciler is None:
                self.last_tick = {"ok": True, "at": datetime.now(UTC).isoformat(),
                                  "standby": True}
                return
            res = reconciler.tick()
        except Exception:  # noqa: BLE001 - one failed pass must not end the loop
            log.exception("reconcile pass failed; retrying next tick")
            self.last_tick = {"ok": False, "at": datetime.now(UTC).isoformat()}
            return
        self.last_tick = {"ok": True, "at": datetime.now(UTC).isoformat(),
                          "seconds": round(time.monotonic() - t0, 3)}
        if self.metrics is not None:
            self._export(reconciler, time.monotonic() - t0)
        if (res.drained or res.launched_gangs or res.failed_gangs or res.released_nodes
                or res.policy_actions or res.events):
            log.info("tick: %d new requests, %d gangs launched, %d failed, %d nodes released, "
                     "%d policy actions, %d EC2 events (%.2fs)", res.drained,
                     res.launched_gangs, res.failed_gangs, res.released_nodes,
                     res.policy_actions, res.events, time.monotonic() - t0)
        if self.poked.is_set():
            self.run_soon(datetime.now(UTC))
        if res.next_due is not None:
            self.run_soon(datetime.fromtimestamp(res.next_due, UTC) + timedelta(milliseconds=50))

    def _export(self, reconciler: Reconciler, seconds: float) -> None:
        m = self.metrics
        assert m is not None
        m.tick.observe(seconds)
        m.last_ok.set(time.time())
        m.pools(reconciler.capacity.pools_now)
        spent: dict[str, float] = {}
        for h in self.store.holds(("active", "releasing")):
            spent[h.pool] = spent.get(h.pool, 0.0) + h.spent_gpu_s
        m.holds(spent, [p.name for p in self.cfg.pools])
        if reconciler.reserved.ids:
            m.paid(u for u, _ in paid_now(self.store, datetime.now(UTC)))

    def run(self) -> None:
        # Signals first: a stop during start-up (the schema upgrade, say) must end cleanly.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stopping.set())
        try:
            self._lead()  # a leader upgrades the schema before its socket appears
        except Exception:  # noqa: BLE001 - the database may be down: the ticks retry
            log.exception("could not take up leadership at start; retrying every tick")
            self.reconciler = None
        if self.stopping.is_set():
            self._close()
            return
        self._serve_api()
        tune_gc()  # start-up's objects out of the collector's walks; fewer collections a pass
        self.scheduler.add_job(self._tick, "interval", id=JOB_ID,
                               seconds=self.cfg.daemon.tick_seconds, max_instances=1,
                               coalesce=True, next_run_time=datetime.now(UTC),
                               misfire_grace_time=None)
        self.scheduler.start()
        if self.metrics is not None:
            self.metrics.serve(self.cfg.metrics.address, self.cfg.metrics.port)
        log.info("slurmscale daemon up (%s): cluster %s, %d pool(s), socket %s, store %s",
                 self.role, self.cfg.cluster_name, len(self.cfg.pools), self.cfg.socket_path,
                 redact(self.store.engine.url.render_as_string(hide_password=True),
                        self.cfg.database_url()))
        self.stopping.wait()
        log.info("stopping")
        if self.api is not None:
            self.api.stop()
        self.scheduler.shutdown(wait=True)
        if self.metrics is not None:
            self.metrics.stop()
        self._close()

    def _serve_api(self) -> None:
        """Serve the local API unless another live daemon serves this socket path (a second
        daemon on the same config): then stand by without it, never taking or removing the
        other's socket, and try again each pass (it is free once that daemon is gone)."""
        try:
            self.api = ApiServer(self.cfg.socket_path, {
                ("POST", "/v1/poke"): self._poke,
                ("GET", "/v1/plan"): self._plan,
                ("GET", "/v1/health"): lambda _b: (200, {"ok": True, "role": self.role,
                                                         "last_tick": self.last_tick}),
            }, resolve_uids(self.cfg.daemon.api_users))
        except SocketInUse as e:
            if not self._socket_busy:
                log.error("%s: this daemon runs without its API until it is free (give each "
                          "daemon its own socket_path)", e)
            self._socket_busy = True
            return
        self._socket_busy = False
        self.api.start()

    def _close(self) -> None:
        self.lease.release()
        self.store.close()
