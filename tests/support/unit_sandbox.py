"""The shipped unit's file-system sandbox, for a daemon the local cluster starts: what
systemd sets up for `ProtectSystem=`, `ProtectHome=` and `ReadWritePaths=` (systemd.exec(5)),
done with a private mount namespace (`unshare --mount`) as root before the switch to
SlurmUser, where the harness has no systemd to run the unit itself.

ProtectSystem=full: /usr, /boot, /efi and /etc read-only. ProtectHome=yes: /home, /root and
/run/user empty and inaccessible. ReadWritePaths=: each path writable again (a leading "-":
skipped when missing). The cluster's configuration directory stands for /etc/slurm (its
paths under /etc/slurm are read as the same names there), so the unit's own lines decide
whether the daemon may write its topology.conf. PrivateTmp= is left out: the cluster lives
under /tmp."""

from __future__ import annotations

import shlex
from pathlib import Path

from slurmscale.shipped import shipped

PROTECT_FULL = ("/usr", "/boot", "/efi", "/etc")
PROTECT_HOME = ("/home", "/root", "/run/user")


def unit_settings(unit: str) -> dict[str, list[str]]:
    """The [Service] section's settings, each key's values in order (a key may repeat)."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in unit.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def sandbox_prefix(conf_dir: Path, unit: str | None = None,
                   drop: tuple[str, ...] = ()) -> list[str]:
    """The command prefix that runs what follows in the unit's sandbox; `drop`: ReadWritePaths
    entries left out (to show what the sandbox refuses without them)."""
    s = unit_settings(unit if unit is not None
                      else shipped("systemd/slurmscale.service").read_text())
    assert s.get("ProtectSystem") == ["full"] and s.get("ProtectHome") == ["yes"], s
    script = ["set -e", "mount --make-rprivate /"]
    for path in (*PROTECT_FULL, str(conf_dir)):
        q = shlex.quote(path)
        script.append(f"if [ -d {q} ]; then mount --bind {q} {q}; "
                      f"mount -o remount,bind,ro {q}; fi")
    for path in PROTECT_HOME:
        q = shlex.quote(path)
        script.append(f"if [ -d {q} ]; then mount -t tmpfs -o mode=000 tmpfs {q}; fi")
    for line in s.get("ReadWritePaths", []):
        for entry in line.split():
            if entry in drop or entry.lstrip("-") in drop:
                continue
            path = entry.lstrip("-")
            if path.startswith("/etc/slurm/"):
                path = str(conf_dir / path.removeprefix("/etc/slurm/"))
            # (every path as if "-": the unit's StateDirectory=, LogsDirectory= and
            # RuntimeDirectory= make the others, which the cluster keeps elsewhere)
            q = shlex.quote(path)
            script.append(f"if [ -e {q} ]; then mount --bind {q} {q}; "
                          f"mount -o remount,bind,rw {q}; fi")
    return ["/usr/bin/unshare", "--mount", "--", "/bin/sh", "-c",
            "; ".join(script) + '; exec "$@"', "unit-sandbox"]
