"""`slurmscale slurm-conf`: the slurm.conf, gres.conf and topology.conf lines that match the
config, rendered for slurm.conf's `Include` with the site's own values kept
(slurmscale/slurmconf.py, slurmscale/slurmconf_site.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from slurmscale.cli_common import _load
from slurmscale.config import Config
from slurmscale.model import InstanceShape


@click.command("slurm-conf")
@click.option("--gres", is_flag=True, help="Print gres.conf lines instead of slurm.conf.")
@click.option("--topology", is_flag=True,
              help="Print the first topology.conf (every node unplaced; the daemon rewrites "
                   "it as EC2 places instances): needs `topology:` in the config.")
@click.option("--slurm-release", metavar="MAJOR.MINOR", default=None,
              help="The Slurm the lines are for (default: `scontrol --version` here; none "
                   "answering: lines any release from 22.05 takes).")
@click.option("--site-conf", metavar="PATH", default=None,
              help="The site's slurm.conf, whose own SlurmctldParameters, PrivateData, "
                   "GresTypes and SchedulerParameters the lines keep (default: $SLURM_CONF, "
                   "else /etc/slurm/slurm.conf, when it exists).")
@click.option("--output", metavar="FILE", default=None,
              help="Write the lines to FILE (replaced whole, atomically) for slurm.conf's "
                   "last line `Include FILE`, instead of printing them.")
@click.pass_context
def slurm_conf(ctx: click.Context, gres: bool, topology: bool,
               slurm_release: str | None, site_conf: str | None, output: str | None) -> None:
    """Print the slurm.conf (or gres.conf, or topology.conf) lines that match this config, and
    what the running Slurm release does itself (25.05+: requeue_on_resume_failure; 25.11+:
    enable_expedited_requeue). The slurm.conf lines keep the site's own values of the
    parameters Slurm keeps one value of; Include them as slurm.conf's last line (`--output`)."""
    import re

    from slurmscale.slurmconf import render_gres_conf, render_slurm_conf

    cfg = _load(ctx)
    if topology:
        from slurmscale.topology import render

        if cfg.topology is None:
            click.echo("slurmscale: --topology: the config has no `topology:` section", err=True)
            sys.exit(2)
        _emit(render(cfg.topology.plugin, [n for p in cfg.pools for n in p.node_names()], {}),
              output)
        return
    release: tuple[int, int] | None = None
    if slurm_release is not None:
        m = re.fullmatch(r"(\d{2})\.(\d{1,2})", slurm_release.strip())
        if m is None:
            raise click.BadParameter(f"{slurm_release!r} is not MAJOR.MINOR (e.g. 25.05)",
                                     param_hint="--slurm-release")
        release = (int(m[1]), int(m[2]))
    elif not gres:
        from slurmscale.slurm.cli_backend import SlurmCLI
        from slurmscale.slurm.protocol import SlurmError

        try:  # (a Slurm that does not answer: any release, after 5 s, not the usual 30)
            quick = cfg.slurm.model_copy(update={"timeout_s": min(5.0, cfg.slurm.timeout_s)})
            found = SlurmCLI(quick).release()
            release = found if found > (0, 0) else None
        except (SlurmError, OSError):
            release = None
    if gres:
        _emit(render_gres_conf(cfg), output)
        return
    conf, site = _site_conf(site_conf)
    _emit(render_slurm_conf(cfg, release=release, shapes=_shapes(cfg), site=site), output)
    if output is not None and conf is not None:
        from slurmscale.slurmconf_site import includes

        if not includes(conf, Path(output)):
            click.echo(f"slurmscale slurm-conf: wrote {output}; add `Include {output}` as the "
                       f"last line of {conf}, then restart slurmctld (`slurmscale check` says "
                       "when a reconfigure is enough)", err=True)


def _site_conf(given: str | None) -> tuple[Path | None, dict[str, list[str]]]:
    """The site's slurm.conf and its own values; exit 1 naming the file when one given, or
    the one Slurm reads, cannot be read (lines rendered without it would drop the site's
    values)."""
    from slurmscale.slurmconf_site import SiteConfError, read_site

    if given is not None:
        conf = Path(given)
    else:
        conf = Path(os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf")
        if not conf.exists():
            return None, {}
    try:
        return conf, read_site(conf)
    except SiteConfError as e:
        click.echo(f"slurmscale slurm-conf: cannot read the site's slurm.conf: {e}", err=True)
        sys.exit(1)


def _emit(text: str, output: str | None) -> None:
    """Print `text`, or replace FILE with it whole (a reader never sees half a file)."""
    if output is None:
        click.echo(text, nl=False)
        return
    path = Path(output)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        tmp.chmod(0o644)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        click.echo(f"slurmscale slurm-conf: cannot write {output}: {e.strerror or e}", err=True)
        sys.exit(1)


def _shapes(cfg: Config) -> dict[str, InstanceShape]:
    """EC2's shapes of the instance types whose node sizes the config leaves out; exit 1
    naming the pool when EC2 cannot say (never a node line of CPUs=1 for a 192-vCPU type)."""
    from slurmscale.cloud.ec2 import EC2Cloud
    from slurmscale.cloud.protocol import CloudError
    from slurmscale.slurmconf import needs_shapes, sized_by_ec2

    want = needs_shapes(cfg)
    if not want:
        return {}
    try:
        found = EC2Cloud(cfg.aws).instance_shapes(want)
    except CloudError as e:
        found, why = {}, str(e)
    else:
        why = "not returned"
    for p in cfg.pools:
        if sized_by_ec2(p) and p.instance_types[0] not in found:
            click.echo(f"slurmscale slurm-conf: pool {p.name}: cannot read instance type "
                       f"{p.instance_types[0]} from EC2 ({why}): set its cpus_per_node and "
                       "real_memory_mb, or give slurm-conf EC2 access", err=True)
            sys.exit(1)
    return found
