"""`slurmscale install`: put the hooks, units, example config and directories in place."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command()
@click.option("--prefix", default="/", show_default=True, type=click.Path(file_okay=False),
              help="The root to install under (every path written into the files too).")
@click.option("--slurm-user", default="slurm", show_default=True,
              help="SlurmUser: the units run the daemon as it; it owns the spool, log and "
                   "state directories.")
@click.option("--dry-run", is_flag=True, help="Say what would be done; change nothing.")
def install(prefix: str, slurm_user: str, dry_run: bool) -> None:
    """Install what a head node needs besides this package, from the package: the hooks
    (with hooks.env naming this Python) under usr/local/lib/slurmscale/resume_suspend, the
    systemd units (this installation's slurmscale, User=SlurmUser) in etc/systemd/system,
    the example config as etc/slurmscale/slurmscale.yaml where none is, the IAM policies and
    the Grafana dashboard in usr/local/share/doc/slurmscale, and var/spool, var/log and
    var/lib/slurmscale (SlurmUser's, 0750). One line per file or directory; run again after
    an upgrade. A file changed since it was installed is never overwritten: the new version
    goes beside it as .new and the exit is 1. Bad input: one line, exit 2."""
    from slurmscale.install import InstallError
    from slurmscale.install import install as run_install

    try:
        out = run_install(Path(prefix).resolve(), slurm_user, dry_run)
    except (InstallError, PermissionError) as e:
        click.echo(f"slurmscale install: {e}", err=True)
        sys.exit(2)
    for line in out.lines:
        click.echo(line)
    if out.refused:
        click.echo(f"{out.refused} file(s) left as they are: compare each with its .new",
                   err=True)
        sys.exit(1)
    if not dry_run:
        from slurmscale.check_hooks import check_hook_runs, gather_hook_runs

        hook = Path(prefix).resolve() / "usr/local/lib/slurmscale/resume_suspend" / \
            "slurmscale-resume"
        problems = check_hook_runs(slurm_user, gather_hook_runs([str(hook)], slurm_user, None))
        for p in problems:
            click.echo(p.line(), err=p.severity == "error")
        if any(p.severity == "error" for p in problems):
            sys.exit(1)
        if not problems:
            click.echo(f"tried      {hook} as {slurm_user}, as slurmctld runs it: it runs")
        click.echo("next: edit etc/slurmscale/slurmscale.yaml (its pools), then `slurmscale "
                   "aws-template` and `slurmscale config from-stack` (docs/aws-stack.md), "
                   "`slurmscale check`, `slurmscale slurm-conf`, `systemctl daemon-reload`")


@click.command()
@click.option("--prefix", default="/", show_default=True, type=click.Path(file_okay=False),
              help="The root `install` installed under.")
@click.option("--dry-run", is_flag=True, help="Say what would be done; change nothing.")
def uninstall(prefix: str, dry_run: bool) -> None:
    """Remove what `slurmscale install` put in place, by its record
    (var/lib/slurmscale/installed.json): each file still as installed, and the hook links.
    A file changed since (the config) is kept and named; the spool, log and state
    directories are kept (the store, the logs). Then `pip uninstall slurmscale` (or remove
    the venv) and take the hook lines out of slurm.conf. One line per file; bad input: one
    line, exit 2."""
    from slurmscale.install import InstallError
    from slurmscale.install import uninstall as run_uninstall

    try:
        out = run_uninstall(Path(prefix), dry_run=dry_run)
    except InstallError as e:
        click.echo(f"slurmscale: {e}", err=True)
        sys.exit(2)
    for line in out.lines:
        click.echo(line)
