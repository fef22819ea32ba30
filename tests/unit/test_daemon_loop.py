"""The daemon's loop: pokes coalesce into a bounded number of passes, a stop never waits on a
pass forever (a whole daemon process, SIGTERM while its pass hangs on a slow Slurm), a pass
that fails says so first in `status`, and a socket that cannot be served is one line."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from slurmscale.config_file import parse_config
from slurmscale.daemon.service import POKE_GAP_S, Daemon
from tests.support.fakes import slurm_down
from tests.unit.conftest import base_config


def _daemon(tmp_path: Path, **daemon: object) -> Daemon:
    cfg = parse_config(base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}",
                                   daemon={"tick_seconds": 3600, **daemon}))
    return Daemon(cfg)


def _stop(d: Daemon) -> None:
    d.stopping.set()
    with d.cond:
        d.cond.notify_all()
    d.worker.join(5)
    d._close()


def test_a_burst_of_pokes_is_a_bounded_number_of_passes(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    ran: list[float] = []

    def slow_pass() -> None:
        ran.append(time.monotonic())
        time.sleep(0.2)
    d._tick = slow_pass  # type: ignore[method-assign]
    d.worker.start()
    try:
        t0 = time.monotonic()

        def hooks(n: int) -> None:
            for _ in range(n):
                assert d._poke(None)[0] == 202
                time.sleep(0.05)
        threads = [threading.Thread(target=hooks, args=(50,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        burst = time.monotonic() - t0
        time.sleep(1.0)  # the pass queued by the last pokes
    finally:
        _stop(d)
    # one pass at a time and one queued: a pass starts at most once per (pass + gap) while
    # the burst lasts, and one more after it (the pokes that came during the last)
    bound = math.ceil(burst / (0.2 + POKE_GAP_S)) + 2
    print(f"200 pokes in {burst:.2f} s -> {len(ran)} passes (bound {bound})")
    assert 2 <= len(ran) <= bound
    assert all(b - a >= 0.2 + POKE_GAP_S - 0.02 for a, b in zip(ran, ran[1:], strict=False))
    assert ran[-1] > t0 + burst - 0.5, "a poke during a pass is never lost"


def test_a_pass_wanted_later_runs_then(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    ran: list[float] = []
    d._tick = lambda: ran.append(time.monotonic())  # type: ignore[method-assign]
    d.worker.start()
    try:
        t0 = time.monotonic()
        d.want(t0 + 0.6)
        time.sleep(0.3)
        assert ran == []
        time.sleep(0.6)
        assert len(ran) == 1 and ran[0] >= t0 + 0.6
    finally:
        _stop(d)


def test_a_failing_pass_is_what_status_says_first(tmp_path: Path) -> None:
    from slurmscale.cli_status import render

    d = _daemon(tmp_path)
    d._lead = lambda: (_ for _ in ()).throw(OSError(28, "No space left on device"))  # type: ignore[method-assign]
    try:
        d._tick()
        d._tick()
    finally:
        d._close()
    t = d.last_tick
    assert t["ok"] is False and t["failed_in_a_row"] == 2 and t["last_ok_at"] is None
    assert t["error"] == "OSError: [Errno 28] No space left on device"
    text = render({"cluster": "unit", "daemon": {"reachable": True, "role": "leader",
                                                 "last_tick": t},
                   "pools": [], "reservations": [], "backoff": [], "pending_requests": [],
                   "recent_errors": [], "slurm_error": None})
    first = text.splitlines()[:3]
    assert first[0].endswith("FAILED") and "2 pass(es) failed in a row; last good pass never" \
        in first[1] and "No space left on device" in first[2]


def test_a_pass_that_lost_the_lease_stands_the_daemon_by(tmp_path: Path) -> None:
    """The fence refused a call: the pass ends, the reconciler is dropped (the next pass
    builds a new one only if this daemon takes the lease again) and status says standby."""
    from slurmscale.daemon.fence import LeaseLost

    class Lost:
        def tick(self) -> None:
            raise LeaseLost("the leader lease is gone: EC2.tag not called")

    d = _daemon(tmp_path)
    d._lead = lambda: Lost()  # type: ignore[assignment, method-assign, return-value]
    d.reconciler = Lost()  # type: ignore[assignment]
    try:
        d._tick()
    finally:
        d._close()
    assert d.reconciler is None and d.failures == 0
    assert d.last_tick["standby"] is True and "EC2.tag not called" in d.last_tick["error"]


def test_a_daemon_taken_over_writes_nothing_more_to_the_store(tmp_path: Path) -> None:
    """Two daemons on one store (the lease, a flock, left to each as if it held it: what a
    leader sees that has not noticed its loss): the later one to lead takes the store's
    epoch, and the earlier one's writes are refused whole, its pass ending as a lost lease
    does (standby), a hook's request it was taking left for the new leader, not rejected;
    the take-over is in the audit log with its epoch."""
    from slurmscale.audit import Kind
    from slurmscale.daemon.fence import LeaseLost
    from slurmscale.daemon.leadership import SoleLease
    from slurmscale.spool import RequestKind, Spool

    cfg = parse_config(base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}",
                                   spool_dir=str(tmp_path / "spool"),
                                   daemon={"tick_seconds": 3600}))
    a, b = Daemon(cfg), Daemon(cfg)
    a.lease.release()
    b.lease.release()
    a.lease, b.lease = SoleLease(), SoleLease()  # (each sure it leads)
    try:
        assert a._lead() is not None
        assert b._lead() is not None
        with pytest.raises(LeaseLost, match="epoch 1"):
            a.store.add_event(Kind.LEADER_ACQUIRED, "a's, too late", a.store.events()[0].at)
        # a hook's request the old leader drains after the take-over stays for the new one
        spool = Spool(cfg.spool_dir)
        put = spool.put(spool.new_request(RequestKind.RESUME, ["gpu-1"], "gpu-1", None))
        a._tick()
        assert put.exists() and not list(spool.rejected.iterdir())
        assert a.reconciler is None and a.last_tick["standby"] is True
        assert "nothing written" in a.last_tick["error"]
        said = [e.message for e in b.store.events() if e.kind == Kind.LEADER_ACQUIRED]
        assert len(said) == 2 and said[0].endswith("(epoch 1)") and \
            said[1].endswith("(epoch 2)")
    finally:
        a._close()
        b._close()


# --- whole processes -------------------------------------------------------------------------
def _config(tmp_path: Path, **over: object) -> Path:
    """A daemon's config whose Slurm commands take 60 s to answer (a controller that does not
    reply) and whose EC2 endpoint is a closed loopback port."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("scontrol", "squeue", "sprio", "sinfo"):
        (bin_dir / tool).write_text("#!/bin/sh\nsleep 60\n")
        (bin_dir / tool).chmod(0o755)
    d = base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}",
                    socket_path=str(tmp_path / "run" / "sock"),
                    spool_dir=str(tmp_path / "spool"),
                    log_file=str(tmp_path / "daemon.log"),
                    hook_log_file=str(tmp_path / "hooks.log"),
                    aws={"endpoint_url": "http://127.0.0.1:9", "max_attempts": 1},
                    slurm={"bin_dir": str(bin_dir), "timeout_s": 120},
                    daemon={"tick_seconds": 2, "stop_timeout_s": 3})
    d.update(over)
    path = tmp_path / "slurmscale.yaml"
    path.write_text(yaml.safe_dump(d))
    path.chmod(0o644)
    return path


