"""Benchmark: the WHOLE `slurmscale plan --json` process at 50,000 pending and 3,000 running
jobs on 5,000 nodes in 10 pools, Slurm's output canned on the config's bin_dir
(tests/benchmarks/canned_slurm.py), fresh processes, medians. Two ways:

- answered by the running daemon (`slurmscale daemon` on the same canned Slurm and a moto
  server on loopback, one pass per poke): the first ask after a pass (the daemon completes
  every gang's standing from a sprio read, then serialises) and the same pass asked again;
- `--live`: computed by the command itself (start-up, imports, config, every Slurm read and
  its parse, the snapshot, the decision, the JSON; the store read by its child process
  meanwhile), as every `plan` was before.

In the same run, as baselines: a bare `python -c pass`, and the canned Slurm commands
themselves run as `plan --live` runs them (what no slurmscale could avoid).

    .venv/bin/python -m tests.benchmarks.plan_whole [PENDING] [NODES] [RUNS]

Target from issue 17: under 1 s wall.
"""

from __future__ import annotations

import compileall
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.benchmarks import canned_slurm
from tests.benchmarks.canned_slurm import install
from tests.benchmarks.scratch import done_with


def timed(cmd: list[str], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - t0)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, ok: Callable[[], Any], timeout: float) -> Any:
    from slurmscale.api_client import ApiError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if v := ok():
                return v
        except (OSError, ApiError):
            pass
        time.sleep(0.1)
    raise TimeoutError(what)


@contextmanager
def daemon(cfg: Path, data: dict[str, Any]) -> Iterator[Callable[[], None]]:
    """A moto server and `slurmscale daemon` on this config (one pass at start, then one per
    poke); yields a function that runs one more pass and returns when it is done. Both
    processes are this benchmark's own, ended by PID."""
    from slurmscale.api_client import call

    port = _free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    procs = [subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                               str(port)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    try:
        _wait("moto", lambda: socket.create_connection(("127.0.0.1", port), 1).close() or 1,
              60)
        data["aws"] = {**data.get("aws", {}), "endpoint_url": f"http://127.0.0.1:{port}",
                       "max_attempts": 1}
        data["daemon"] = {**data.get("daemon", {}), "tick_seconds": 3600}
        cfg.write_text(yaml.safe_dump(data))
        log = open(cfg.with_name("daemon.out"), "wb")  # noqa: SIM115 - the daemon's lifetime
        procs.append(subprocess.Popen([sys.executable, "-m", "slurmscale", "--config",
                                       str(cfg), "daemon"], env=env,
                                      stdout=log, stderr=subprocess.STDOUT))
        sock = data["socket_path"]

        def last_pass() -> str | None:
            status, body = call(sock, "GET", "/v1/health", timeout=5)
            tick = body.get("last_tick") or {} if status == 200 else {}
            return str(tick["at"]) if tick.get("ok") and not tick.get("standby") else None

        seen = [_wait("the daemon's first pass", last_pass, 300)]

        def one_pass() -> None:
            call(sock, "POST", "/v1/poke", timeout=5)
            seen.append(_wait("a pass", lambda: (a := last_pass()) != seen[-1] and a, 300))
        yield one_pass
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def main() -> None:
    n_pending = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    n_nodes = int(sys.argv[2]) if len(sys.argv) > 2 else 5_000
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    # the package's bytecode compiled first, as an installed wheel has it: where
    # PYTHONDONTWRITEBYTECODE is set, every run would otherwise compile each module afresh
    # (~0.15 s of the command here, none of it slurmscale's work)
    compileall.compile_dir(str(Path(__file__).resolve().parents[2] / "slurmscale"), quiet=1)
    root = Path(tempfile.mkdtemp(prefix="ss-bench-"))
    try:
        bin_dir = install(root, n_pending, 3_000, n_nodes, time.time())
        cfg = root / "c.yaml"
        data = canned_slurm.config(root, bin_dir, n_nodes)
        cfg.write_text(yaml.safe_dump(data))
        cli = [sys.executable, "-m", "slurmscale", "--config", str(cfg)]
        subprocess.run([*cli, "db", "upgrade"], check=True, stdout=subprocess.DEVNULL)
        live = [*cli, "plan", "--json", "--live"]
        out = json.loads(subprocess.run(live, check=True, capture_output=True).stdout)
        pending = sum(p["pending_jobs"] for p in out["pools"].values())
        # the reads plan makes, as plain commands in one shell
        reads = ["sh", "-c", f"{bin_dir}/scontrol show node -o >/dev/null; "
                 f"{bin_dir}/squeue >/dev/null; {bin_dir}/scontrol show res -o >/dev/null; "
                 f"{bin_dir}/sprio >/dev/null; {bin_dir}/scontrol show config >/dev/null"]
        base, slurm, whole = (statistics.median(timed(c, runs))
                              for c in ([sys.executable, "-c", "pass"], reads, live))
        plan = [*cli, "plan", "--json"]
        first, again = [], []
        with daemon(cfg, data) as one_pass:
            served = json.loads(subprocess.run(plan, check=True, capture_output=True).stdout)
            assert served["source"] == "daemon", served["source"]
            assert len(served["gangs"]) == len(out["gangs"]), "the same gangs, standings in"
            for _ in range(runs):
                one_pass()
                first += timed(plan, 1)
                again += timed(plan, 1)
        print(f"plan --json: {n_pending:,} pending + 3,000 running jobs, {n_nodes:,} nodes, "
              f"{canned_slurm.POOLS} pools ({pending:,} pending tasks counted, "
              f"{len(out['actions'])} actions, {len(out['gangs'])} gangs); medians of {runs}")
        print(f"  python -c pass                           {base * 1000:7.0f} ms")
        print(f"  the canned Slurm reads                   {slurm * 1000:7.0f} ms")
        for label, t in (("from the daemon, first ask after a pass", statistics.median(first)),
                         ("from the daemon, the same pass again", statistics.median(again)),
                         ("--live (computed by the command)", whole)):
            print(f"  plan --json {label:<40} {t * 1000:7.0f} ms  "
                  f"{'OK' if t < 1.0 else 'OVER'} (target < 1 s)")
    finally:
        done_with(root)


if __name__ == "__main__":
    main()
