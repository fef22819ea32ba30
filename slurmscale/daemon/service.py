"""`slurmscale daemon`: the reconcile pass runs on one worker thread, woken every tick, at once
when a hook pokes the local API, and when a pass asks to run again at a time of its own (a
batching window closing).

Every time here is the steady (monotonic) clock's: the tick is due `daemon.tick_seconds` after
the last one was, whatever the wall clock does. (An interval timer on the wall clock, as
APScheduler 3's is, waits out a step back of an hour before its next tick: no interruption
handled, no release, no sweep for that hour. The pass itself reads a step of the host's clock
and records it as `clock_step`: slurmscale/timeframe.py.)

Wake-ups coalesce: a pass takes every wish for one made before it started, so however many
pokes land while a pass runs, one more pass follows, and a pass starts at least `POKE_GAP_S`
after the last one ended (200 resume hooks in a burst are a handful of passes, not 200). Nothing
the pass does calls back into the timer, so stopping never waits on a lock a pass holds:
on SIGTERM the API closes, the worker is given `daemon.stop_timeout_s` to finish its pass,
and the daemon exits 0 either way (a pass cut off is no worse than a crash, which every
side effect is recorded to survive)."""

from __future__ import annotations

import faulthandler
import json
import logging
import math
import signal
import threading
import time
from datetime import UTC, datetime
from typing import Any

from slurmscale import timeframe
from slurmscale.audit import Kind
from slurmscale.cloud.ec2 import EC2Cloud
from slurmscale.cloud.route53 import Route53Zone
from slurmscale.cloud.sqs import SqsEventQueue
from slurmscale.config import Config
from slurmscale.config_file import redact
from slurmscale.daemon.api import (
    ApiServer,
    SocketInUse,
    SocketUnusable,
    resolve_uids,
    socket_gid,
)
from slurmscale.daemon.context import host_now
from slurmscale.daemon.fence import Fence, LeaseLost
from slurmscale.daemon.leadership import lease_for
from slurmscale.daemon.metrics import Metrics
from slurmscale.daemon.pass_times import PassTimes
from slurmscale.daemon.plan_view import SOURCE_DAEMON, plan_data, with_standings
from slurmscale.daemon.reconcile import Reconciler, TickResult, utcnow
from slurmscale.gc_tuning import BetweenPasses, tune_gc
from slurmscale.identity import identity
from slurmscale.report.compute import paid_now
from slurmscale.slurm.cli_backend import SlurmCLI
from slurmscale.spool import Spool
from slurmscale.store.repo import Store

log = logging.getLogger(__name__)

POKE_GAP_S = 0.25  # a pass starts at least this long after the last one ended
# a stop still running this long after the pass's own bound (daemon.stop_timeout_s) hangs
STOP_MARGIN_S = 10.0
SIGNAL_POLL_S = 0.5  # the main thread wakes this often to run a signal's handler (`run`)


def rounded(seconds: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 4) for k, v in sorted(seconds.items())}


