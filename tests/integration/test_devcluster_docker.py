"""The dev cluster of docker-compose.slurm.yml in real containers, driven with the docker SDK:
a private engine (scripts/docker-engine.sh: vfs, no bridge, the debian:12 base made by
debootstrap), the image built, the services up on the host's network (free loopback ports),
a 2-node gang submitted through the containerised slurmctld: one CreateFleet in the
containerised moto, the job COMPLETED, the daemon's metrics scraped; then everything down and
removed - containers, network, volumes, the engine. The engine's data root stays under
/var/cache/slurmscale/docker: Docker's layer cache (keyed by each instruction and the files it
copies) makes the next build a cached one."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import boto3
import pytest

from slurmscale.localcluster.procs import free_port_range, release_port_range, wait_for

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
ENGINE = Path(os.environ.get("SLURMSCALE_DOCKER_DIR", "/var/cache/slurmscale/docker"))
PROJECT = "slurmscale-dev-test"
IMAGE = "slurmscale-dev:latest"
COMPOSE_HTTP_TIMEOUT = "600"  # seconds, as scripts/devcluster-docker.sh sets it


def _engine_usable() -> None:
    if os.geteuid() != 0 or shutil.which("dockerd") is None or shutil.which("docker-compose") \
            is None:
        why = "needs root, dockerd and docker-compose (scripts/setup.sh --tests)"
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)


def _compose(env: dict[str, str], *args: str, timeout: float = 600) -> str:
    p = subprocess.run(["docker-compose", "-p", PROJECT, "-f", str(ROOT /
                        "docker-compose.slurm.yml"), *args], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_the_compose_cluster_runs_a_gang_in_containers() -> None:
    import docker

    _engine_usable()
    started = subprocess.run([str(ROOT / "scripts" / "docker-engine.sh"), "start",
                              str(ENGINE)], capture_output=True, text=True, timeout=900)
    assert started.returncode == 0, started.stderr
    base = free_port_range(3)
    env = {**os.environ, "DOCKER_HOST": f"unix://{ENGINE}/docker.sock",
           "SLURMSCALE_DEV_NETWORK": "host", "SLURMSCALE_DEV_PG_PORT": str(base),
           "SLURMSCALE_DEV_MOTO_PORT": str(base + 1),
           "SLURMSCALE_DEV_METRICS_PORT": str(base + 2),
           # docker-compose's client gives up on the engine after 60 s by default, and
           # creating a container on vfs copies its image's layers whole: a CI run on a cold,
           # loaded machine timed out creating the first one
           "COMPOSE_HTTP_TIMEOUT": COMPOSE_HTTP_TIMEOUT}
    client = docker.DockerClient(base_url=env["DOCKER_HOST"], timeout=600)
    mine = {"label": f"com.docker.compose.project={PROJECT}"}
    up = False
    try:
        for ca in Path("/usr/local/share/ca-certificates").glob("*.crt"):
            shutil.copy2(ca, ROOT / "docker" / "local-ca" / ca.name)  # (see its README)
        t0 = time.monotonic()
        client.images.build(path=str(ROOT), dockerfile="docker/Dockerfile", tag=IMAGE,
                            network_mode="host", rm=True)
        # the image a rebuild replaced: vfs stores every layer whole (gigabytes each)
        client.images.prune(filters={"dangling": True})
        print(f"image built in {time.monotonic() - t0:.0f}s; engine data "
              f"{_du(ENGINE / 'root')}")
        up = True  # (a partial up is taken down too)
        _compose(env, "up", "-d", "--no-build")

        def services_running() -> bool:
            states = {c.labels["com.docker.compose.service"]: c.status
                      for c in client.containers.list(all=True, filters=mine)}
            assert not [s for s, st in states.items() if st == "exited"], states
            return set(states) == {"postgres", "moto", "cluster", "daemon"} and all(
                st == "running" for st in states.values())
        wait_for("the four services running", services_running, 120)
        (cluster,) = client.containers.list(filters={**mine, "label": [
            mine["label"], "com.docker.compose.service=cluster"]})
        (daemon,) = client.containers.list(filters={**mine, "label": [
            mine["label"], "com.docker.compose.service=daemon"]})
        wait_for("the cluster service up", lambda: b"up in" in cluster.logs(), 180)
        wait_for("the daemon's socket", lambda: daemon.exec_run(
            ["test", "-S", "/cluster/run/slurmscale.sock"]).exit_code == 0, 120)

        def slurm(cmd: str) -> str:
            r = cluster.exec_run(["sh", "-c",
                                  f"export SLURM_CONF=/cluster/etc/slurm.conf; {cmd}"])
            assert r.exit_code == 0, r.output.decode()
            return str(r.output.decode())
        job = slurm("cd /tmp && sbatch --parsable -N 2 --gres=gpu:8 -p gpu-spot "
                    "--wrap 'sleep 8'").strip()

        def done() -> bool:
            out = slurm(f"scontrol show job -o {job}")
            assert "JobState=FAILED" not in out and "NODE_FAIL" not in out, out
            return "JobState=COMPLETED" in out
        wait_for(f"job {job} COMPLETED", done, 300)
        ec2 = boto3.client("ec2", region_name="us-east-1",
                           endpoint_url=f"http://127.0.0.1:{base + 1}",
                           aws_access_key_id="testing", aws_secret_access_key="testing")
        fleets = ec2.describe_fleets()["Fleets"]
        assert len(fleets) == 1, fleets  # the whole gang in one CreateFleet
        with urllib.request.urlopen(f"http://127.0.0.1:{base + 2}/metrics", timeout=10) as r:
            assert 'result="launched"} 1.0' in r.read().decode()
        status = daemon.exec_run(["slurmscale", "--config", "/cluster/slurmscale.yaml",
                                  "status"])
        assert status.exit_code == 0, status.output.decode()
    finally:
        try:
            if up:
                _compose(env, "down", "-v", "--remove-orphans")
                left = (client.containers.list(all=True, filters=mine),
                        client.volumes.list(filters=mine),
                        client.networks.list(filters=mine))
                assert left == ([], [], []), left
        finally:
            client.close()
            subprocess.run([str(ROOT / "scripts" / "docker-engine.sh"), "stop", str(ENGINE)],
                           timeout=120, check=True)
            release_port_range(base, 3)
            for ca in (ROOT / "docker" / "local-ca").glob("*.crt"):
                ca.unlink()
    assert not (ENGINE / "docker.pid").exists(), "the engine is stopped"


def _du(path: Path) -> str:
    out = subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True).stdout
    return out.split()[0] if out else "?"
