"""docker-compose.slurm.yml, statically: Debian's docker-compose accepts it and each
service's command is checked against this package (the module exists, its arguments parse).
tests/integration/test_devcluster_docker.py builds it and runs it in containers."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import click
import pytest
import yaml

from slurmscale.cli import cli
from slurmscale.localcluster.devcluster import parser
from tests.support.compose import COMPOSE, services

ROOT = Path(__file__).resolve().parents[2]


def _services() -> dict[str, dict]:
    return services()


def test_docker_compose_accepts_the_file() -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("CI must validate the compose file: docker-compose missing")
        pytest.skip("needs Debian's docker-compose")
    p = subprocess.run([exe, "-f", str(COMPOSE), "config"], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
    assert set(yaml.safe_load(p.stdout)["services"]) == {"postgres", "moto", "cluster",
                                                          "daemon"}


def test_every_service_command_exists_in_this_package() -> None:
    services = _services()
    for name, svc in services.items():
        argv = list(svc["command"])
        if argv[:2] == ["sh", "-c"]:
            argv = shlex.split(argv[2].split("exec ", 1)[1])
        if argv[0] == "setpriv":  # the daemon as SlurmUser, as the systemd unit runs it
            assert "--reuid=slurm" in argv and "--regid=slurm" in argv, name
            argv = argv[next(i for i, a in enumerate(argv) if not a.startswith("-") and i):]
        if argv[0] == "python":
            assert argv[1] == "-m" and importlib.util.find_spec(argv[2]) is not None, name
            if argv[2] == "slurmscale.localcluster.devcluster":
                parser().parse_args(argv[3:])
        else:
            assert argv[0] == "slurmscale", name
            ctx = click.Context(cli, info_name="slurmscale", obj={})
            _, cmd, rest = cli.resolve_command(ctx, argv[3:])  # after --config FILE
            assert cmd is not None
            cmd.make_context(argv[3], rest, parent=ctx)
        if name != "postgres":
            assert svc["network_mode"] == "service:postgres", "one namespace: loopback only"
    dockerfile = (ROOT / services["cluster"]["build"]["dockerfile"]).read_text()
    for pkg in ("slurmctld", "slurmd", "munge", "postgresql", "python3-venv"):
        assert pkg in dockerfile
