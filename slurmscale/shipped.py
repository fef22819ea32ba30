"""The files an admin installs besides the Python package: the hooks slurm.conf points at, the
systemd units, the example config, the IAM policies and the Grafana dashboard.

In a checkout they live where a reader looks for them (`resume_suspend/`, `slurm_conf/`,
`docs/`); the wheel carries them as `slurmscale/share/` (copied there as it is built:
setup.py reads FILES from this file), so `pip install slurmscale` then `slurmscale install`
needs no checkout. This module imports nothing of slurmscale's: setup.py loads it alone."""

from __future__ import annotations

from pathlib import Path

# where each is in the wheel (under slurmscale/share/) -> where it is in a checkout
FILES: dict[str, str] = {
    "resume_suspend/slurmscale-hook": "resume_suspend/slurmscale-hook",
    "systemd/slurmscale.service": "slurm_conf/systemd/slurmscale.service",
    "systemd/slurmscale-report.service": "slurm_conf/systemd/slurmscale-report.service",
    "systemd/slurmscale-report.timer": "slurm_conf/systemd/slurmscale-report.timer",
    "logrotate/slurmscale": "slurm_conf/logrotate/slurmscale",
    "slurmscale.example.yaml": "slurm_conf/slurmscale.example.yaml",
    "iam-policy.json": "docs/iam-policy.json",
    "node-iam-policy.json": "docs/node-iam-policy.json",
    "grafana-dashboard.json": "docs/grafana-dashboard.json",
    "admin-guide.md": "docs/admin-guide.md",
}
# the hook's names in slurm.conf: each a link to slurmscale-hook (its name says which)
HOOK_LINKS = ("slurmscale-resume", "slurmscale-suspend", "slurmscale-resume-fail")

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = PACKAGE.parent


def shipped(name: str) -> Path:
    """A shipped file by its wheel name: the installed package's copy, else the checkout's
    (an editable install). FileNotFoundError naming both when neither has it."""
    inside = PACKAGE / "share" / name
    if inside.is_file():
        return inside
    outside = CHECKOUT / FILES[name]
    if outside.is_file():
        return outside
    raise FileNotFoundError(f"{name}: neither {inside} nor {outside} exists (a broken install)")