def _env() -> dict[str, str]:
    return {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
            "AWS_EC2_METADATA_DISABLED": "true"}


def _daemon_up(tmp_path: Path, cfg: Path, env: dict[str, str] | None = None,
               out: int = subprocess.PIPE) -> subprocess.Popen[bytes]:
    """`slurmscale daemon` on `cfg`, once its socket is there (30 s at most)."""
    daemon = subprocess.Popen([sys.executable, "-m", "slurmscale", "--config", str(cfg),
                               "daemon"], env=env or _env(), stdin=subprocess.DEVNULL,
                              stdout=out, stderr=subprocess.STDOUT)
    sock = tmp_path / "run" / "sock"
    deadline = time.monotonic() + 30
    while not sock.is_socket():
        if daemon.poll() is not None or time.monotonic() > deadline:
            daemon.kill()
            said = daemon.communicate()[0] if out == subprocess.PIPE else b""
            raise AssertionError(f"daemon not up (exit {daemon.returncode}): "
                                 f"{(said or b'').decode(errors='replace')[-2000:]}")
        time.sleep(0.1)
    return daemon


def test_sigterm_during_a_slow_pass_after_a_poke_exits_within_the_stop_timeout(
        tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    daemon = _daemon_up(tmp_path, cfg)
    try:
        hook = subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(cfg),
                               "resume", "spot-1"], env=_env(), capture_output=True,
                              timeout=60)
        assert hook.returncode == 0, hook.stderr
        time.sleep(2)  # its pass is now waiting on the slow Slurm
        t0 = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        rc = daemon.wait(3 + 10)
        took = time.monotonic() - t0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(5)
    print(f"SIGTERM during a slow pass -> exit {rc} after {took:.1f} s (stop_timeout_s 3)")
    assert rc == 0 and took < 3 + 5
    assert "abandoned" in (tmp_path / "daemon.log").read_text()


