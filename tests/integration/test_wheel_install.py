"""The wheel alone wires a head node: built from this checkout, installed into a fresh
virtualenv, `slurmscale install --prefix` puts the hooks, units, example config and
directories in place (idempotent; a file changed by hand is kept, the new one beside it);
then, as an admin would after editing the config, the daemon runs as the installed unit says
and the installed hook, run as SlurmUser, reaches it. Nothing of the checkout is used after
the build. Before: the wheel carried no hooks, units, config, policies or dashboard."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.test_systemd_units import (
    daemon_poked_by_a_hook,
    service_section,
    text_of,
    unit_env,
)
from tests.support.fakes import slurm_down

pytestmark = pytest.mark.slurm  # (root: chown, setpriv, runuser and the slurm user)

REPO = Path(__file__).resolve().parents[2]
SLURM_USER = "slurm"


@pytest.fixture(scope="module")
def fresh_venv() -> Iterator[Path]:
    """A virtualenv with nothing but the built wheel and its dependencies, on an interpreter
    SlurmUser may run (the one this suite's virtualenv is made from)."""
    top = Path(tempfile.mkdtemp(prefix="ss-wheel-"))
    os.chmod(top, 0o755)
    wheels = top / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(wheels), str(REPO)], check=True, capture_output=True, timeout=600)
    (wheel,) = wheels.glob("slurmscale-*.whl")
    base = Path(os.path.realpath(sys.executable))
    subprocess.run([str(base), "-m", "venv", str(top / "venv")], check=True, timeout=120)
    subprocess.run([str(top / "venv/bin/pip"), "install", "-q", str(wheel)], check=True,
                   capture_output=True, timeout=900)
    yield top / "venv"
    shutil.rmtree(top, ignore_errors=True)


def _install(venv: Path, prefix: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin/slurmscale"), "install", "--prefix", str(prefix),
                           "--slurm-user", SLURM_USER], capture_output=True, text=True,
                          timeout=120, cwd="/")


def test_the_wheel_installs_everything_a_head_node_needs(fresh_venv: Path) -> None:
    prefix = Path(tempfile.mkdtemp(prefix="ss-root-"))
    os.chmod(prefix, 0o755)
    try:
        first = _install(fresh_venv, prefix)
        assert first.returncode == 0, first.stdout + first.stderr
        hooks = prefix / "usr/local/lib/slurmscale/resume_suspend"
        for name in ("slurmscale-resume", "slurmscale-suspend", "slurmscale-resume-fail"):
            assert os.readlink(hooks / name) == "slurmscale-hook"
        assert os.access(hooks / "slurmscale-hook", os.X_OK)
        unit = prefix / "etc/systemd/system/slurmscale.service"
        svc = service_section(unit)
        assert svc["User"] == [SLURM_USER] and svc["ExecStart"] == [
            f"{fresh_venv / 'bin/slurmscale'} daemon"]
        for doc in ("iam-policy.json", "node-iam-policy.json", "grafana-dashboard.json"):
            assert (prefix / "usr/local/share/doc/slurmscale" / doc).is_file()
        slurm = pwd.getpwnam(SLURM_USER).pw_uid
        for d in ("var/spool/slurmscale", "var/log/slurmscale", "var/lib/slurmscale"):
            st = os.stat(prefix / d)
            assert (st.st_uid, st.st_mode & 0o777) == (slurm, 0o750), d
        again = _install(fresh_venv, prefix)  # idempotent: nothing to do
        lines = again.stdout.splitlines()
        assert again.returncode == 0 and all(
            ln.startswith("unchanged") for ln in lines[:-2]), again.stdout
        # the installed hook run as SlurmUser, as slurmctld would (its dry run)
        assert lines[-2] == (f"tried      {prefix}/usr/local/lib/slurmscale/resume_suspend/"
                             f"slurmscale-resume as {SLURM_USER}, as slurmctld runs it: it runs")
        unit.write_text(unit.read_text() + "# a site's edit\n")
        kept = _install(fresh_venv, prefix)
        assert kept.returncode == 1 and f"refuse {unit}" in kept.stdout
        assert unit.read_text().endswith("# a site's edit\n")
        assert (unit.parent / "slurmscale.service.new").is_file()

        # the README's next steps, as an admin takes them: edit the config, start the unit
        cfg_path = prefix / "etc/slurmscale/slurmscale.yaml"
        cfg = yaml.safe_load(cfg_path.read_text())
        run = prefix / "run/slurmscale"  # (systemd's RuntimeDirectory=: the unit's user's)
        run.mkdir(parents=True)
        os.chown(run, slurm, pwd.getpwnam(SLURM_USER).pw_gid)
        os.chmod(run, 0o750)
        logs = prefix / "var/log/slurmscale"
        cfg.update(socket_path=str(run / "slurmscale.sock"),
                   log_file=str(logs / "slurmscale.log"), hook_log_file=str(logs / "hooks.log"),
                   aws={"region": "us-east-1", "endpoint_url": "http://127.0.0.1:9",
                        "max_attempts": 1},
                   slurm={"bin_dir": str(slurm_down(prefix)), "timeout_s": 5})
        cfg_path.write_text(yaml.safe_dump(cfg))
        svc = service_section(unit.parent / "slurmscale.service.new")
        for line in svc.get("ExecStartPre", []):
            subprocess.run(line.lstrip("+").split(), check=True, timeout=30)
        hook, rc, out = daemon_poked_by_a_hook(
            svc, svc["ExecStart"][0].split(), unit_env(svc), run / "slurmscale.sock",
            hooks / "slurmscale-resume", "spot-p5-1")
        log = text_of(logs / "hooks.log")
        print(f"installed {len(first.stdout.splitlines()) - 1} items; hook: {log.strip()[-160:]}")
        assert hook.returncode == 0, hook.stderr
        assert "daemon poked" in log, log
        assert rc == 0, out
    finally:
        shutil.rmtree(prefix, ignore_errors=True)
