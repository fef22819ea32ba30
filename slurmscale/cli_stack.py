"""`slurmscale aws-template`, `aws-policy` and `config from-stack`: the AWS side as code
(slurmscale/stack/; docs/aws-stack.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import click

from slurmscale.cli_common import _load
from slurmscale.config import Config


def _fail(ctx: click.Context, msg: str, code: int = 2) -> None:
    click.echo(f"slurmscale: {msg}", err=True)
    ctx.exit(code)


@click.command("aws-template")
@click.option("--conf-server", "conf_servers", multiple=True,
              help="slurmctld host[:port] for configless slurmd (repeat for backups), as "
                   "for node-userdata")
@click.option("--slurm-conf", default=None, help="A slurm.conf already on the image.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of YAML.")
@click.pass_context
def aws_template(ctx: click.Context, conf_servers: tuple[str, ...], slurm_conf: str | None,
                 as_json: bool) -> None:
    """Print the CloudFormation template of this cluster's AWS side, from the config: roles,
    one launch template per pool, placement groups, the events queue with its policy and
    EventBridge rules, the private zone. Deploy it, then `slurmscale config from-stack`."""
    from slurmscale.stack.template import TEMPLATE_BODY_LIMIT, dump_yaml, render

    cfg = _load(ctx)
    if conf_servers and slurm_conf:
        _fail(ctx, "give --conf-server or --slurm-conf, not both")
    try:
        t = render(cfg, conf_servers, slurm_conf)
    except ValueError as e:
        _fail(ctx, str(e))
    text = json.dumps(t, indent=1) + "\n" if as_json else dump_yaml(t)
    if len(text.encode()) > TEMPLATE_BODY_LIMIT:
        click.echo(f"slurmscale: note: the template is {len(text.encode())} bytes, over "
                   f"CloudFormation's {TEMPLATE_BODY_LIMIT} for a template body: deploy it "
                   "through S3 (`aws cloudformation deploy --s3-bucket ...`)", err=True)
    click.echo(text, nl=False)


def _account(cfg: Config) -> str:
    from slurmscale.cloud.aws import call, make_client

    return str(call(make_client("sts", cfg.aws, cfg.aws.endpoint_url),
                    "get_caller_identity")["Account"])


def _template_ids(cfg: Config) -> list[str]:
    from slurmscale.cloud.aws import call, make_client

    ids = sorted({p.launch_template.id for p in cfg.pools if p.launch_template.id})
    names = sorted({p.launch_template.name for p in cfg.pools
                    if p.launch_template.name and not p.launch_template.id})
    if names:
        ec2 = make_client("ec2", cfg.aws, cfg.aws.endpoint_url)
        got = call(ec2, "describe_launch_templates", LaunchTemplateNames=names)
        ids += sorted(t["LaunchTemplateId"] for t in got.get("LaunchTemplates", []))
    return ids


@click.command("aws-policy")
@click.argument("which", type=click.Choice(["daemon", "node"]))
@click.option("--account", default=None, help="The AWS account id (default: STS's answer "
              "for the credentials at hand).")
@click.option("--node-role", default=None, help="The nodes' role name (the daemon passes it "
              "to EC2 with the launch template's instance profile).")
@click.pass_context
def aws_policy(ctx: click.Context, which: str, account: str | None,
               node_role: str | None) -> None:
    """Print the daemon's or the nodes' IAM policy for this config, every placeholder of the
    shipped documents filled in (the stack makes both itself). A statement that needs a value
    the config and the options do not give is left out, and named on stderr."""
    from slurmscale.cloud.protocol import CloudError
    from slurmscale.stack import policies

    cfg = _load(ctx)
    try:
        account = account or _account(cfg)
        templates = _template_ids(cfg) if which == "daemon" else []
    except CloudError as e:
        _fail(ctx, f"cannot ask AWS ({e}): give --account (and launch template ids in "
              "the config)", 1)
    if not (account or "").isdigit() or len(account or "") != 12:
        _fail(ctx, f"--account {account!r} is not a 12-digit AWS account id")
    queue = cfg.aws.interruption_queue_url
    zone = cfg.dns.hosted_zone_id.rsplit("/", 1)[-1] if cfg.dns else ""
    values = {"REGION": cfg.aws.region, "ACCOUNT_ID": str(account),
              "CLUSTER_NAME": cfg.cluster_name, "HOSTED_ZONE_ID": zone,
              "NODE_ROLE_NAME": node_role or "",
              "QUEUE_NAME": queue.rstrip("/").rsplit("/", 1)[-1] if queue else "",
              "MUNGE_KEY_PARAMETER": (cfg.aws.munge_key_parameter or "").lstrip("/")}
    doc = policies.render(which, values, templates)
    kept = {st.get("Sid") for st in doc["Statement"]}
    for st in policies.document(which)["Statement"]:
        if st.get("Sid") not in kept:
            missing = sorted(policies.placeholders(st) - {k for k, v in values.items() if v})
            click.echo(f"slurmscale: left out {st.get('Sid')}: no value for "
                       f"{', '.join(missing) or 'LAUNCH_TEMPLATE_ID'}", err=True)
    click.echo(json.dumps(doc, indent=2))


@click.group("config")
def config_group() -> None:
    """The config file itself."""


@config_group.command("from-stack")
@click.argument("stack")
@click.option("--write", is_flag=True, help="Write the result over the config file (the old "
              "one kept as <file>.orig); default: print it.")
@click.pass_context
def from_stack(ctx: click.Context, stack: str, write: bool) -> None:
    """Fill the config from STACK's outputs (the stack `aws-template` rendered): aws.region,
    aws.interruption_queue_url, aws.munge_key_parameter, dns, and each pool's launch template,
    subnets and placement group. The keys changed are listed on stderr; the result is
    validated before anything is written. Comments in the file are not kept with --write."""
    import yaml

    from slurmscale.cloud.aws import call, make_client
    from slurmscale.cloud.protocol import CloudError
    from slurmscale.config import ConfigError
    from slurmscale.config_file import parse_config, resolve_path
    from slurmscale.stack.outputs import StackError, apply, outputs_of

    root = ctx.find_root()
    cfg = _load(root)
    path = resolve_path(root.obj.get("config"))
    try:
        cf = make_client("cloudformation", cfg.aws, cfg.aws.endpoint_url)
        stacks = call(cf, "describe_stacks", StackName=stack)["Stacks"]
    except CloudError as e:
        _fail(ctx, f"stack {stack}: {e}", 1)
    st = stacks[0]
    status = str(st.get("StackStatus", ""))
    if not status.endswith("_COMPLETE") or "ROLLBACK" in status or "DELETE" in status:
        _fail(ctx, f"stack {stack} is {status}: its outputs are not to be trusted", 1)
    data: Any = yaml.safe_load(Path(path).read_text())
    try:
        new, changes = apply(data, cfg, outputs_of(st))
        parse_config(new, path)
    except (StackError, ConfigError) as e:
        _fail(ctx, f"stack {stack}: {e}", 1)
    for c in changes:
        click.echo(f"  {c.line()}", err=True)
    text = yaml.safe_dump(new, sort_keys=False)
    if not write:
        click.echo(text, nl=False)
        return
    if not changes:
        click.echo(f"{path}: already as stack {stack} says", err=True)
        return
    _replace(Path(path), text)
    click.echo(f"{path}: {len(changes)} key(s) from stack {stack} (the old file: "
               f"{path}.orig)", err=True)


def _replace(path: Path, text: str) -> None:
    """Write `text` over `path` at once (same mode and owner), the old file kept beside it."""
    st = path.stat()
    tmp = path.with_name(path.name + ".slurmscale-new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, st.st_mode & 0o777)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    if os.geteuid() == 0:
        os.chown(tmp, st.st_uid, st.st_gid)
    shutil.copy2(path, path.with_name(path.name + ".orig"))
    os.replace(tmp, path)


@click.command("node-image")
@click.option("--slurm-version", default=None, help="The head node's Slurm version (default: "
              "this machine's slurmctld -V).")
@click.option("--component", is_flag=True, help="An EC2 Image Builder component document "
              "that runs the script, instead of the script.")
@click.pass_context
def node_image(ctx: click.Context, slurm_version: str | None, component: bool) -> None:
    """Print the node image recipe: the script that turns a GPU base image into a slurmscale
    node (slurmd of the head node's version, munge, slurmd not enabled, the bootstrap), or
    the Image Builder component that runs it (docs/node-image.md)."""
    import subprocess

    from slurmscale.node_image import render_component, render_script

    if slurm_version is None:
        cfg = _load(ctx)
        ctld = [*cfg.slurm.command_prefix, os.path.join(cfg.slurm.sbin_dir, "slurmctld"), "-V"]
        try:
            out = subprocess.run(ctld, capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        parts = out.split()
        if len(parts) < 2:
            _fail(ctx, f"cannot tell this head node's Slurm version ({' '.join(ctld)}): give "
                  "--slurm-version")
        slurm_version = parts[1]
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", slurm_version or ""):
        _fail(ctx, f"--slurm-version {slurm_version!r} is not a Slurm version like 24.11.5")
    assert slurm_version is not None
    click.echo(render_component(slurm_version) if component else render_script(slurm_version),
               nl=False)