TGKILL = {"x86_64": 234, "aarch64": 131}  # the tgkill syscall's number (Linux)


def test_a_sigterm_the_kernel_gives_another_thread_still_stops_the_daemon(
        tmp_path: Path) -> None:
    """The kernel may deliver a process's SIGTERM to any of its threads; Python runs the
    handler only in the main thread, and only when that thread runs: a main thread asleep in
    an untimed wait slept through it (a loaded CI run's daemon ignored SIGTERM for a minute).
    Here the signal goes to one of the daemon's other threads on purpose (tgkill)."""
    import ctypes
    import platform

    nr = TGKILL.get(platform.machine())
    if nr is None:
        pytest.skip(f"tgkill's syscall number not known here ({platform.machine()})")
    cfg = _config(tmp_path)
    daemon = _daemon_up(tmp_path, cfg)
    try:
        others = sorted(int(t) for t in os.listdir(f"/proc/{daemon.pid}/task")
                        if int(t) != daemon.pid)
        assert others, "the daemon runs more than one thread"
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.syscall(nr, daemon.pid, others[-1], signal.SIGTERM) == 0
        rc = daemon.wait(10)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(5)
    assert rc == 0


def test_a_socket_path_that_cannot_be_served_is_one_line_and_exit_2(tmp_path: Path) -> None:
    cfg = _config(tmp_path, socket_path="/proc/slurmscale-test.sock")
    p = subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(cfg), "daemon"],
                       env=_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("slurmscale: ") and "/proc/slurmscale-test.sock" in line
    assert "Traceback" not in p.stderr


def test_the_daemon_collects_cycles_between_passes_when_due() -> None:
    import gc

    from slurmscale.gc_tuning import BetweenPasses, tune_gc

    old = gc.get_threshold()
    try:
        tune_gc()
        c = BetweenPasses(every_s=0.2)
        assert c.after_pass() is None  # not due yet

        class Node:
            def __init__(self) -> None:
                self.me = self  # a cycle: reference counting alone never frees it
        for _ in range(1000):
            Node()
        time.sleep(0.25)
        freed = c.after_pass()
        assert freed is not None and freed >= 1000 and c.collections == 1
        assert c.after_pass() is None
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)


LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")


def _passes(sock: Path, seconds: float) -> int:
    """The passes the daemon ran in the next `seconds`: each leaves a new `last_tick`."""
    from slurmscale.api_client import ApiError, call

    seen: set[str] = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            _, health = call(str(sock), "GET", "/v1/health", timeout=2)
        except (ApiError, OSError):
            health = {}
        if isinstance(health, dict) and health.get("last_tick"):
            seen.add(json.dumps(health["last_tick"], sort_keys=True))
        time.sleep(0.1)
    return len(seen)


@pytest.mark.skipif(not LIBFAKETIME.exists() and not os.environ.get("CI"),
                    reason="libfaketime not installed (scripts/setup.sh --tests installs it)")
