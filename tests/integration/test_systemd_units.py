"""The shipped systemd units as systemd reads them, and the daemon run exactly as its unit says.

`systemd-analyze verify` checks every unit (with ExecStart pointing at this checkout's
virtualenv, the one path an install changes). Then the daemon runs with the unit's own User=,
Group=, directories (made as systemd makes RuntimeDirectory=, StateDirectory= and
LogsDirectory=: the unit's user's, in its mode) and its `+` ExecStartPre lines, under a
temporary root instead of /; a hook run as SlurmUser (Debian's `slurm`, as slurmctld runs
it) must reach the daemon's socket and write its log. The unit this replaced (User=root) fails
here: its RuntimeDirectory is root's 0750, so the hook cannot reach the socket ("daemon not
reachable"), and its LogsDirectory root's, so the hook's log line is lost."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.fakes import slurm_down
from tests.unit.conftest import base_config

pytestmark = pytest.mark.slurm  # (root: setpriv, runuser and the slurm user)

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "slurm_conf" / "systemd"
INSTALLED = "/usr/local/lib/slurmscale/venv/bin/slurmscale"
SLURMSCALE = Path(sys.executable).with_name("slurmscale")
SLURM_USER = "slurm"
# where each of systemd's directory kinds lives, and where this test puts it
DIRECTORIES = {"RuntimeDirectory": "/run", "StateDirectory": "/var/lib",
               "LogsDirectory": "/var/log"}


def service_section(path: Path) -> dict[str, list[str]]:
    """The [Service] section's settings, each key's values in order (ExecStartPre= repeats)."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def test_the_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    for unit in sorted(UNITS.iterdir()):
        (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALLED, str(SLURMSCALE)))
    p = subprocess.run(["systemd-analyze", "verify", *sorted(str(u) for u in
                                                            tmp_path.iterdir())],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr


@pytest.fixture
def fake_root() -> Iterator[Path]:
    """/ for the unit: a directory SlurmUser may walk into (mkdtemp's is root's 0700)."""
    root = Path(tempfile.mkdtemp(prefix="ss-unit-"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _under(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def _as_systemd_makes_them(svc: dict[str, list[str]], root: Path) -> dict[str, Path]:
    """The unit's directories, owned and moded as systemd makes them (systemd.exec(5): the
    unit's User: and Group:, mode *DirectoryMode=, 0755 by default)."""
    user = pwd.getpwnam(svc.get("User", ["root"])[-1])
    gid = grp.getgrnam(svc["Group"][-1]).gr_gid if "Group" in svc else user.pw_gid
    made = {}
    for kind, base in DIRECTORIES.items():
        for name in svc.get(kind, [""])[-1].split():
            d = _under(root, f"{base}/{name}")
            d.mkdir(parents=True)
            os.chown(d, user.pw_uid, gid)
            os.chmod(d, int(svc.get(f"{kind}Mode", ["0755"])[-1], 8))
            made[kind] = d
    for line in svc.get("ExecStartPre", []):  # "+": run as root, sandboxing not applied
        assert line.startswith("+"), f"an ExecStartPre this test does not model: {line}"
        argv = [a if not a.startswith("/var/") else str(_under(root, a))
                for a in line[1:].split()]
        subprocess.run(argv, check=True, timeout=30)
    return made


def _first_pass_done(sock: Path) -> bool:
    from slurmscale.api_client import ApiError, call

    if not sock.is_socket():
        return False
    try:
        _, health = call(str(sock), "GET", "/v1/health", timeout=2)
    except (ApiError, OSError):
        return False
    return isinstance(health, dict) and bool(health.get("last_tick"))


def daemon_poked_by_a_hook(svc: dict[str, list[str]], argv: list[str], env: dict[str, str],
                           sock: Path, hook: Path, node: str
                           ) -> tuple[subprocess.CompletedProcess[str], int, str]:
    """The daemon (`argv`) as the unit's User= and Group= run it, until its first pass ended;
    the hook for `node`, run as SlurmUser (as slurmctld runs it), against it; then SIGTERM:
    (the hook's run, the daemon's exit code, its output)."""
    daemon = subprocess.Popen(
        ["/usr/bin/setpriv", f"--reuid={svc.get('User', ['root'])[-1]}",
         f"--regid={svc.get('Group', ['root'])[-1]}", "--init-groups", "--", *argv], env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, cwd="/")
    try:
        deadline = time.monotonic() + 60
        while not _first_pass_done(sock):  # (the hook's poke waits 0.3 s at most: a daemon
            # busy with its start-up under a loaded suite would miss it for a reason that is
            # not the socket's permissions, which is what is tested)
            assert daemon.poll() is None, daemon.communicate()[0].decode()
            assert time.monotonic() < deadline, "the daemon's first pass never ended"
            time.sleep(0.2)
        run = subprocess.run(["/usr/sbin/runuser", "-u", SLURM_USER, "--", str(hook), node],
                             env={"SLURM_CONF": "/etc/slurm/slurm.conf"},
                             capture_output=True, text=True, timeout=60, cwd="/")
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        out = daemon.communicate(timeout=60)[0].decode()
    return run, daemon.returncode, out


def unit_env(svc: dict[str, list[str]]) -> dict[str, str]:
    """The unit's Environment= over systemd's PATH, with AWS keys that reach no AWS."""
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "AWS_ACCESS_KEY_ID": "x",
            "AWS_SECRET_ACCESS_KEY": "x", "AWS_EC2_METADATA_DISABLED": "true",
            **dict(e.split("=", 1) for e in svc.get("Environment", []))}


def text_of(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_the_daemon_run_as_its_unit_says_answers_a_hook_run_as_slurm_user(
        fake_root: Path) -> None:
    svc = service_section(UNITS / "slurmscale.service")
    made = _as_systemd_makes_them(svc, fake_root)
    user, group = svc.get("User", ["root"])[-1], svc.get("Group", ["root"])[-1]
    spool = _under(fake_root, "/var/spool/slurmscale")
    logs = made["LogsDirectory"]
    cfg = fake_root / "etc" / "slurmscale.yaml"
    cfg.parent.mkdir()
    cfg.write_text(yaml.safe_dump(base_config(
        socket_path=str(made["RuntimeDirectory"] / "slurmscale.sock"),
        store_url=f"sqlite:///{made['StateDirectory'] / 'slurmscale.db'}",
        spool_dir=str(spool), log_file=str(logs / "slurmscale.log"),
        hook_log_file=str(logs / "hooks.log"),
        aws={"endpoint_url": "http://127.0.0.1:9", "max_attempts": 1},
        slurm={"bin_dir": str(slurm_down(fake_root)), "timeout_s": 5},
        daemon={"tick_seconds": 30})))
    cfg.chmod(0o644)
    hooks = fake_root / "hooks"
    shutil.copytree(REPO / "resume_suspend", hooks, symlinks=True)
    (hooks / "hooks.env").write_text(f"SLURMSCALE_PYTHON={sys.executable}\n"
                                     f"SLURMSCALE_CONFIG={cfg}\n"
                                     f"SLURMSCALE_HOOK_VIEW={spool / 'hookview.json'}\n")
    env = {**unit_env(svc), "SLURMSCALE_CONFIG": str(cfg)}
    sock = made["RuntimeDirectory"] / "slurmscale.sock"
    hook, rc, out = daemon_poked_by_a_hook(svc, [str(SLURMSCALE), "daemon"], env, sock,
                                           hooks / "slurmscale-resume", "spot-1")
    hook_log = text_of(logs / "hooks.log")
    st = os.stat(sock) if sock.exists() else None
    print(f"unit User={user} Group={group}; hook exit {hook.returncode}; hook log: "
          f"{hook_log.strip()[-200:]!r}")
    assert hook.returncode == 0, hook.stderr
    assert "daemon poked" in hook_log, f"the hook's log: {hook_log!r}"
    assert rc == 0, out
    assert st is None, "the daemon left its socket behind"
    owner = pwd.getpwnam(user)
    assert os.stat(logs / "hooks.log").st_uid == pwd.getpwnam(SLURM_USER).pw_uid
    assert stat.S_IMODE(os.stat(made["RuntimeDirectory"]).st_mode) & 0o007 == 0
    assert os.stat(made["StateDirectory"] / "slurmscale.db").st_uid == owner.pw_uid
