"""`slurmscale check` (and `install`): each hook slurm.conf names, run as SlurmUser the way
slurmctld runs it (its environment only SLURM_CONF), in its dry-run mode (`--check`: nothing
is written). File modes say whether SlurmUser may execute the hook; only running it shows
that the interpreter its hooks.env names runs for that user (a venv on a Python under a 0700
home: slurmctld logs `program exit status of 126` on every resume, each node goes DOWN after
ResumeTimeout, and nothing in slurmscale saw it), that it imports slurmscale, and that the
config it reads validates.

Only root can run a program as another user; a `check` run by anyone else says it could not
try (a warning)."""

from __future__ import annotations

import os
import pwd
import subprocess
from dataclasses import dataclass
from pathlib import Path

from slurmscale.check import Problem

DRY_RUN = "--check"  # (hooks.CHECK: not imported, the hooks' module is kept light)


@dataclass(frozen=True)
class HookRun:
    program: str
    returncode: int
    output: str  # its last line (stdout, else stderr)


def run_hook(program: str, user: str, slurm_conf: str | None, timeout: float = 60.0
             ) -> HookRun:
    """`program --check` as `user` (setpriv: its uid, gid and groups), as slurmctld would."""
    env = {"SLURM_CONF": slurm_conf} if slurm_conf else {}
    argv = [program, DRY_RUN]
    if pwd.getpwnam(user).pw_uid != os.geteuid():
        argv = ["setpriv", f"--reuid={user}", f"--regid={pwd.getpwnam(user).pw_gid}",
                "--init-groups", "--", *argv]
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as e:
        return HookRun(program, -1, str(e))
    lines = (p.stdout.strip() or p.stderr.strip()).splitlines()
    return HookRun(program, p.returncode, lines[-1] if lines else "")


def gather_hook_runs(programs: list[str], user: str | None, slurm_conf: str | None
                     ) -> list[HookRun] | str:
    """Each program run as SlurmUser, or why none could be (a str)."""
    if user is None:
        return "SlurmUser is not a user here"
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        return f"SlurmUser {user} is not a user here"
    if os.geteuid() not in (0, uid):
        return f"only root (or {user}) can run the hooks as {user}: run check as root"
    return [run_hook(p, user, slurm_conf) for p in programs if Path(p).exists()]


def check_hook_runs(user: str | None, runs: list[HookRun] | str) -> list[Problem]:
    if isinstance(runs, str):
        return [Problem("warning", "hook_not_run", f"the hooks were not tried: {runs}")]
    out = []
    for r in runs:
        if r.returncode == 0:
            continue
        why = ("cannot start the Python its hooks.env names (SLURMSCALE_PYTHON: a Python "
               "under a home SlurmUser may not enter?)" if r.returncode in (126, 127)
               else "fails")
        out.append(Problem("error", "hook_run", f"{r.program}, run as SlurmUser {user} as "
                           f"slurmctld runs it, {why} (exit {r.returncode}): {r.output}"))
    return out