def test_a_wall_clock_stepped_back_an_hour_neither_stops_nor_doubles_the_tick(
        tmp_path: Path) -> None:
    """The daemon's host clock stepped back an hour under libfaketime (its steady clock
    untouched, as on a host where NTP or an admin steps the time): the passes go on every
    tick. On a wall-clock interval timer (APScheduler 3's) none ran for the hour."""
    cfg = _config(tmp_path, daemon={"tick_seconds": 1, "stop_timeout_s": 3},
                  slurm={"bin_dir": str(slurm_down(tmp_path)), "timeout_s": 5})
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    env = {**_env(), "LD_PRELOAD": str(LIBFAKETIME), "FAKETIME_TIMESTAMP_FILE": str(offset),
           "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    out = tmp_path / "daemon.out"
    with out.open("wb") as sink:
        daemon = _daemon_up(tmp_path, cfg, env, out=sink.fileno())
    sock = tmp_path / "run" / "sock"
    try:
        before = _passes(sock, 6)
        offset.write_text("-3600\n")  # the host's clock an hour back
        after = _passes(sock, 12)
        offset.write_text("+0\n")  # and forward again
        again = _passes(sock, 6)
    finally:
        daemon.terminate()
        try:
            # (a stop that hangs ends itself after stop_timeout_s + 10 s, every thread's
            # stack in its output: this says where)
            daemon.wait(20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
            raise AssertionError("the daemon did not stop:\n" + out.read_text()[-4000:]) \
                from None
    assert daemon.returncode == 0, out.read_text()[-4000:]
    print(f"passes at tick 1 s: {before} in 6 s, {after} in 12 s after a -1 h step, "
          f"{again} in 6 s after stepping back to true time")
    # (each count has the last pass before it; a busy machine slows a pass, never speeds one)
    assert 3 <= before <= 8
    assert 6 <= after <= 14, "a tick stopped or doubled by the step back"
    assert 3 <= again <= 8, "a tick stopped or doubled by the step forward"


def test_a_metrics_port_in_use_costs_the_metrics_not_the_loop(tmp_path: Path) -> None:
    """Another process has the metrics port: the daemon says so in one line, serves its
    socket and runs its passes without metrics, and serves them once the port is free."""
    import socket
    import urllib.request

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    cfg = _config(tmp_path, metrics={"address": "127.0.0.1", "port": port},
                  daemon={"tick_seconds": 1, "stop_timeout_s": 3},
                  slurm={"bin_dir": str(slurm_down(tmp_path)), "timeout_s": 5})
    daemon = _daemon_up(tmp_path, cfg)
    try:
        # (the daemon may be up before it first tried the port: the port is let go only
        # once it has said it cannot serve there)
        said = time.monotonic() + 30
        log_file = tmp_path / "daemon.log"
        while "cannot serve metrics on 127.0.0.1:" not in (
                log_file.read_text() if log_file.exists() else ""):
            assert daemon.poll() is None and time.monotonic() < said, "no word of the port"
            time.sleep(0.1)
        holder.close()  # the port is free now: the next pass serves the metrics
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    assert b"slurmscale_" in r.read()
                break
            except OSError:
                assert daemon.poll() is None and time.monotonic() < deadline, "no metrics"
                time.sleep(0.2)
    finally:
        holder.close()
        daemon.terminate()
        out, _ = daemon.communicate(timeout=15)
    log = (tmp_path / "daemon.log").read_text()
    assert daemon.returncode == 0 and "Traceback" not in out.decode() + log
    assert log.count("cannot serve metrics on 127.0.0.1:") == 1


def test_a_pass_ec2_does_not_answer_is_not_ok_and_status_leads_with_it(tmp_path: Path) -> None:
    """No AWS credentials: every pass runs to its end (the loop stays up), and before this
    change said ok, `status` 'daemon up, leader' with no error. Now the pass says which EC2
    call failed, status leads with it, the metric counts it; a pass EC2 answers is ok again."""
    from slurmscale.cli_status import render
    from slurmscale.cloud.protocol import CloudError
    from slurmscale.daemon.reconcile import Reconciler
    from slurmscale.store.repo import Store
    from tests.support.fakes import FakeCloud, FakeSlurm

    d = _daemon(tmp_path, api_users=["root"])
    d.cfg = parse_config(base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}",
                                     spool_dir=str(tmp_path / "spool")))
    from slurmscale.daemon.metrics import Metrics

    d.metrics = Metrics()
    store = Store(d.cfg.store_url)
    store.upgrade()
    cloud = FakeCloud()
    cloud.down = CloudError("NoCredentialsError", "Unable to locate credentials")
    r = Reconciler(d.cfg, store, FakeSlurm(), cloud)
    d._lead = lambda: r  # type: ignore[method-assign]
    try:
        d._tick()
        d._tick()
        t = dict(d.last_tick)
        cloud.down = None
        d._tick()
    finally:
        store.close()
        d._close()
    assert t["ok"] is False and t["failed_in_a_row"] == 2 and t["ec2_failed_calls"] >= 1
    assert "EC2 failing: EC2." in t["error"] and "NoCredentialsError" in t["error"]
    assert d.last_tick["ok"] is True
    text = render({"cluster": "unit", "daemon": {"reachable": True, "role": "leader",
                                                 "last_tick": t},
                   "pools": [], "reservations": [], "backoff": [], "pending_requests": [],
                   "recent_errors": [], "slurm_error": None})
    first = text.splitlines()[:3]
    assert first[0].endswith("EC2 FAILING") and "NoCredentialsError" in first[2], first
    assert 'slurmscale_ec2_call_failures_total{call="EC2.find"}' in d.metrics.text()


