"""The report's HTML for a synthetic day of a two-pool cluster (a 6-minute burst of demand
at 10:00 included, met by four nodes up for 44 s) written by `slurmscale report --format
html`, and its screenshot by headless Chromium: docs/img/report-after.png.

    .venv/bin/python scripts/report_screenshot.py OUT.png

Run as root in a container (Chromium's sandbox needs user namespaces there)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from slurmscale.config_file import parse_config  # noqa: E402
from slurmscale.store.repo import Store  # noqa: E402
from slurmscale.store.rows import InstanceRow, JobRow, SampleRow  # noqa: E402
from tests.support.history import seed  # noqa: E402
from tests.unit.conftest import base_config  # noqa: E402

T0 = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
H, M = timedelta(hours=1), timedelta(minutes=1)


def _instance(iid: str, node: str, pool: str, lifecycle: str, start: datetime,
              end: datetime) -> InstanceRow:
    return InstanceRow(instance_id=iid, node=node, pool=pool, gang_id="g",
                       instance_type="p5.48xlarge", lifecycle=lifecycle,
                       launch_template_version="1", state="terminated", launched_at=start,
                       terminated_at=end)


def page(d: Path) -> Path:
    """The day seeded into a store, and the report's HTML as `slurmscale report` writes it."""
    data = base_config(store_url=f"sqlite:///{d / 'state.db'}", prices={
        "p5.48xlarge": {"spot": 40.0, "on-demand": 100.0}})
    cfg = parse_config(data)
    store = Store(cfg.store_url)
    store.upgrade()
    instances = (
        [_instance(f"i{k}", f"spot-{k}", "gpu-spot", "spot", T0 + k * H, T0 + (k + 5) * H)
         for k in range(1, 12)]
        + [_instance(f"o{k}", f"od-{k}", "gpu-od", "on-demand", T0 + 2 * k * H,
                     T0 + (2 * k + 6) * H) for k in range(1, 4)]
        # a 44-second burst at 10:00: four spot nodes up and gone again (the chart's steps
        # come from the instances' own launch and termination, so it shows)
        + [_instance(f"b{k}", f"spot-{20 + k}", "gpu-spot", "spot", T0 + 10 * H,
                     T0 + 10 * H + timedelta(seconds=44)) for k in range(4)])
    seed(store, instances)
    store.add_job_starts([JobRow(
        job_id=str(j), pool="gpu-spot" if j % 3 else "gpu-od", user_name="alice",
        num_nodes=[1, 2, 1, 4][j % 4], gpus_per_node=8, submitted_at=T0 + j * 20 * M,
        started_at=T0 + j * 20 * M + (j * 7) % 45 * M, ended_at=T0 + j * 20 * M + 50 * M)
        for j in range(60)])
    rows = []
    for i in range(24 * 60):
        at = T0 + i * M
        for pool in ("gpu-spot", "gpu-od"):  # (the minute samples agree with the instances)
            up = sum(1 for x in instances if x.pool == pool and x.launched_at <= at
                     and (x.terminated_at is None or at < x.terminated_at))
            burst = 4 if i == 600 and pool == "gpu-spot" else 0
            rows.append(SampleRow(at=at, pool=pool, nodes_up=up, nodes_busy=max(0, up - 1),
                                  nodes_booting=0, nodes_held=0,
                                  pending_gpus=8 * (burst + (i % 97 == 0) * 3),
                                  pending_gpu_hours=0.0, pending_gangs=0))
    store.add_samples(rows)
    conf, html = d / "slurmscale.yaml", d / "report.html"
    conf.write_text(yaml.safe_dump(data))
    os.chmod(conf, 0o644)
    subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(conf), "report",
                    "--format", "html", "--since", T0.isoformat(),
                    "--until", (T0 + 24 * H).isoformat(), "-o", str(html)], check=True)
    return html


def main() -> None:
    out = Path(sys.argv[1]).resolve()
    with tempfile.TemporaryDirectory() as d:
        html = page(Path(d))
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=1000,1250",
                        f"--screenshot={out}", html.as_uri()], check=True,
                       capture_output=True, timeout=120)


if __name__ == "__main__":
    main()
