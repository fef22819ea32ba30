"""Benchmark: a pass's time after a long history against an empty one (issue 42: within
1.2x after 10,000 recorded jobs). Two worlds in the same run, each the daemon's own
`Reconciler.tick` on the SQL store (SQLite) and EC2 (a moto server process, behind the real
`EC2Cloud`), with the same 8 busy nodes (in-memory Slurm: this measures slurmscale and EC2,
not slurmctld):

- empty: a fresh store, no instance but the 8 running;
- history: the store holding JOBS ended jobs, as many terminated instances, done requests
  and gangs, 4 events a job and a preemption every 5 jobs.

EC2 holds the same in both: the 8 running and TERMINATED terminated instances of the cluster
(EC2 lists them for up to an hour after their end).

"instances listed" is how many instances EC2's answers handed the pass: on EC2, whose filters
run on its side, that is what a listing costs. moto filters every instance it ever held in
Python, its tag filter slower the more it holds (2,000 terminated: 6 s a listing), so keep
TERMINATED near an hour's worth: the default 200.

Prints each world's mean pass (and the split by phase and wait, `daemon/pass_times.py`) and
the ratio; exits 1 above 1.2.

    .venv/bin/python -m tests.benchmarks.pass_history [JOBS] [TERMINATED] [PASSES]
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
from sqlalchemy import insert

from slurmscale.cloud.ec2 import EC2Cloud
from slurmscale.cloud.protocol import TAG_CLUSTER, TAG_GANG, TAG_NODE
from slurmscale.config import AwsSettings
from slurmscale.config_file import parse_config
from slurmscale.daemon.pass_times import PassTimes
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.daemon.wrapping import calls_through
from slurmscale.model import QueueJob, SlurmNode
from slurmscale.store import tables as t
from slurmscale.store.repo import Store
from tests.support.fakes import FakeSlurm
from tests.unit.conftest import base_config

NODES = 8
AMI = "ami-0a1b2c3d4e5f60718"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def moto(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("moto server did not start")


def launch(ec2: object, count: int, cluster: str, prefix: str) -> list[str]:
    ids: list[str] = []
    while len(ids) < count:
        n = min(500, count - len(ids))
        got = ec2.run_instances(  # type: ignore[attr-defined]
            ImageId=AMI, InstanceType="p5.48xlarge", MinCount=n, MaxCount=n,
            TagSpecifications=[{"ResourceType": "instance", "Tags": [
                {"Key": TAG_CLUSTER, "Value": cluster}, {"Key": TAG_GANG, "Value": "g"},
                {"Key": TAG_NODE, "Value": prefix}]}])
        ids += [i["InstanceId"] for i in got["Instances"]]
    return ids


def world(root: Path, url: str, jobs: int, terminated: int
          ) -> tuple[Reconciler, Listed, Store]:
    cfg = parse_config(base_config(store_url=f"sqlite:///{root / 'state.db'}",
                                   spool_dir=str(root / "spool"),
                                   socket_path=str(root / "sock"),
                                   hook_log_file=str(root / "hooks.log")))
    store = Store(cfg.store_url)
    store.upgrade()
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=url)
    if terminated:
        old = launch(ec2, terminated, cfg.cluster_name, "spot-old")
        for at in range(0, len(old), 500):
            ec2.terminate_instances(InstanceIds=old[at:at + 500])
    live = launch(ec2, NODES, cfg.cluster_name, "spot-live")
    now = datetime.now(UTC)
    with store.engine.begin() as db:
        db.execute(insert(t.instances), [dict(
            instance_id=iid, node=f"spot-{k + 1}", pool="gpu-spot", gang_id="g",
            instance_type="p5.48xlarge", lifecycle="spot", launch_template_version="3",
            state="running", launched_at=now - timedelta(minutes=5))
            for k, iid in enumerate(live)])
        if jobs:
            back = [now - timedelta(days=13, seconds=-k * 100) for k in range(jobs)]
            db.execute(insert(t.jobs), [dict(
                job_id=str(k), pool="gpu-spot", user_name="u", num_nodes=1 + k % 4,
                gpus_per_node=8, submitted_at=b, started_at=b, time_limit_s=3600,
                ended_at=b + timedelta(seconds=60)) for k, b in enumerate(back)])
            db.execute(insert(t.instances), [dict(
                instance_id=f"i-{k:017x}", node=f"spot-{1 + k % NODES}", pool="gpu-spot",
                gang_id=f"r{k}/job{k}/gpu-spot", instance_type="p5.48xlarge",
                lifecycle="spot", launch_template_version="3", state="terminated",
                launched_at=b, terminated_at=b + timedelta(seconds=90))
                for k, b in enumerate(back)])
            db.execute(insert(t.requests), [dict(
                id=f"r{k}", kind="resume", hostlist="spot-1", nodes='["spot-1"]',
                received_at=b, status="done", processed_at=b) for k, b in enumerate(back)])
            db.execute(insert(t.gangs), [dict(
                id=f"r{k}/job{k}/gpu-spot", pool="gpu-spot", nodes='["spot-1"]', size=1,
                job_ids=f"[{k}]", request_ids=f'["r{k}"]', status="done",
                client_token=f"tok-{k}", launch_template_version="3", created_at=b,
                updated_at=b) for k, b in enumerate(back)])
            db.execute(insert(t.events), [dict(
                at=b, kind="launch_requested", node="spot-1", message="history")
                for b in back for _ in range(4)])
            db.execute(insert(t.preemptions), [dict(
                at=b, job_id=str(k), node="spot-1", instance_id=f"i-{k:017x}",
                pool="gpu-spot", instance_type="p5.48xlarge", lifecycle="spot",
                kind="spot_warning") for k, b in enumerate(back) if k % 5 == 0])
    slurm = FakeSlurm()
    for k in range(NODES):
        n = f"spot-{k + 1}"
        slurm.table[n] = SlurmNode(n, "ALLOCATED+CLOUD", "10.0.0.1", n,
                                   partitions=("gpu-spot",))
        slurm.queue.append(QueueJob(str(jobs + k), ("gpu-spot",), 1, 8, 3600, "", "", 1, "u",
                                    "RUNNING", nodelist=n))
    listed = Listed()
    cloud = calls_through(EC2Cloud(AwsSettings(endpoint_url=url, max_attempts=1)), "EC2",
                          listed.around)
    return Reconciler(cfg, store, slurm, cloud, times=PassTimes()), listed, store


class Listed:
    """Counts the instances EC2's listings hand the pass (what a pass costs on EC2, whose
    filters run server-side: moto's own filtering grows with every instance it keeps)."""

    def __init__(self) -> None:
        self.n = 0

    def around(self, what: str, method: Callable[..., Any], args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> Any:
        got = method(*args, **kwargs)
        if what == "EC2.find":
            self.n += len(got)
        return got


def measure(r: Reconciler, listed: Listed, passes: int
            ) -> tuple[float, dict[str, float]]:
    r.tick()  # (start-up: cold caches, the first reads)
    took, split = [], {}  # type: ignore[var-annotated]
    listed.n = 0
    for _ in range(passes):
        t0 = time.perf_counter()
        res = r.tick()
        took.append(time.perf_counter() - t0)
        for k, v in [*res.phase_seconds.items(),
                     *((f"wait:{w}", s) for w, s in res.wait_seconds.items())]:
            split[k] = split.get(k, 0.0) + v / passes
    split["listed"] = listed.n / passes
    return statistics.mean(took), split


def main() -> int:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    terminated = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    passes = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    out = {}
    for name, j in {"empty": 0, "history": jobs}.items():
        port = free_port()
        server = moto(port)
        try:
            with tempfile.TemporaryDirectory(prefix="ss-bench-history-") as d:
                r, listed, store = world(Path(d), f"http://127.0.0.1:{port}", j, terminated)
                out[name] = measure(r, listed, passes)
                store.close()
        finally:
            server.terminate()
            server.wait(10)
    (a, sa), (b, sb) = out["empty"], out["history"]
    print(f"{passes} passes each; history: {jobs} ended jobs (and their instances, requests, "
          f"gangs, {4 * jobs} events); EC2 holds {NODES} running and {terminated} "
          "terminated instances in both")
    print(f"  mean pass: empty {a * 1000:.1f} ms, history {b * 1000:.1f} ms: "
          f"{b / a:.2f}x (goal: at most 1.2x)")
    print(f"  instances EC2's answers listed per pass: empty {sa.pop('listed'):.0f}, "
          f"history {sb.pop('listed'):.0f}")
    print("  ms per pass        empty   history")
    for k in sorted(sb, key=lambda k: -sb[k]):
        if max(sa.get(k, 0.0), sb[k]) >= 0.0005:
            print(f"  {k:<18} {sa.get(k, 0.0) * 1000:6.1f}   {sb[k] * 1000:7.1f}")
    print(json.dumps({"empty_ms": round(a * 1000, 2), "history_ms": round(b * 1000, 2),
                      "ratio": round(b / a, 3)}))
    return 0 if b / a <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