def test_an_events_queue_that_cannot_be_read_is_what_status_says_first(tmp_path: Path,
                                                                         caplog) -> None:  # type: ignore[no-untyped-def]
    """A mistyped aws.interruption_queue_url: before, a WARNING in the log each pass and a
    clean `status` while every spot warning went unseen. Now the pass carries the queue's
    error, status leads with it, the log says it once per outage, and it clears when the
    queue answers."""
    from slurmscale.cli_status import render
    from slurmscale.cloud.protocol import CloudError
    from slurmscale.daemon.reconcile import Reconciler
    from slurmscale.store.repo import Store
    from tests.support.fakes import FakeCloud, FakeQueue, FakeSlurm

    class BrokenQueue(FakeQueue):
        down: CloudError | None = CloudError("AWS.SimpleQueueService.NonExistentQueue",
                                             "The specified queue does not exist.")

        def receive(self, max_messages: int = 10) -> list:  # type: ignore[type-arg]
            if self.down is not None:
                raise self.down
            return super().receive(max_messages)

    d = _daemon(tmp_path, api_users=["root"])
    d.cfg = parse_config(base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}",
                                     spool_dir=str(tmp_path / "spool")))
    store = Store(d.cfg.store_url)
    store.upgrade()
    queue = BrokenQueue()
    r = Reconciler(d.cfg, store, FakeSlurm(), FakeCloud(), queue=queue)
    d._lead = lambda: r  # type: ignore[method-assign]
    try:
        with caplog.at_level(logging.ERROR):
            d._tick()
            d._tick()
        t = dict(d.last_tick)
        queue.down = None
        d._tick()
    finally:
        store.close()
        d._close()
    assert "NonExistentQueue" in t["queue_error"]
    assert sum("cannot read the interruption queue" in m for m in caplog.messages) == 1
    assert "queue_error" not in d.last_tick
    text = render({"cluster": "unit", "daemon": {"reachable": True, "role": "leader",
                                                 "last_tick": t},
                   "pools": [], "reservations": [], "backoff": [], "pending_requests": [],
                   "recent_errors": [], "slurm_error": None})
    second = text.splitlines()[1]
    assert second.startswith("  EVENTS QUEUE UNREADABLE") and "NonExistentQueue" in second


def test_a_client_gone_before_its_answer_is_no_traceback(tmp_path: Path, capfd) -> None:  # type: ignore[no-untyped-def]
    """A hook killed while its poke waits (slurmctld's script timeout): the answer meets a
    closed socket. Before: socketserver printed a BrokenPipeError traceback on stderr."""
    import socket

    from slurmscale.daemon.api import ApiServer

    gate = threading.Event()
    waiting: list[int] = []

    def slow(_body: object) -> tuple[int, object]:
        waiting.append(1)
        gate.wait(5)
        return 200, {"big": "x" * 1_000_000}
    api = ApiServer(str(tmp_path / "s.sock"), {("GET", "/v1/slow"): slow},
                    frozenset({os.geteuid()}))
    api.start()
    try:
        for _ in range(3):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(str(tmp_path / "s.sock"))
            c.sendall(b"GET /v1/slow HTTP/1.0\r\n\r\n")
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            c.close()  # (gone, with a reset, before the answer)
        deadline = time.monotonic() + 10
        while len(waiting) < 3:  # each request is being answered
            assert time.monotonic() < deadline, "the requests never reached the handler"
            time.sleep(0.05)
        gate.set()  # the handlers write into the closed sockets
        while any("process_request_thread" in t.name for t in threading.enumerate()):
            assert time.monotonic() < deadline, "the handlers never finished"
            time.sleep(0.05)
    finally:
        api.stop()
    assert "Traceback" not in capfd.readouterr().err


