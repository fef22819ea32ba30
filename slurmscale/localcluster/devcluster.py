"""The processes of docker-compose.slurm.yml's dev cluster, one per service, built on the same
local-cluster code the tests use. All services share one network namespace, so everything
talks over 127.0.0.1 exactly as on a test machine.

    python -m slurmscale.localcluster.devcluster postgres --data DIR [--port 5432]
    python -m slurmscale.localcluster.devcluster cluster --root DIR --moto-url URL
                                                  [--store-url URL] [--metrics-port N]
                                                  [--with-daemon]
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from slurmscale.localcluster.cluster import LocalCluster
from slurmscale.localcluster.options import ClusterOptions
from slurmscale.localcluster.postgres import LocalPostgres


def _serve(stop: Callable[[], None]) -> int:
    """Run until SIGTERM/SIGINT (docker stop, Ctrl-C), then `stop` what was started."""
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    try:
        stopping.wait()
    finally:
        stop()
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m slurmscale.localcluster.devcluster")
    sub = ap.add_subparsers(dest="service", required=True)
    pg = sub.add_parser("postgres", help="Debian's PostgreSQL on 127.0.0.1")
    pg.add_argument("--data", required=True, type=Path)
    pg.add_argument("--port", type=int, default=5432)
    cl = sub.add_parser("cluster", help="munge, slurmctld, the instance agent and metadata")
    cl.add_argument("--root", required=True, type=Path)
    cl.add_argument("--moto-url", required=True)
    cl.add_argument("--store-url", default=None)
    cl.add_argument("--metrics-port", type=int, default=0,
                    help="the daemon's Prometheus port on 127.0.0.1 (0: off)")
    cl.add_argument("--with-daemon", action="store_true",
                    help="also run the daemon here (the compose file runs it as a service)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.service == "postgres":
        pg = LocalPostgres(args.data)
        pg.port = args.port
        pg.start()
        print(f"postgres ready: {pg.url}", flush=True)
        return _serve(pg.stop)
    args.root.mkdir(parents=True, exist_ok=True)
    extra = ({"metrics": {"address": "127.0.0.1", "port": args.metrics_port}}
             if args.metrics_port else {})
    c = LocalCluster(args.root, ClusterOptions(moto_url=args.moto_url, store_url=args.store_url,
                                               start_daemon=args.with_daemon,
                                               extra_config=extra))
    c.start()
    print(f"cluster {c.name} up in {args.root}: config {c.cfg_path}", flush=True)
    return _serve(c.stop)


if __name__ == "__main__":
    sys.exit(main())
