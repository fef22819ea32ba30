"""Benchmark: `slurmscale report --since 30d --format html` on a month of a busy cluster's store
(SQLite): 60,000 jobs, 20,000 instances, 43,200 samples per pool (one a minute; 2 pools, or
POOLS), 100,000 events, against a baseline measured in the same run: reading those rows with
plain SQL (`select *` of the four tables), the least any report must do.

    .venv/bin/python -m tests.benchmarks.report_scale [JOBS [POOLS]]

A cron report must not take minutes; target: under 10 s for the month at 20 pools. Seeded
data, so every run reports on the same store.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert

from slurmscale.config_file import parse_config
from slurmscale.report.compute import build_report, nodes_up_steps
from slurmscale.report.render import MAX_POINTS, to_html
from slurmscale.store.repo import Store
from slurmscale.store.rows import EventRow, InstanceRow, JobRow, SampleRow
from tests.unit.conftest import base_config

END = datetime(2026, 11, 29, tzinfo=UTC)
START = END - timedelta(days=30)


def fill(store: Store, n_jobs: int, pools: list[str], seed: int = 11) -> None:
    rng = random.Random(seed)
    span = (END - START).total_seconds()

    def at(offset: float) -> datetime:
        return START + timedelta(seconds=offset)

    jobs, insts, events = [], [], []
    for j in range(n_jobs):
        sub = rng.uniform(0, span)
        start = sub + rng.expovariate(1 / 600)
        run = rng.expovariate(1 / 3600)
        jobs.append(JobRow(job_id=str(j), pool=rng.choice(["gpu-spot", "gpu-od"]),
                           user_name="u", num_nodes=rng.choice([1] * 8 + [2, 4, 8, 16]),
                           gpus_per_node=8, submitted_at=at(sub), started_at=at(start),
                           ended_at=at(start + run) if start + run < span else None))
    for i in range(n_jobs // 3):
        t = rng.uniform(0, span)
        insts.append(InstanceRow(instance_id=f"i-{i:017x}", node=f"spot-{i % 64}",
                                 pool=rng.choice(["gpu-spot", "gpu-od"]), gang_id="g",
                                 instance_type="p5.48xlarge",
                                 lifecycle=rng.choice(["spot", "on-demand"]),
                                 launch_template_version="1", state="terminated",
                                 launched_at=at(t), terminated_at=at(min(span, t + 7200))))
    kinds = ["launched", "released", "job_requeued", "scale_down", "launch_failed",
             "leak_terminated", "request_received"]
    for _ in range(n_jobs * 5 // 3):
        events.append(EventRow(at=at(rng.uniform(0, span)), kind=rng.choice(kinds),
                               message="x" * 80))
    samples = [{"at": at(m * 60.0), "pool": p, "nodes_up": rng.randrange(64),
                "nodes_busy": rng.randrange(64), "nodes_booting": 0, "nodes_held": 0,
                "pending_gpus": rng.randrange(512), "pending_gpu_hours": 1.0,
                "pending_gangs": 1}
               for m in range(int(span // 60)) for p in pools]
    with store.session() as s:
        s.add_all(jobs + insts + events)
        s.execute(insert(SampleRow), samples)
        s.commit()


def main() -> None:
    n_jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 60_000
    n_pools = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    d = Path(tempfile.mkdtemp(prefix="ss-bench-report-"))
    try:  # (the store, ~120 MB at the default size, removed whatever happens)
        conf = base_config(store_url=f"sqlite:///{d / 'state.db'}",
                           prices={"p5.48xlarge": {"spot": 40.0, "on-demand": 98.0}})
        for i in range(2, n_pools):  # more pools like the on-demand one
            conf["pools"].append({**conf["pools"][1], "name": f"gpu-{i}",
                                  "partition": f"gpu-{i}", "node_prefix": f"g{i}-"})
        cfg = parse_config(conf)
        store = Store(cfg.store_url)
        store.upgrade()
        t0 = time.perf_counter()
        fill(store, n_jobs, [p.name for p in cfg.pools])
        t_fill = time.perf_counter() - t0

        db = sqlite3.connect(d / "state.db")
        t0 = time.perf_counter()
        rows = sum(len(db.execute(f"select * from {t}").fetchall())  # noqa: S608 - fixed
                   for t in ("jobs", "instances", "events", "samples"))
        base = time.perf_counter() - t0
        db.close()

        t0 = time.perf_counter()
        r = build_report(cfg, store, START, END)
        t_compute = time.perf_counter() - t0
        t0 = time.perf_counter()
        page = to_html(r, store.sample_series(START, END, MAX_POINTS),
                       {p.name: p.gpus_per_node for p in cfg.pools},
                       (START.timestamp(), END.timestamp()),
                       nodes_up_steps(store.instances_between(START, END), START, END))
        t_html = time.perf_counter() - t0
        store.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    total = t_compute + t_html
    print(f"report over 30 days: {rows:,} rows ({n_jobs:,} jobs, {n_pools} pools), store "
          f"filled in {t_fill:.1f} s")
    print(f"  baseline (select * of the 4 tables) {base * 1000:8.0f} ms")
    print(f"  build_report                        {t_compute * 1000:8.0f} ms  "
          f"{t_compute / base:5.1f}x baseline")
    print(f"  to_html ({len(page) / 1e6:.1f} MB page)            {t_html * 1000:8.0f} ms  "
          f"{t_html / base:5.1f}x baseline")
    print(f"  whole report                        {total * 1000:8.0f} ms  "
          f"{'OK' if total < 10 else 'OVER'} (target < 10 s)")


if __name__ == "__main__":
    main()