HUNG_STOP = """
import sys, threading
from slurmscale.config_file import parse_config
from slurmscale.daemon import service
from tests.unit.conftest import base_config

service.STOP_MARGIN_S = 1.0
cfg = parse_config(base_config(store_url="sqlite:///" + sys.argv[1],
                               daemon={"tick_seconds": 3600, "stop_timeout_s": 0.5}))
d = service.Daemon(cfg)


class HungApi:
    def stop(self):
        threading.Event().wait()  # a server that never lets go


d.api = HungApi()
d.stop()
print("returned")
"""


def test_a_stop_that_hangs_ends_the_process_and_says_where(tmp_path: Path) -> None:
    """Whatever part of the stop hangs (here the API server's), the process ends soon after
    daemon.stop_timeout_s, every thread's stack on stderr: a stop that never returns would
    otherwise wait for the service manager's SIGKILL and leave no word of where it hung."""
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", HUNG_STOP, str(tmp_path / "state.db")],
                       capture_output=True, text=True, timeout=60, env=_env(),
                       cwd=Path(__file__).resolve().parents[2])
    took = time.monotonic() - t0
    assert p.returncode == 1 and "returned" not in p.stdout, (p.stdout, p.stderr)
    assert "in stop" in p.stderr and "_stop_parts" in p.stderr, p.stderr
    assert took < 30, took


def test_status_exits_with_the_worst_of_what_is_wrong() -> None:
    """For cron and Nagios: before, `status` exited 0 with EC2 FAILING and with the daemon
    down. Each state has its own code, the worst first."""
    from slurmscale.cli_status import exit_code

    def d(reachable: bool = True, slurm_error: str | None = None, **tick: object) -> dict:
        return {"daemon": {"reachable": reachable, "last_tick": {"ok": True, **tick}},
                "slurm_error": slurm_error}

    assert exit_code(d()) == 0
    assert exit_code(d(standby=True)) == 0
    assert exit_code(d(slurm_error="down")) == 3
    assert exit_code(d(reachable=False, slurm_error="down")) == 4
    assert exit_code(d(ok=False, error="boom", slurm_error="down")) == 5
    assert exit_code(d(ok=False, ec2_failed_calls=2, queue_error="q")) == 6
    assert exit_code(d(queue_error="NonExistentQueue", slurm_error="down")) == 7


def test_under_systemd_each_record_reaches_the_journal_once_with_its_priority(
        tmp_path: Path) -> None:
    """JOURNAL_STREAM names the daemon's stderr: one line per record, `<N>` its syslog
    priority and no timestamp of its own (journald stamps it); the file only if the config
    names one. Elsewhere the file survives rotation (reopened once moved away)."""
    script = tmp_path / "run.py"
    script.write_text(
        "import logging, os, sys\n"
        "from slurmscale.cli import _setup_daemon_logging\n"
        "from slurmscale.config_file import parse_config\n"
        "from tests.unit.conftest import base_config\n"
        "cfg = parse_config(base_config(**({'log_file': sys.argv[1]} if sys.argv[1] else {})))\n"
        "if not sys.argv[1]: cfg = cfg.model_copy(update={'log_file': None})\n"
        "_setup_daemon_logging(cfg, False)\n"
        "log = logging.getLogger('slurmscale.x')\n"
        "log.error('first %d', 1)\n"
        "if sys.argv[1]: os.rename(sys.argv[1], sys.argv[1] + '.1')\n"
        "log.warning('second')\n"
        "log.info('third')\n")
    root = Path(__file__).resolve().parents[2]
    err = tmp_path / "stderr"

    def run(log_file: str, journal: bool) -> str:
        with open(err, "w") as f:
            st = os.fstat(f.fileno())
            env = {**os.environ, "PYTHONPATH": str(root)}
            env.pop("JOURNAL_STREAM", None)
            if journal:
                env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
            subprocess.run([sys.executable, str(script), log_file], stderr=f, env=env,
                           cwd=root, check=True, timeout=60)
        return err.read_text()

    out = run("", journal=True)
    assert out.splitlines() == ["<3>ERROR slurmscale.x: first 1",
                                "<4>WARNING slurmscale.x: second",
                                "<6>INFO slurmscale.x: third"], out
    log = tmp_path / "d.log"
    out = run(str(log), journal=False)
    assert out.count("first 1") == 1 and out.startswith("20")  # (a timestamp off journald)
    assert "first 1" in (tmp_path / "d.log.1").read_text()
    assert "second" in log.read_text() and "first" not in log.read_text()
