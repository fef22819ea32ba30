"""Processes the local cluster starts, and only those: each is ended by its own PID."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)


class Procs:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, cmd: Sequence[str], env: dict[str, str] | None = None,
              cwd: Path | None = None, user: str | None = None) -> subprocess.Popen[bytes]:
        if name in self.procs and self.procs[name].poll() is None:
            raise RuntimeError(f"{name} already running (pid {self.procs[name].pid})")
        out = open(self.log_dir / f"{name}.out", "ab")  # noqa: SIM115 - owned by the child
        p = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                             start_new_session=True, user=user, group=user,
                             extra_groups=[] if user else None)
        out.close()
        self.procs[name] = p
        log.debug("started %s pid %d: %s", name, p.pid, " ".join(cmd))
        return p

    def running(self, name: str) -> bool:
        p = self.procs.get(name)
        return p is not None and p.poll() is None

    def stop(self, name: str, timeout: float = 15.0,
             sig: signal.Signals = signal.SIGTERM) -> None:
        p = self.procs.pop(name, None)
        if p is None or p.poll() is not None:
            return
        p.send_signal(sig)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)

    def stop_all(self, order: Sequence[str] = ()) -> None:
        for name in [*order, *sorted(self.procs)]:
            self.stop(name)


PORT_CLAIMS = Path(tempfile.gettempdir()) / "slurmscale-ports"


def _ephemeral_low() -> int:
    """Where the kernel's ephemeral ports start: every outgoing connection takes one, so a
    port chosen there may be gone by the time a slurmd boots and binds it."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _claim(port: int) -> bool:
    """One file per port, created exclusively and naming its owner's PID: clusters started
    side by side (pytest-xdist) never pick the same port, even one not bound yet."""
    PORT_CLAIMS.mkdir(mode=0o755, exist_ok=True)
    path = PORT_CLAIMS / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = int(path.read_text() or "0")
                os.kill(owner, 0)
                return False  # its owner lives
            except (ProcessLookupError, ValueError):
                path.unlink(missing_ok=True)  # a dead owner's claim
                continue
            except OSError:
                return False
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True
    return False


def release_port_range(base: int, n: int) -> None:
    for port in range(base, base + n):
        path = PORT_CLAIMS / str(port)
        try:
            if path.read_text() == str(os.getpid()):
                path.unlink()
        except OSError:
            pass


def free_port_range(n: int, lo: int = 10000, hi: int | None = None) -> int:
    """First port of `n` consecutive free loopback ports below the ephemeral range, claimed
    for this process until release_port_range."""
    import random

    hi = min(hi or 60000, _ephemeral_low())
    rng = random.Random(os.getpid() ^ time.time_ns())
    for _ in range(200):
        base = rng.randrange(lo, hi - n)
        claimed: list[int] = []
        socks = []
        try:
            for port in range(base, base + n):
                if not _claim(port):
                    raise OSError(f"port {port} claimed")
                claimed.append(port)
                s = socket.socket()
                s.bind(("127.0.0.1", port))
                socks.append(s)
            return base
        except OSError:
            for port in claimed:
                release_port_range(port, 1)
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no range of {n} free ports found")


def wait_for(what: str, check: Callable[[], object], timeout: float,
             interval: float = 0.25) -> object:
    """Poll `check` until it returns something truthy; raise with `what` at the deadline."""
    deadline = time.monotonic() + timeout
    last_err: Exception | None = None
    while True:
        try:
            v = check()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - reported at the deadline
            last_err = e
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}"
                               + (f" (last error: {last_err})" if last_err else ""))
        time.sleep(interval)


def stop_on_sigterm() -> None:
    """SIGTERM ends the program as Ctrl-C does, by an exception in the main thread, so its
    `finally` blocks stop everything it started (before: a SIGTERMed replay left munged,
    slurmctld, moto and the daemon running)."""
    def end(_sig: int, _frame: object) -> None:
        sys.exit(128 + signal.SIGTERM)
    signal.signal(signal.SIGTERM, end)
