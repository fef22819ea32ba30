"""Benchmark: wall time of the resume hook as slurmctld runs it (no PATH, closed stdio),
against a bare `python -c pass` measured in the same run as the baseline.

    .venv/bin/python -m tests.benchmarks.hook_latency [N]

Needs no Slurm and no daemon (the hook records to the spool either way).
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.unit.conftest import base_config

REPO = Path(__file__).resolve().parents[2]


def _time(cmd: list[str], env: dict[str, str], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    root = Path(tempfile.mkdtemp(prefix="ss-bench-"))
    try:
        hooks = root / "hooks"
        hooks.mkdir()
        shutil.copy2(REPO / "resume_suspend" / "slurmscale-hook", hooks / "slurmscale-hook")
        (hooks / "slurmscale-resume").symlink_to("slurmscale-hook")
        cfg = base_config(spool_dir=str(root / "spool"), socket_path=str(root / "none.sock"),
                          hook_log_file=str(root / "hooks.log"))
        (root / "c.yaml").write_text(yaml.safe_dump(cfg))
        (hooks / "hooks.env").write_text(f"SLURMSCALE_PYTHON={sys.executable}\n"
                                         f"SLURMSCALE_CONFIG={root / 'c.yaml'}\n")
        rf = root / "rf.json"
        rf.write_text(json.dumps({"jobs": [{"job_id": 1, "nodes": "spot-[1-8]"}],
                                  "all_nodes": "spot-[1-8]"}))
        env = {"SLURM_RESUME_FILE": str(rf)}
        base = _time([sys.executable, "-c", "pass"], env, n)
        hook = _time([str(hooks / "slurmscale-resume"), "spot-[1-8]"], env, n)
        b, h = statistics.median(base), statistics.median(hook)
        print(f"python -c pass   median {b * 1000:7.1f} ms  (baseline)")
        print(f"resume hook      median {h * 1000:7.1f} ms  max {max(hook) * 1000:.1f} ms  "
              f"= {h / b:.1f}x baseline  ({n} runs, 8-node gang, daemon down)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
