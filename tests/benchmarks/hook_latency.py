"""Benchmark: wall time of the resume hook as slurmctld runs it (no PATH, closed stdio),
against a bare `python -c pass` measured in the same run as the baseline: with the config's
compiled view current (every hook but the first after a config change), and with no view
(each call validates the whole config: what every hook did before the view).

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
        (root / "spool").mkdir()
        env_file = (f"SLURMSCALE_PYTHON={sys.executable}\n"
                    f"SLURMSCALE_CONFIG={root / 'c.yaml'}\n")
        rf = root / "rf.json"
        rf.write_text(json.dumps({"jobs": [{"job_id": 1, "nodes": "spot-[1-8]"}],
                                  "all_nodes": "spot-[1-8]"}))
        env = {"SLURM_RESUME_FILE": str(rf)}
        hook = [str(hooks / "slurmscale-resume"), "spot-[1-8]"]
        base = _time([sys.executable, "-c", "pass"], env, n)
        # a view nobody can write: every call validates the config whole
        (hooks / "hooks.env").write_text(env_file + "SLURMSCALE_HOOK_VIEW=/nonexistent/v.json\n")
        slow = _time(hook, env, n)
        view = root / "spool" / "v.json"
        (hooks / "hooks.env").write_text(env_file + f"SLURMSCALE_HOOK_VIEW={view}\n")
        _time(hook, env, 1)  # compiles the view
        assert view.exists(), "the first hook call wrote no view"
        fast = _time(hook, env, n)
        b = statistics.median(base)
        print(f"python -c pass          median {b * 1000:7.1f} ms  (baseline)")
        for name, t in (("hook, view current", fast), ("hook, no view", slow)):
            m = statistics.median(t)
            print(f"{name:<22}  median {m * 1000:7.1f} ms  max {max(t) * 1000:6.1f} ms  "
                  f"= {m / b:.1f}x baseline, +{(m - b) * 1000:.0f} ms  ({n} runs, 8-node "
                  "gang, daemon down)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
