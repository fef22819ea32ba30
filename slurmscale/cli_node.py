"""The instance side on the command line: `node-init` (the bootstrap an instance runs at boot,
the same code as the stdlib-only slurmscale/node_init.py) and `node-userdata` (the EC2 user
data that installs and runs it for one pool)."""

from __future__ import annotations

import base64
import gzip
import shlex
import sys
from pathlib import Path

import click

from slurmscale import node_init
from slurmscale.cli_common import _load
from slurmscale.config import Config, Pool

USER_DATA_LIMIT = 16384  # EC2: user data is limited to 16 KB, before base64 encoding
INSTALL_PATH = "/usr/local/lib/slurmscale/node-init.py"
REBOOT_UNIT = "/etc/systemd/system/slurmscale-node-init.service"


def reboot_unit(args: str) -> str:
    """The systemd unit that runs the bootstrap again at each later boot: cloud-init runs a
    user-data script at the first boot only, so a node rebooted (a driver update, a stop and
    start, `scontrol reboot`) would come back without slurmd. It keeps its tags, so the
    bootstrap finds the same node and joins as it."""
    return ("[Unit]\n"
            "Description=slurmscale node bootstrap: rejoin Slurm as this instance's node\n"
            "Wants=network-online.target\nAfter=network-online.target munge.service\n"
            "[Service]\nType=oneshot\n"
            f"ExecStart=/usr/bin/python3 {INSTALL_PATH} {args}\n"
            "[Install]\nWantedBy=multi-user.target\n")


@click.command("node-init", context_settings={"ignore_unknown_options": True,
                                              "allow_extra_args": True,
                                              "help_option_names": []})
@click.pass_context
def node_init_cmd(ctx: click.Context) -> None:
    """Join Slurm as the node this instance was launched for (run at boot; --help for its
    options). Needs no slurmscale config: everything comes from instance metadata."""
    sys.exit(node_init.main(list(ctx.args)))


def tag_timeout(cfg: Config) -> float:
    """The bootstrap's wait for its node tag: under ResumeTimeout, with a minute to spare for
    slurmd to register; at most ten minutes."""
    return max(30.0, min(600.0, cfg.power_saving.resume_timeout - 60.0))


def bootstrap_args(cfg: Config, pool: Pool, conf_servers: tuple[str, ...],
                   slurm_conf: str | None) -> list[str]:
    args = ["--cluster", cfg.cluster_name, "--gpus", str(pool.gpus_per_node),
            "--tag-timeout", f"{tag_timeout(cfg):g}"]
    for s in conf_servers:
        args += ["--conf-server", s]
    if slurm_conf:
        args += ["--slurm-conf", slurm_conf]
    if cfg.health.check_program:
        args += ["--check-program", cfg.health.check_program]
    if cfg.aws.munge_key_parameter:
        args += ["--munge-key-parameter", cfg.aws.munge_key_parameter]
    return args


def render_user_data(cfg: Config, pool: Pool, conf_servers: tuple[str, ...] = (),
                     slurm_conf: str | None = None) -> str:
    """A shell script cloud-init runs once at first boot: it writes the bootstrap (gzip,
    base64: about half its size), a systemd unit that runs it at every later boot (where
    systemd runs), and runs it with this pool's settings."""
    source = Path(node_init.__file__).read_bytes()
    packed = base64.encodebytes(gzip.compress(source, mtime=0)).decode()
    args = shlex.join(bootstrap_args(cfg, pool, conf_servers, slurm_conf))
    return (f"#!/bin/sh\n"
            f"# slurmscale node bootstrap: pool {pool.name} of cluster {cfg.cluster_name}\n"
            f"# (rendered by `slurmscale node-userdata --pool {pool.name}`; docs/node-image.md)\n"
            f"set -e\n"
            f"mkdir -p {Path(INSTALL_PATH).parent}\n"
            f"base64 -d <<'EOF' | gzip -dc > {INSTALL_PATH}\n{packed}EOF\n"
            f"if [ -d /run/systemd/system ]; then\n"
            f"cat > {REBOOT_UNIT} <<'UNIT'\n{reboot_unit(args)}UNIT\n"
            f"systemctl enable {Path(REBOOT_UNIT).name}\n"
            f"fi\n"
            f"exec python3 {INSTALL_PATH} {args}\n")


def _fail(ctx: click.Context, msg: str) -> None:
    click.echo(f"slurmscale: {msg}", err=True)
    ctx.exit(2)


@click.command("node-userdata")
@click.option("--pool", "pool_name", required=True, help="The pool whose nodes boot with it.")
@click.option("--conf-server", "conf_servers", multiple=True,
              help="slurmctld host[:port] for configless slurmd (repeat for backups); "
                   "without it or --slurm-conf, slurmd finds its config as it would itself")
@click.option("--slurm-conf", default=None, help="A slurm.conf already on the image.")
@click.pass_context
def node_userdata(ctx: click.Context, pool_name: str, conf_servers: tuple[str, ...],
                  slurm_conf: str | None) -> None:
    """Print the EC2 user data that installs and runs the node bootstrap for POOL's nodes
    (put it in the pool's launch template version)."""
    cfg = _load(ctx)
    if conf_servers and slurm_conf:
        _fail(ctx, "give --conf-server or --slurm-conf, not both")
    try:
        pool = cfg.pool(pool_name)
    except KeyError:
        _fail(ctx, f"--pool: no pool named {pool_name!r} (the config has "
              f"{', '.join(p.name for p in cfg.pools)})")
    text = render_user_data(cfg, pool, conf_servers, slurm_conf)
    if len(text.encode()) > USER_DATA_LIMIT:  # not with this file; a guard for edits
        raise click.ClickException(f"user data is {len(text.encode())} bytes, over EC2's "
                                   f"{USER_DATA_LIMIT}")
    click.echo(text, nl=False)