class Daemon:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        url = cfg.database_url()
        self.store = Store(url)
        self.lease = lease_for(url, cfg.cluster_name, cfg.daemon.leader_stale_s)
        # Built when this daemon starts to lead, dropped when it stops: what a reconciler
        # remembers between passes (backoff, evacuated instances) is only true for the
        # leader that saw it happen.
        self.reconciler: Reconciler | None = None
        self.metrics = Metrics() if cfg.metrics.port else None
        if self.metrics is not None:
            self.metrics.preset((p.name, p.capacity_type.value) for p in cfg.pools)
        self.stopping = threading.Event()
        # the earliest time a pass is wanted (monotonic; None: none), by a poke or a pass's
        # own next_due; taken whole as a pass starts, so at most one pass runs and one waits,
        # whatever the number of pokes
        self.cond = threading.Condition()
        self.wanted_at: float | None = None
        self.next_tick = math.inf  # monotonic: when the periodic pass is due next (`run`)
        self.last_end = -POKE_GAP_S  # monotonic: when the last pass ended
        self.worker = threading.Thread(target=self._work, name="reconcile", daemon=True)
        self.collector = BetweenPasses()
        self.last_tick: dict[str, Any] = {}
        self.failures = 0  # passes failed in a row
        self.ec2_failing = 0  # passes in a row in which an EC2 call failed
        self.last_ok_at: str | None = None  # ISO time of the last pass that completed
        self.api: ApiServer | None = None
        self._socket_busy = False
        self._metrics_refused = False  # the metrics port could not be had (said once)
        # the last pass's plan as `plan --json` prints it, made on the first ask after a pass
        self._plan_lock = threading.Lock()
        self._plan_json: tuple[object, bytes] | None = None  # (the pass's PassPlan, JSON)

    def _poke(self, _body: Any) -> tuple[int, Any]:
        self.want()
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

    def want(self, at: float | None = None) -> None:
        """A pass at monotonic time `at` (now when None): the earliest wanted time wins."""
        at = time.monotonic() if at is None else at
        with self.cond:
            if self.wanted_at is None or at < self.wanted_at:
                self.wanted_at = at
            self.cond.notify()

    def _work(self) -> None:
        """The one thread passes run on: each pass takes every wish made before it started."""
        tick_s = self.cfg.daemon.tick_seconds
        while True:
            with self.cond:
                while not self.stopping.is_set():
                    now = time.monotonic()
                    due = (self.next_tick if self.wanted_at is None
                           else min(self.wanted_at, self.next_tick))
                    if due <= now:
                        break
                    self.cond.wait(None if due == math.inf else due - now)
                if self.stopping.is_set():
                    return
                self.wanted_at = None
                if self.next_tick <= now:  # ticks a long pass overran are not made up
                    self.next_tick = max(self.next_tick + tick_s, now)
            gap = self.last_end + POKE_GAP_S - time.monotonic()
            if gap > 0 and self.stopping.wait(gap):
                return
            try:
                self._tick()
            except Exception:  # noqa: BLE001 - the loop outlives anything a pass raises
                log.exception("pass failed outside the reconcile pass itself")
            finally:
                self.collector.after_pass()
                self.last_end = time.monotonic()

    @property
    def role(self) -> str:
        return "leader" if self.reconciler is not None else "standby"

    def _new_reconciler(self) -> Reconciler:
        cfg = self.cfg
        queue = (SqsEventQueue(cfg.aws, cfg.aws.interruption_queue_url)
                 if cfg.aws.interruption_queue_url else None)
        spool = Spool(cfg.spool_dir)
        spool.ensure()
        return Reconciler(cfg, self.store, SlurmCLI(cfg.slurm, remember=True), EC2Cloud(cfg.aws),
                          queue=queue, metrics=self.metrics, spool=spool,
                          fence=Fence(self.lease.held), times=PassTimes(),
                          dns_zone=Route53Zone(cfg.aws, cfg.dns) if cfg.dns else None)

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
            who = identity()
            # from here on, what this daemon writes is written only while no later leader
            # has taken over (the store's own fence: a pass in flight when the lease goes)
            epoch = self.store.lead(self.cfg.cluster_name, who, host_now())
            self.reconciler = self._new_reconciler()
            log.info("leading cluster %s as %s (epoch %d)", self.cfg.cluster_name, who, epoch)
            cut = getattr(self.lease, "took_over", None)
            self.store.add_event(Kind.LEADER_ACQUIRED, f"{who} leads cluster "
                                 f"{self.cfg.cluster_name} (epoch {epoch})"
                                 + (f": {cut}" if cut else ""), host_now())
        return self.reconciler

    def _serve_metrics(self) -> None:
        """Serve the metrics unless their port cannot be had (another process has it, an
        address this host does not have): then the daemon runs without them, says so once,
        and tries again each pass. Metrics are worth less than the loop they describe."""
        m = self.metrics
        if m is None or m.serving:
            return
        address, port = self.cfg.metrics.address, self.cfg.metrics.port
        try:
            m.serve(address, port)
        except OSError as e:
            if not self._metrics_refused:
                log.error("cannot serve metrics on %s:%d (%s): running without them, trying "
                          "again every pass", address, port, e.strerror or e)
            self._metrics_refused = True
            return
        if self._metrics_refused:
            log.warning("metrics served on %s:%d now", address, port)
        self._metrics_refused = False

    def _tick(self) -> None:
        t0 = time.monotonic()
        if self.api is None and self._socket_busy:
            try:
                self._serve_api()
            except SocketUnusable as e:
                log.error("%s", e)
        if self._metrics_refused:
            self._serve_metrics()
        try:
            reconciler = self._lead()
            if self.metrics is not None:
                self.metrics.leader.set(1 if reconciler is not None else 0)
            if reconciler is None:
                self.last_tick = {"ok": True, "at": datetime.now(UTC).isoformat(),
                                  "standby": True}
                return
            self.lease.busy(True)
            try:
                res = reconciler.tick()
            finally:
                self.lease.busy(False)
        except LeaseLost as e:  # the rest of the pass is the next leader's (or ours, later)
            log.error("%s: standing by", e)
            self.reconciler = None
            self.last_tick = {"ok": False, "at": datetime.now(UTC).isoformat(),
                              "error": str(e), "standby": True}
            return
        except Exception as e:  # noqa: BLE001 - one failed pass must not end the loop
            log.exception("reconcile pass failed; retrying next tick")
            self.failures += 1
            self.last_tick = {"ok": False, "at": datetime.now(UTC).isoformat(),
                              "error": f"{type(e).__name__}: {e}"[:500],
                              "failed_in_a_row": self.failures, "last_ok_at": self.last_ok_at}
            if self.metrics is not None:
                self.metrics.failed_in_a_row.set(self.failures)
            return
        self.failures = 0
        now = datetime.now(UTC).isoformat()
        if res.cloud_failures:  # the pass went on; EC2 did not answer it as it should
            self.ec2_failing += 1
            call, error = res.cloud_failures[0]
            self.last_tick = {"ok": False, "at": now, "seconds": round(time.monotonic() - t0, 3),
                              "error": f"EC2 failing: {call}: {error}"[:500],
                              "ec2_failed_calls": len(res.cloud_failures),
                              "failed_in_a_row": self.ec2_failing, "last_ok_at": self.last_ok_at}
            log.error("%d EC2 call(s) failed this pass, first %s: %s",
                      len(res.cloud_failures), call, error)
        else:
            self.ec2_failing = 0
            self.last_ok_at = now
            self.last_tick = {"ok": True, "at": now,
                              "seconds": round(time.monotonic() - t0, 3), "failed_in_a_row": 0,
                              "last_ok_at": now}
        if res.queue_error is not None:
            self.last_tick["queue_error"] = res.queue_error[:300]
        self.last_tick["phase_seconds"] = rounded(res.phase_seconds)
        self.last_tick["wait_seconds"] = rounded(res.wait_seconds)
        if self.metrics is not None:
            for call, _ in res.cloud_failures:
                self.metrics.ec2_failures.labels(call).inc()
            self.metrics.failed_in_a_row.set(self.ec2_failing)
            if not res.cloud_failures:
                self.metrics.last_ok.set(time.time())
            self._export(reconciler, res, time.monotonic() - t0)
        if (res.drained or res.launched_gangs or res.failed_gangs or res.released_nodes
                or res.policy_actions or res.ec2_messages):
            log.info("tick: %d new requests, %d gangs launched, %d failed, %d nodes released, "
                     "%d policy actions, %d EventBridge messages (%.2fs)", res.drained,
                     res.launched_gangs, res.failed_gangs, res.released_nodes,
                     res.policy_actions, res.ec2_messages, time.monotonic() - t0)
        if res.next_due is not None:
            self.want(time.monotonic() + max(0.0, res.next_due - utcnow().timestamp()) + 0.05)

    def _export(self, reconciler: Reconciler, res: TickResult, seconds: float) -> None:
        m = self.metrics
        assert m is not None
        m.tick.observe(seconds)
        m.pass_times(res.phase_seconds, res.wait_seconds)
        m.pools(reconciler.capacity.pools_now)
        m.warm_instances(reconciler.warm.counts)
        spent: dict[str, float] = {}
        for h in self.store.holds(("active", "releasing")):
            spent[h.pool] = spent.get(h.pool, 0.0) + h.spent_gpu_s
        m.holds(spent, [p.name for p in self.cfg.pools])
        m.backoff({o.pool: o.until_s for o in self.store.offerings() if not o.offering},
                  [p.name for p in self.cfg.pools], time.time())
        last = reconciler.capacity.last
        if last is not None:
            m.limit_uses(last.limit_use)
        if reconciler.reserved.ids:
            m.paid(u for u, _ in paid_now(self.store, datetime.now(UTC)))

    def run(self) -> None:
        # Signals first: a stop during start-up (the schema upgrade, say) must end cleanly.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stopping.set())
        timeframe.FRAME.learns_true = True  # AWS's answers give true time (timeframe.py)
        try:
            self._lead()  # a leader upgrades the schema before its socket appears
        except Exception:  # noqa: BLE001 - the database may be down: the ticks retry
            log.exception("could not take up leadership at start; retrying every tick")
            self.reconciler = None
        if self.stopping.is_set():
            self._close()
            return
        try:
            self._serve_api()
        except SocketUnusable:
            self._close()
            raise  # the command says it in one line
        tune_gc()  # start-up's objects out of the collector's walks; fewer collections a pass
        self._serve_metrics()
        self.next_tick = time.monotonic()  # the first pass at once, then every tick
        self.worker.start()
        log.info("slurmscale daemon up (%s): cluster %s, %d pool(s), socket %s, store %s",
                 self.role, self.cfg.cluster_name, len(self.cfg.pools), self.cfg.socket_path,
                 redact(self.store.engine.url.render_as_string(hide_password=True),
                        self.cfg.database_url()))
        # A timed wait: Python runs a signal's handler in the main thread only when that
        # thread runs, and the kernel may deliver SIGTERM to another thread (the worker,
        # the API's); an untimed wait would then sleep through it for ever (a loaded CI saw
        # a daemon ignore its SIGTERM for a minute). Each wake-up runs what is pending.
        while not self.stopping.wait(SIGNAL_POLL_S):
            pass
        self.stop()

    def stop(self) -> None:
        """Close the API, let the pass in flight finish within `daemon.stop_timeout_s`, and
        release the lease only if it did (a pass still running may still act; a standby
        then waits out the lease instead)."""
        log.info("stopping")
        # A stop that hangs itself (a thread that never lets go) must still end, and say
        # where: past the pass's own bound and a margin, every thread's stack goes to stderr
        # (the journal, under systemd) and the process exits 1, before a service manager's
        # SIGKILL would end it without a word.
        faulthandler.dump_traceback_later(self.cfg.daemon.stop_timeout_s + STOP_MARGIN_S,
                                          exit=True)
        t0 = time.monotonic()
        try:
            self._stop_parts()
        finally:
            faulthandler.cancel_dump_traceback_later()
        log.info("stopped in %.1fs", time.monotonic() - t0)

    def _stop_parts(self) -> None:
        self.stopping.set()
        with self.cond:
            self.cond.notify_all()
        if self.api is not None:
            self.api.stop()
        if self.worker.is_alive():
            self.worker.join(self.cfg.daemon.stop_timeout_s)
        if self.metrics is not None:
            self.metrics.stop()
        if self.worker.is_alive():
            log.error("the pass in flight did not finish within daemon.stop_timeout_s (%gs): "
                      "abandoned; the lease lapses on its own", self.cfg.daemon.stop_timeout_s)
            return
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
            }, resolve_uids(self.cfg.daemon.api_users),
                socket_gid(self.cfg.daemon.socket_group, self.cfg.daemon.api_users))
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
