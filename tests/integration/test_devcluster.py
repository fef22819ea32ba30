"""The dev cluster of docker-compose.slurm.yml, run here without Docker: each service's own
command from the compose file (ports moved to free ones), as separate processes sharing
loopback as the services share a network namespace. A 2-node gang runs through them."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from slurmscale.localcluster.cluster import AWS_ENV
from slurmscale.localcluster.postgres import pg_bin_dir
from slurmscale.localcluster.procs import Procs, free_port_range, release_port_range, wait_for
from tests.integration.conftest import _require_slurm

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]


def test_the_compose_services_run_a_gang(tmp_path: Path) -> None:
    _require_slurm()
    if pg_bin_dir() is None:
        pytest.fail("PostgreSQL missing") if os.environ.get("CI") else pytest.skip("no PG")
    services = yaml.safe_load((ROOT / "docker-compose.slurm.yml").read_text())["services"]
    base = free_port_range(3)
    ports = {"5432": str(base), "5000": str(base + 1), "9464": str(base + 2)}
    work = Path(tempfile.mkdtemp(prefix="ss-dev-"))
    os.chmod(work, 0o755)  # PostgreSQL runs as the postgres user
    paths = {"/var/lib/slurmscale-pg": str(work / "pg"), "/cluster": str(work / "cluster")}

    def argv(name: str) -> list[str]:
        cmd = list(services[name]["command"])
        if cmd[:2] == ["sh", "-c"]:  # the daemon's wait loop is the test's wait_for below
            cmd = shlex.split(cmd[2].split("exec ", 1)[1])
        out = []
        for a in cmd:
            for old, new in [*ports.items(), *paths.items()]:
                a = a.replace(old, new)
            out.append(a)
        if out[0] == "python":
            out[0] = sys.executable
        elif out[0] == "slurmscale":
            out[:1] = [sys.executable, "-m", "slurmscale"]
        return out

    (work / "log").mkdir(parents=True)
    procs = Procs(work / "log")
    env = {**os.environ, **AWS_ENV}
    ok = False
    try:
        procs.start("postgres", argv("postgres"), env=env)
        procs.start("moto", argv("moto"), env=env)
        wait_for("postgres", lambda: "postgres ready" in (work / "log" / "postgres.out")
                 .read_text(), 90)
        procs.start("cluster", argv("cluster"), env=env)
        cluster = work / "cluster"
        wait_for("the cluster service", lambda: "up in" in (work / "log" / "cluster.out")
                 .read_text(), 120)
        assert (cluster / "munge" / "munge.socket").is_socket()
        procs.start("daemon", argv("daemon"), env=env)
        wait_for("the daemon's socket", (cluster / "run" / "slurmscale.sock").is_socket, 60)
        slurm_env = {"PATH": "/usr/sbin:/usr/bin:/bin", "SLURM_CONF": str(cluster / "etc" /
                                                                          "slurm.conf")}
        job = subprocess.run(["sbatch", "--parsable", "-N", "2", "--gres=gpu:8", "-p",
                              "gpu-spot", "--wrap", "sleep 8"], env=slurm_env, check=True,
                             capture_output=True, text=True).stdout.strip()

        def done() -> bool:
            out = subprocess.run(["scontrol", "show", "job", "-o", job], env=slurm_env,
                                 capture_output=True, text=True).stdout
            assert "JobState=FAILED" not in out and "NODE_FAIL" not in out, out
            return "JobState=COMPLETED" in out
        wait_for(f"job {job} COMPLETED", done, 240)
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['9464']}/metrics",
                                    timeout=10) as r:
            metrics = r.read().decode()
        assert 'result="launched"} 1.0' in metrics
        st = subprocess.run([sys.executable, "-m", "slurmscale", "--config",
                             str(cluster / "slurmscale.yaml"), "status", "--json"], env=env,
                            capture_output=True, text=True, timeout=60)
        assert json.loads(st.stdout)["daemon"]["role"] == "leader"
        ok = True
    finally:
        procs.stop_all(order=["daemon", "cluster", "moto", "postgres"])
        release_port_range(base, 3)
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            for f in sorted((work / "log").glob("*.out")):
                print(f"----- {f.name} -----\n{f.read_text()[-3000:]}")
