"""`slurmscale daemon`: APScheduler runs the reconcile pass every tick, and at once when a
hook pokes the local API (or when a batching window closes)."""

from __future__ import annotations

import logging
import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from slurmscale.cloud.ec2 import EC2Cloud
from slurmscale.cloud.sqs import SqsEventQueue
from slurmscale.config import Config
from slurmscale.daemon.api import ApiServer, resolve_uids
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.slurm.cli_backend import SlurmCLI
from slurmscale.store.repo import Store

log = logging.getLogger(__name__)

JOB_ID = "reconcile"


class Daemon:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.store = Store(cfg.store_url)
        events = (SqsEventQueue(cfg.aws, cfg.aws.interruption_queue_url)
                  if cfg.aws.interruption_queue_url else None)
        self.reconciler = Reconciler(cfg, self.store, SlurmCLI(cfg.slurm), EC2Cloud(cfg.aws),
                                     events=events)
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.stopping = threading.Event()
        # A poke that lands while a pass runs would be dropped by max_instances=1; remember it
        # and run again right after.
        self.poked = threading.Event()
        self.last_tick: dict[str, Any] = {}
        self.api: ApiServer | None = None

    def _poke(self, _body: Any) -> tuple[int, Any]:
        self.poked.set()
        self.run_soon(datetime.now(UTC))
        return 202, {"queued": True}

    def run_soon(self, when: datetime) -> None:
        job = self.scheduler.get_job(JOB_ID)
        if job is not None and (job.next_run_time is None or when < job.next_run_time):
            job.modify(next_run_time=when)

    def _tick(self) -> None:
        t0 = time.monotonic()
        self.poked.clear()
        try:
            res = self.reconciler.tick()
        except Exception:  # noqa: BLE001 - one failed pass must not end the loop
            log.exception("reconcile pass failed; retrying next tick")
            self.last_tick = {"ok": False, "at": datetime.now(UTC).isoformat()}
            return
        self.last_tick = {"ok": True, "at": datetime.now(UTC).isoformat(),
                          "seconds": round(time.monotonic() - t0, 3)}
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

    def run(self) -> None:
        # Signals first: a stop during start-up (the schema upgrade, say) must end cleanly.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stopping.set())
        self.store.upgrade()
        if self.stopping.is_set():
            self.store.close()
            return
        self.reconciler.spool.ensure()
        # The socket appears only now: hooks and tools that see it may rely on a daemon that
        # has its store ready.
        self.api = ApiServer(self.cfg.socket_path, {
            ("POST", "/v1/poke"): self._poke,
            ("GET", "/v1/health"): lambda _b: (200, {"ok": True, "last_tick": self.last_tick}),
        }, resolve_uids(self.cfg.daemon.api_users))
        self.scheduler.add_job(self._tick, "interval", id=JOB_ID,
                               seconds=self.cfg.daemon.tick_seconds, max_instances=1,
                               coalesce=True, next_run_time=datetime.now(UTC),
                               misfire_grace_time=None)
        self.scheduler.start()
        self.api.start()
        log.info("slurmscale daemon up: cluster %s, %d pool(s), socket %s, store %s",
                 self.cfg.cluster_name, len(self.cfg.pools), self.cfg.socket_path,
                 self.store.engine.url.render_as_string(hide_password=True))
        self.stopping.wait()
        log.info("stopping")
        self.api.stop()
        self.scheduler.shutdown(wait=True)
        self.store.close()
