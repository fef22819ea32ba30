"""A throw-away PostgreSQL server (Debian's package) for the HA tests and the dev cluster: its
own data directory, a free loopback port, started and stopped by PID. PostgreSQL refuses to run
as root, so as root it runs as the `postgres` user the package creates."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path

from slurmscale.localcluster.procs import Procs, free_port_range, release_port_range, wait_for

DB_USER = "slurmscale"


def pg_bin_dir() -> Path | None:
    """The newest installed server (Debian: /usr/lib/postgresql/<major>/bin)."""
    base = Path("/usr/lib/postgresql")
    found = sorted((p for p in base.glob("*/bin") if (p / "postgres").exists()),
                   key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    return found[-1] if found else None


class LocalPostgres:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.data = self.root / "pgdata"
        self.sock_dir = self.root / "pgsock"
        self.procs = Procs(self.root)
        self.port = 0
        bindir = pg_bin_dir()
        if bindir is None:
            raise RuntimeError("PostgreSQL server not installed (Debian: apt install postgresql)")
        self.bin = bindir
        # as root: run as the package's postgres user (directly, so its PID is the server's)
        self.user = "postgres" if os.geteuid() == 0 else None

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{DB_USER}@127.0.0.1:{self.port}/slurmscale"

    def _own(self, path: Path) -> None:
        if self.user:
            pw = pwd.getpwnam("postgres")
            os.chown(path, pw.pw_uid, pw.pw_gid)

    def start(self) -> LocalPostgres:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)  # the postgres user must reach its directories
        if not self.data.exists():
            for d in (self.data, self.sock_dir):
                d.mkdir(mode=0o700)
                self._own(d)
            subprocess.run([str(self.bin / "initdb"), "-D", str(self.data),
                            "-U", DB_USER, "--auth=trust", "-E", "UTF8", "--no-sync"],
                           check=True, capture_output=True, text=True, user=self.user,
                           group=self.user, extra_groups=[] if self.user else None)
            created = True
        else:
            created = False
        self.port = self.port or free_port_range(1)
        self._start_server()
        if created:
            subprocess.run([str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                            "-U", DB_USER, "slurmscale"], check=True, capture_output=True,
                           text=True)
        return self

    def _start_server(self) -> None:
        # fsync off: a test database, thrown away; durability is not what is tested here
        self.procs.start("postgres", [str(self.bin / "postgres"),
                                      "-D", str(self.data), "-p", str(self.port),
                                      "-h", "127.0.0.1", "-k", str(self.sock_dir),
                                      "-c", "fsync=off", "-c", "full_page_writes=off"],
                         user=self.user)

        def ready() -> bool:
            if not self.procs.running("postgres"):
                raise RuntimeError(f"postgres exited; see {self.root / 'postgres.out'}")
            return subprocess.run([str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1",
                                   "-p", str(self.port)]).returncode == 0
        wait_for("postgres to accept connections", ready, 60)

    def stop(self) -> None:
        """Fast shutdown (SIGINT): clients are disconnected at once, like a restart."""
        self.procs.stop("postgres", timeout=30, sig=signal.SIGINT)

    def restart(self) -> None:
        """After stop(): the same data directory and port."""
        self._start_server()

    def remove(self) -> None:
        self.stop()
        if self.port:
            release_port_range(self.port, 1)
        shutil.rmtree(self.root, ignore_errors=True)
