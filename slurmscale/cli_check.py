"""`slurmscale check`: validate the config against the running Slurm."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from slurmscale.cli_common import _load

if TYPE_CHECKING:
    from slurmscale.check import Problem, SlurmView
    from slurmscale.config import Config


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def check(ctx: click.Context, as_json: bool) -> None:
    """Check the config against the running Slurm: partitions and CLOUD nodes exist, the
    power-saving hooks are slurmscale's and SlurmUser may run them, read the config and write
    the spool, ResumeTimeout outlasts boot, SuspendTime backs the policy up; every pool's
    launch template versions (read from EC2) put instance tags in metadata, require IMDSv2
    and carry the node bootstrap in their user data, have EFA where a pool says efa: true,
    and target its reservations or block as EC2 Fleet needs; every subnet and reservation id
    is one EC2 knows, each reservation of the pool's kind and instance type; every instance
    type is one EC2 knows, a pool's types share one shape, and its GPUs, CPUs and memory are
    what the type has (DescribeInstanceTypes); the events queue can be read, its policy lets
    EventBridge send and a rule sends it each kind of event the pools rely on; the munge key
    parameter exists; a warning where a first boot lazy-loads the image. A template
    version, subnet or reservation EC2 will not show (no credentials included) is an error.
    One line per problem; exit 0 with none (warnings allowed), 1 with errors, 2 if Slurm
    cannot be read.

    JSON: {"ok": bool, "problems": [{severity, code, message}]} (and "error" with exit 2)"""
    from slurmscale.check import HOOKS, gather
    from slurmscale.check import check as run_check
    from slurmscale.check_hooks import check_hook_runs, gather_hook_runs
    from slurmscale.config_file import resolve_path
    from slurmscale.slurm.protocol import SlurmError

    cfg = _load(ctx.find_root())
    try:
        view = gather(cfg)
    except SlurmError as e:
        if as_json:  # (a script reading the JSON gets an answer too)
            click.echo(json.dumps({"ok": False, "error": f"cannot read Slurm: {e}",
                                   "problems": []}, indent=2))
        click.echo(f"slurmscale check: cannot read Slurm: {e}", err=True)
        sys.exit(2)
    problems = run_check(cfg, view, resolve_path(ctx.find_root().obj.get("config")))
    user = view.config.get("SlurmUser", "").split("(")[0].strip() or None
    hooks = [str(Path(cfg.hooks_dir) / script) for key, script in HOOKS.items()
             if view.config.get(key) == str(Path(cfg.hooks_dir) / script)]
    problems += check_hook_runs(user, gather_hook_runs(hooks, user,
                                                       view.config.get("SLURM_CONF")))
    problems += _aws_problems(cfg, view)
    errors = [p for p in problems if p.severity == "error"]
    if as_json:
        click.echo(json.dumps({"ok": not errors, "problems": [p.__dict__ for p in problems]},
                              indent=2))
    else:
        for p in problems:
            click.echo(p.line())
        click.echo(f"{len(errors)} error(s), {len(problems) - len(errors)} warning(s)"
                   if problems else "ok: the config and the running Slurm agree")
    sys.exit(1 if errors else 0)


def _aws_problems(cfg: Config, view: SlurmView) -> list[Problem]:
    """What EC2, SQS, SSM and Route 53 say of the config: the launch templates, subnets,
    instance types (and Slurm's node lines against them), reservations, the events queue,
    the munge key and the images' first reads."""
    from slurmscale.check_aws import (
        check_events,
        check_image_restore,
        check_munge_key,
        gather_image_restores,
        gather_munge_key,
        gather_queue,
    )
    from slurmscale.check_launch import (
        check_dns,
        check_reservations,
        check_shapes,
        check_subnets,
        check_templates,
        gather_platforms,
        gather_reservations,
        gather_shapes,
        gather_subnets,
        gather_templates,
    )
    from slurmscale.check_node_lines import check_node_lines

    templates = gather_templates(cfg)
    problems = check_templates(cfg, templates)
    zones, unshown = gather_subnets(cfg)
    problems += check_subnets(cfg, unshown)
    shapes = gather_shapes(cfg)
    problems += check_shapes(cfg, shapes)
    problems += check_node_lines(cfg, view, shapes)
    problems += check_dns(cfg)
    problems += check_reservations(cfg, gather_reservations(cfg), zones,
                                   templates=templates,
                                   platforms=gather_platforms(cfg, templates))
    problems += check_events(cfg, gather_queue(cfg))
    problems += check_munge_key(cfg, gather_munge_key(cfg))
    problems += check_image_restore(cfg, templates, zones,
                                    gather_image_restores(cfg, templates))
    return problems
