"""`slurmscale install`: the files and directories a Slurm head node needs besides the Python
package, from the package itself (slurmscale/shipped.py), so a wheel is enough.

Under `prefix` (/ by default; another root puts everything, and every path written into the
files, under it): the hooks and their hooks.env (this interpreter, the config), the systemd
units (ExecStart this installation's `slurmscale`, User/Group the SlurmUser), the example
config (only where none is), the logrotate snippet, the IAM policies and the dashboard, and
the spool, log and state directories, SlurmUser's, 0750.

Idempotent, and never clobbers an admin's edit: a record of what it wrote
(`var/lib/slurmscale/installed.json`, each file's SHA-256) tells a file it wrote and nobody
changed since (replaced by the new version) from one changed by hand (left alone, the new
version written beside it as `<file>.new`, exit 1). Each action is one line."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import sys
from dataclasses import dataclass
from pathlib import Path

from slurmscale.shipped import HOOK_LINKS, shipped

INSTALLED_VENV = "/usr/local/lib/slurmscale/venv/bin/slurmscale"
RECORD = "var/lib/slurmscale/installed.json"


class InstallError(RuntimeError):
    """Bad input (a user that does not exist, a prefix that is not a directory): one line."""


@dataclass(frozen=True)
class Planned:
    path: Path
    content: bytes
    mode: int
    kind: str  # "file": replaced when unchanged since written; "config": never replaced


@dataclass
class InstallOutcome:
    lines: list[str]
    refused: int = 0


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rewrite(text: str, prefix: Path, user: str, group: str) -> str:
    """A shipped unit or config for this installation: its slurmscale, its SlurmUser, and
    every absolute path slurmscale owns under `prefix`."""
    exe = str(Path(sys.executable).with_name("slurmscale"))
    text = text.replace(INSTALLED_VENV, exe)
    for was, now in (("User=slurm\n", f"User={user}\n"), ("Group=slurm\n", f"Group={group}\n"),
                     ("-o slurm -g slurm", f"-o {user} -g {group}"),
                     (" slurm slurm\n", f" {user} {group}\n")):  # (logrotate's create, su)
        text = text.replace(was, now)
    if str(prefix) != "/":
        for root in ("/etc/slurmscale", "/var/spool/slurmscale", "/var/lib/slurmscale",
                     "/var/log/slurmscale", "/usr/local/lib/slurmscale",
                     "/usr/local/share/doc/slurmscale"):
            text = text.replace(root, str(prefix) + root)
    return text


def plan(prefix: Path, user: str) -> tuple[list[Planned], list[tuple[Path, int]]]:
    """What `install` writes (files) and makes (directories, SlurmUser's, with modes)."""
    group = grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name
    under = prefix / "usr/local/lib/slurmscale/resume_suspend"
    config = prefix / "etc/slurmscale/slurmscale.yaml"
    env = [f"SLURMSCALE_PYTHON={sys.executable}", f"SLURMSCALE_CONFIG={config}"]
    if str(prefix) != "/":  # (the hooks' view of the config is beside the spool)
        env.append(f"SLURMSCALE_HOOK_VIEW={prefix / 'var/spool/slurmscale/hookview.json'}")
    files = [
        Planned(under / "slurmscale-hook", shipped("resume_suspend/slurmscale-hook")
                .read_bytes(), 0o755, "file"),
        Planned(under / "hooks.env", ("# written by `slurmscale install`: the Python the "
                                      "hooks run, and the config\n" + "\n".join(env) + "\n")
                .encode(), 0o644, "file"),
        Planned(config, _rewrite(shipped("slurmscale.example.yaml").read_text(), prefix,
                                 user, group).encode(), 0o644, "config"),
    ]
    for unit in ("slurmscale.service", "slurmscale-report.service",
                 "slurmscale-report.timer"):
        files.append(Planned(prefix / "etc/systemd/system" / unit, _rewrite(
            shipped(f"systemd/{unit}").read_text(), prefix, user, group).encode(), 0o644,
            "file"))
    files.append(Planned(prefix / "etc/logrotate.d/slurmscale", _rewrite(
        shipped("logrotate/slurmscale").read_text(), prefix, user, group).encode(), 0o644,
        "file"))
    for doc in ("iam-policy.json", "node-iam-policy.json", "grafana-dashboard.json",
                "admin-guide.md"):
        files.append(Planned(prefix / "usr/local/share/doc/slurmscale" / doc,
                             shipped(doc).read_bytes(), 0o644, "file"))
    dirs = [(prefix / d, 0o750) for d in ("var/spool/slurmscale", "var/log/slurmscale",
                                          "var/lib/slurmscale")]
    return files, dirs


def install(prefix: Path, user: str, dry_run: bool = False) -> InstallOutcome:
    if not prefix.is_dir():
        raise InstallError(f"--prefix {prefix}: not a directory")
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise InstallError(f"--slurm-user {user}: no such user on this machine (Slurm's "
                           "packages make `slurm`; give SlurmUser from slurm.conf)") from None
    files, dirs = plan(prefix, user)
    out = InstallOutcome([])
    would = "would " if dry_run else ""
    for d, mode in dirs:
        st = d.stat() if d.exists() else None
        if st and (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (pw.pw_uid, pw.pw_gid, mode):
            out.lines.append(f"unchanged  {d}/ ({user}, {mode:04o})")
            continue
        out.lines.append(f"{would}make  {d}/ ({user}, {mode:04o})")
        if not dry_run:
            d.mkdir(parents=True, exist_ok=True)
            os.chown(d, pw.pw_uid, pw.pw_gid)
            os.chmod(d, mode)
    record_path = prefix / RECORD
    record: dict[str, str] = (json.loads(record_path.read_text())
                              if record_path.is_file() else {})
    for f in files:
        key, new = str(f.path), _sha(f.content)
        old = f.path.read_bytes() if f.path.is_file() else None
        if old is not None and _sha(old) == new:
            out.lines.append(f"unchanged  {f.path}")
            record[key] = new
            continue
        if old is not None and f.kind == "config":
            out.lines.append(f"kept       {f.path} (the site's config; the example is in "
                             "the package: slurmscale/share/slurmscale.example.yaml)")
            continue
        if old is not None and record.get(key) != _sha(old):
            out.refused += 1
            out.lines.append(f"{would}refuse {f.path}: changed since it was installed (or "
                             f"not installed by slurmscale); the new version "
                             f"{would}goes to {f.path}.new")
            if not dry_run:
                f.path.with_name(f.path.name + ".new").write_bytes(f.content)
            continue
        out.lines.append(f"{would}{'update' if old is not None else 'install'}  {f.path}")
        if not dry_run:
            f.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = f.path.with_name(f".{f.path.name}.tmp")
            tmp.write_bytes(f.content)
            os.chmod(tmp, f.mode)
            os.replace(tmp, f.path)
            record[key] = new
    hooks = prefix / "usr/local/lib/slurmscale/resume_suspend"
    for name in HOOK_LINKS:
        link = hooks / name
        if link.is_symlink() and os.readlink(link) == "slurmscale-hook":
            out.lines.append(f"unchanged  {link} -> slurmscale-hook")
            continue
        if link.exists() or link.is_symlink():
            out.refused += 1
            out.lines.append(f"{would}refuse {link}: exists and is not the link to "
                             "slurmscale-hook")
            continue
        out.lines.append(f"{would}link  {link} -> slurmscale-hook")
        if not dry_run:
            link.symlink_to("slurmscale-hook")
    if not dry_run:
        record_path.parent.mkdir(parents=True, exist_ok=True)
        record_path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return out


def uninstall(prefix: Path, dry_run: bool = False) -> InstallOutcome:
    """Remove what `install` put under `prefix`, by its record: a file still as installed
    (its SHA-256 the recorded one) goes, one an admin changed since (the config, surely) is
    kept and said; the hook links go; the spool, log and state directories stay (the store,
    requests not yet carried out, the logs: remove them yourself once you need them no
    more). The record goes when nothing it names is left."""
    if not prefix.is_dir():
        raise InstallError(f"--prefix {prefix}: not a directory")
    record_path = prefix / RECORD
    if not record_path.is_file():
        raise InstallError(f"{record_path}: no record of an install here (nothing removed)")
    try:
        record: dict[str, str] = json.loads(record_path.read_text())
    except ValueError:
        raise InstallError(f"{record_path}: not a record `slurmscale install` wrote") from None
    out = InstallOutcome([])
    would = "would " if dry_run else ""
    hooks = prefix / "usr/local/lib/slurmscale/resume_suspend"
    for name in HOOK_LINKS:
        link = hooks / name
        if link.is_symlink() and os.readlink(link) == "slurmscale-hook":
            out.lines.append(f"{would}remove  {link}")
            if not dry_run:
                link.unlink()
    left: dict[str, str] = {}
    for key, sha in sorted(record.items()):
        path = Path(key)
        if not path.is_file():
            out.lines.append(f"gone       {path}")
            continue
        if _sha(path.read_bytes()) != sha:
            out.refused += 1
            left[key] = sha
            out.lines.append(f"kept       {path}: changed since it was installed")
            continue
        out.lines.append(f"{would}remove  {path}")
        if not dry_run:
            path.unlink()
    for d in ("var/spool/slurmscale", "var/log/slurmscale", "var/lib/slurmscale"):
        out.lines.append(f"kept       {prefix / d}/ (data: remove it yourself)")
    if not dry_run:
        if left:
            record_path.write_text(json.dumps(left, indent=2, sort_keys=True) + "\n")
        else:
            record_path.unlink()
    return out
