"""Processes the local cluster starts, and only those: each is ended by its own PID."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
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

    def stop(self, name: str, timeout: float = 15.0) -> None:
        p = self.procs.pop(name, None)
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)

    def stop_all(self, order: Sequence[str] = ()) -> None:
        for name in [*order, *sorted(self.procs)]:
            self.stop(name)


def free_port_range(n: int, lo: int = 20000, hi: int = 60000) -> int:
    """First port of `n` consecutive free loopback ports."""
    import random

    rng = random.Random(os.getpid() ^ time.time_ns())
    for _ in range(200):
        base = rng.randrange(lo, hi - n)
        socks = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                s.bind(("127.0.0.1", port))
                socks.append(s)
            return base
        except OSError:
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
