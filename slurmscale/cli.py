"""The `slurmscale` command. Read commands print a table, or stable JSON with --json."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from slurmscale import __version__
from slurmscale.cli_common import _db_url, _load, _open_store, _parse_since, _store, _table
from slurmscale.config import Config
from slurmscale.model import RequestKind

if TYPE_CHECKING:
    from slurmscale.sim.engine import PaidCapacity

log = logging.getLogger("slurmscale")


class JsonLines(logging.Formatter):
    """One JSON object per line (log_format: json), for journald/Loki/Elasticsearch."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"at": datetime.fromtimestamp(record.created, UTC).isoformat(
                   timespec="milliseconds"),
               "level": record.levelname.lower(), "logger": record.name,
               "message": record.getMessage()}
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


def _setup_daemon_logging(cfg: Config, verbose: bool) -> None:
    fmt: logging.Formatter = (JsonLines() if cfg.log_format == "json" else
                              logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if cfg.log_file:
        Path(cfg.log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(cfg.log_file))
    for h in handlers:
        h.setFormatter(fmt)
        root.addHandler(h)
    for noisy in ("apscheduler", "botocore", "boto3", "urllib3", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _iso(dt: datetime | None, timespec: str = "seconds") -> str | None:
    if dt is None:
        return None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).isoformat(timespec=timespec)


@click.group()
@click.version_option(__version__, prog_name="slurmscale")
@click.option("--config", "config", type=click.Path(dir_okay=False), default=None,
              help="Config file (default $SLURMSCALE_CONFIG or /etc/slurmscale/slurmscale.yaml).")
@click.pass_context
def cli(ctx: click.Context, config: str | None) -> None:
    """Gang-aware elastic GPU capacity for Slurm on EC2."""
    ctx.ensure_object(dict)
    ctx.obj["config"] = config


@cli.command()
@click.option("-v", "--verbose", is_flag=True)
@click.pass_context
def daemon(ctx: click.Context, verbose: bool) -> None:
    """Run the reconcile loop and the local API (foreground)."""
    cfg = _load(ctx)
    _db_url(cfg)  # an unreadable password file is a config error, before any logging
    _open_store(cfg).close()  # so is a store URL that cannot be opened
    for key, where in (("socket_path", Path(cfg.socket_path).parent),
                       ("spool_dir", Path(cfg.spool_dir)),
                       ("log_file", Path(cfg.log_file).parent if cfg.log_file else None)):
        if where is None:
            continue
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            click.echo(f"slurmscale: cannot create {key}'s directory {where}: {e.strerror}",
                       err=True)
            sys.exit(2)
    _setup_daemon_logging(cfg, verbose)
    from slurmscale.daemon.service import Daemon

    Daemon(cfg).run()


def _hook(ctx: click.Context, kind: RequestKind, hostlist: tuple[str, ...]) -> None:
    from slurmscale.hooks import run_hook

    ctx.exit(run_hook(kind, list(hostlist), ctx.obj.get("config")))


@cli.command()
@click.argument("hostlist", nargs=-1)
@click.pass_context
def resume(ctx: click.Context, hostlist: tuple[str, ...]) -> None:
    """ResumeProgram: record a request to power up HOSTLIST (reads SLURM_RESUME_FILE)."""
    _hook(ctx, RequestKind.RESUME, hostlist)


@cli.command()
@click.argument("hostlist", nargs=-1)
@click.pass_context
def suspend(ctx: click.Context, hostlist: tuple[str, ...]) -> None:
    """SuspendProgram: record a request to power down HOSTLIST."""
    _hook(ctx, RequestKind.SUSPEND, hostlist)


@cli.command("resume-fail")
@click.argument("hostlist", nargs=-1)
@click.pass_context
def resume_fail(ctx: click.Context, hostlist: tuple[str, ...]) -> None:
    """ResumeFailProgram: record that Slurm gave up on HOSTLIST."""
    _hook(ctx, RequestKind.RESUME_FAIL, hostlist)


@cli.command("slurm-conf")
@click.option("--gres", is_flag=True, help="Print gres.conf lines instead of slurm.conf.")
@click.pass_context
def slurm_conf(ctx: click.Context, gres: bool) -> None:
    """Print the slurm.conf (or gres.conf) lines that match this config."""
    from slurmscale.slurmconf import render_gres_conf, render_slurm_conf

    cfg = _load(ctx)
    click.echo(render_gres_conf(cfg) if gres else render_slurm_conf(cfg), nl=False)


@cli.group()
def db() -> None:
    """Database maintenance."""


@db.command("upgrade")
@click.pass_context
def db_upgrade(ctx: click.Context) -> None:
    """Create or migrate the store's schema to the latest version."""
    cfg = _load(ctx.find_root())
    _open_store(cfg).upgrade()
    click.echo("schema is at the latest version")


def _node_rows(cfg: Config) -> tuple[list[dict[str, Any]], str | None]:
    from slurmscale.slurm.cli_backend import SlurmCLI
    from slurmscale.slurm.protocol import SlurmError

    store = _store(cfg)
    inst = {i.node: i for i in store.active_instances()}
    slurm_err = None
    try:
        snodes = {n.name: n for n in SlurmCLI(cfg.slurm).nodes()}
    except SlurmError as e:
        snodes, slurm_err = {}, str(e)
    rows = []
    for p in cfg.pools:
        for name in p.node_names():
            sn = snodes.get(name)
            i = inst.get(name)
            rows.append({
                "node": name, "pool": p.name,
                "slurm_state": sn.state if sn else None,
                "addr": sn.addr if sn else None,
                "reason": (sn.reason or None) if sn else None,
                "instance_id": i.instance_id if i else None,
                "instance_type": i.instance_type if i else None,
                "lifecycle": i.lifecycle if i else None,
                "capacity_reservation_id": (i.capacity_reservation_id or None) if i else None,
                "launched_at": _iso(i.launched_at) if i else None,
            })
    return rows, slurm_err


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--all", "show_all", is_flag=True, help="Include nodes with no instance.")
@click.pass_context
def nodes(ctx: click.Context, as_json: bool, show_all: bool) -> None:
    """Every node of every pool: Slurm state, address, instance.

    JSON: {"nodes": [{node, pool, slurm_state, addr, reason, instance_id, instance_type,
    lifecycle, capacity_reservation_id, launched_at}], "slurm_error": str|null}
    """
    cfg = _load(ctx)
    rows, err = _node_rows(cfg)
    if as_json:
        click.echo(json.dumps({"nodes": rows, "slurm_error": err}, indent=2))
        return
    shown = rows if show_all else [r for r in rows if r["instance_id"] or (
        r["slurm_state"] and "POWERED_DOWN" not in r["slurm_state"])]
    click.echo(_table(shown, ["node", "pool", "slurm_state", "instance_id", "addr", "reason"]))
    if err:
        click.echo(f"warning: Slurm not readable: {err}", err=True)


def _event_dict(e: Any, timespec: str = "seconds") -> dict[str, Any]:
    return {"id": e.id, "at": _iso(e.at, timespec), "kind": e.kind, "node": e.node,
            "request_id": e.request_id, "gang_id": e.gang_id, "message": e.message}


@cli.command()
@click.option("--since", default=None, help="Duration (30m, 24h, 7d) or ISO date.")
@click.option("--limit", default=200, show_default=True, type=click.IntRange(1, 100000))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def events(ctx: click.Context, since: str | None, limit: int, as_json: bool) -> None:
    """The audit log: every decision and failure, with its reason.

    JSON: {"events": [{id, at, kind, node, request_id, gang_id, message}]}; `at` to the
    millisecond there (scripts order and time events within a second), to the second in the table.
    """
    since_dt = _parse_since(since)
    cfg = _load(ctx)
    found = _store(cfg).events(since_dt, limit)
    rows = [_event_dict(e, "milliseconds" if as_json else "seconds") for e in found]
    if as_json:
        click.echo(json.dumps({"events": rows}, indent=2))
        return
    click.echo(_table(rows, ["at", "kind", "node", "message"]))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def plan(ctx: click.Context, as_json: bool) -> None:
    """The capacity plan the policy makes from live Slurm state now, with reasons. Changes
    nothing.

    JSON: {"now": unix_s, "pools": {NAME: {"target": n, "pending_jobs": n,
    "pending_gpu_hours": x, "pending_gangs": [[job_id, nodes]], "oldest_wait_s": x}},
    "actions": [{"kind", "pool", "reason", "nodes": [...], "count"}],
    "reservations": [{"kind": create|extend|attach|release, "name", "pool", "job_id",
    "reason", "nodes": [...]}], "partition_rewrites": [{"job_id", "pool", "partitions": [...],
    "reason"}], "blocks": [{"pool", "open", "reason", "closed_from", "closed_until",
    "next_start", "jobs": [{"job_id", "reason"}]}]}
    """
    import time as _time

    from slurmscale.daemon.capacity import current_plan
    from slurmscale.slurm.cli_backend import SlurmCLI
    from slurmscale.slurm.protocol import SlurmError

    cfg = _load(ctx)
    slurm = SlurmCLI(cfg.slurm)
    # The daemon's memory (governed targets, cooldown clocks, hold budgets) makes this the
    # plan it would carry out.
    store = _store(cfg)
    try:
        pp = current_plan(cfg, slurm, store, _time.time())
    except SlurmError as e:
        click.echo(f"slurmscale: cannot read Slurm: {e}", err=True)
        sys.exit(1)
    finally:
        store.close()
    p = pp.capacity
    data = {
        "now": p.now,
        "pools": {name: {"target": p.targets[name], "pending_jobs": d.pending_jobs,
                         "pending_gpu_hours": round(d.pending_gpu_hours, 2),
                         "pending_gangs": [list(g) for g in d.pending_gangs],
                         "oldest_wait_s": round(d.oldest_wait_s, 1)}
                  for name, d in p.demand.items()},
        "actions": [{"kind": a.kind.value, "pool": a.pool, "reason": a.reason,
                     "nodes": list(a.nodes), "count": a.count} for a in p.actions],
        "reservations": [{"kind": a.kind.value, "name": a.name, "pool": a.pool,
                          "job_id": a.job_id, "reason": a.reason, "nodes": list(a.nodes)}
                         for a in pp.holds.actions],
        "partition_rewrites": [{"job_id": r.job_id, "pool": r.pool,
                                "partitions": list(r.partitions), "reason": r.reason}
                               for r in pp.rewrites],
        "blocks": [{"pool": b.pool, "open": b.plan.is_open, "reason": b.plan.reason,
                    "closed_from": b.plan.closed_from, "closed_until": b.plan.closed_until,
                    "next_start": b.plan.next.start if b.plan.next else None,
                    "jobs": [{"job_id": j, "reason": why} for j, why in b.jobs]}
                   for b in pp.blocks],
    }
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(_table([{"pool": k, **{kk: vv for kk, vv in v.items() if kk != "pending_gangs"},
                        "gangs": len(v["pending_gangs"])} for k, v in data["pools"].items()],
                      ["pool", "target", "pending_jobs", "pending_gpu_hours", "gangs",
                       "oldest_wait_s"]))
    click.echo()
    if not p.actions:
        click.echo("no actions: capacity matches demand")
    for a in data["actions"]:
        nodes = f" [{','.join(a['nodes'])}]" if a["nodes"] else ""
        click.echo(f"{a['kind']:<13} {a['pool']:<12} {a['reason']}{nodes}")
    for r in data["reservations"]:
        click.echo(f"reservation {r['kind']:<7} {r['name']}: {r['reason']}")
    for w in data["partition_rewrites"]:
        click.echo(f"partition    job {w['job_id']} -> {','.join(w['partitions'])}: "
                   f"{w['reason']}")
    for b in data["blocks"]:
        click.echo(f"block        {b['pool']:<12} {b['reason']}")
        for j in b["jobs"]:
            click.echo(f"             job {j['job_id']}: {j['reason']}")


@cli.command()
@click.option("--trace", "trace_path", required=True, type=click.Path(dir_okay=False),
              help="CSV: job_id,submit_s,duration_s,gpus,nodes (extra columns ignored).")
@click.option("--carry-in", "carry_in", type=click.Path(dir_okay=False), default=None,
              help="Jobs already running at t=0 (same columns, negative submit_s).")
@click.option("--policy", "policies", multiple=True,
              help="naive, immediate, static, slurmscale, slurmscale-governed (repeatable; "
                   "default all).")
@click.option("--max-nodes", default=64, show_default=True, type=click.IntRange(1, 100000))
@click.option("--gpus-per-node", default=8, show_default=True, type=click.IntRange(1, 64))
@click.option("--boot-time", default=300.0, show_default=True, type=click.FloatRange(0),
              help="Seconds from launch to a usable node.")
@click.option("--price", default=98.32, show_default=True, type=click.FloatRange(0),
              help="USD per node-hour.")
@click.option("--cooldown", default=None, type=click.FloatRange(0),
              help="Override the policies' cooldown (s).")
@click.option("--knob", "knob_args", multiple=True, metavar="KEY=VALUE",
              help="Override one policy knob (as in pools[].policy, e.g. min_idle_s=60); "
                   "repeatable.")
@click.option("--pool", "pool_name", default=None,
              help="Start from this pool's policy knobs and GPUs per node in the config "
                   "(--config); --max-nodes and --knob still override.")
@click.option("--accumulate/--no-accumulate", default=True, show_default=True,
              help="Model slurmscale's reservations that accumulate nodes for starving gangs "
                   "(the slurmscale policies only).")
@click.option("--hold-budget", default=None, type=click.FloatRange(0),
              help="Idle GPU-hours one reservation may spend holding nodes.")
@click.option("--accumulate-after", default=None, type=click.FloatRange(0),
              help="Seconds a gang waits before nodes are held for it.")
@click.option("--max-hold", default=None, type=click.FloatRange(0),
              help="Longest a reservation holds nodes (s).")
@click.option("--interruption-rate", default=None, type=click.FloatRange(0),
              metavar="PER_NODE_HOUR",
              help="Spot model: interruptions per spot node-hour (the pool becomes spot with "
                   "an on-demand fallback pool; any spot option turns the model on).")
@click.option("--storm-at", default=None, type=click.FloatRange(0), metavar="S",
              help="Spot model: at this second a storm interrupts --storm-fraction of the live "
                   "spot nodes; spot launches then fail for --storm-outage seconds.")
@click.option("--storm-fraction", default=None, type=click.FloatRange(0, 1))
@click.option("--storm-outage", default=1800.0, show_default=True, type=click.FloatRange(0))
@click.option("--on-demand-buffer", default=None, type=click.FloatRange(0, 1),
              metavar="FRACTION", help="Spot model: share of the GPUs in use kept warm on "
                                       "demand (the slurmscale policies).")
@click.option("--warm-on-demand-nodes", default=None, type=click.IntRange(0))
@click.option("--on-demand-nodes", default=None, type=click.IntRange(0),
              help="Spot model: the fallback pool's size (default: --max-nodes).")
@click.option("--spot-price", default=None, type=click.FloatRange(0),
              help="Spot model: USD per spot node-hour (default: 40% of the on-demand price).")
@click.option("--on-demand-price", default=None, type=click.FloatRange(0),
              help="USD per on-demand node-hour (default: --price).")
@click.option("--max-preemptions", default=2, show_default=True, type=click.IntRange(1),
              help="Spot model: a job preempted this often runs on demand only.")
@click.option("--requeue-delay", default=120.0, show_default=True, type=click.FloatRange(0),
              help="Spot model: seconds before a requeued job may start again.")
@click.option("--reserved-nodes", default=0, show_default=True, type=click.IntRange(0),
              help="Paid capacity: an On-Demand Capacity Reservation of N nodes, paid for "
                   "the whole run.")
@click.option("--reserved-preference", default="use_first", show_default=True,
              type=click.Choice(["use_first", "none"]),
              help="Paid capacity: launch gangs that fit whole into the reservation first, "
                   "or never (it is paid all the same).")
@click.option("--capacity-block", "capacity_blocks", multiple=True,
              metavar="START_S:END_S:NODES",
              help="Paid capacity: a Capacity Block of NODES nodes from START_S to END_S "
                   "(trace seconds); repeatable.")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Spot model: random seed for the interruptions.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--plot", "plot_path", default=None, type=click.Path(dir_okay=False),
              help="Write a PNG of demand vs provisioned GPUs per policy.")
@click.pass_context
def simulate(ctx: click.Context, trace_path: str, carry_in: str | None,
             policies: tuple[str, ...], max_nodes: int, gpus_per_node: int, boot_time: float,
             price: float, cooldown: float | None, knob_args: tuple[str, ...],
             pool_name: str | None, accumulate: bool, hold_budget: float | None,
             accumulate_after: float | None, max_hold: float | None,
             interruption_rate: float | None, storm_at: float | None,
             storm_fraction: float | None, storm_outage: float,
             on_demand_buffer: float | None, warm_on_demand_nodes: int | None,
             on_demand_nodes: int | None, spot_price: float | None,
             on_demand_price: float | None, max_preemptions: int, requeue_delay: float,
             reserved_nodes: int, reserved_preference: str, capacity_blocks: tuple[str, ...],
             seed: int, as_json: bool, plot_path: str | None) -> None:
    """Replay a job trace against a simulated Slurm + cloud, running the real policy code.

    Waits are the total time a job pended, over all its runs when it was requeued.

    JSON: {"trace": str, "policies": {NAME: {jobs, jobs_completed, wait_p50_s, wait_p95_s,
    gang_wait_p50_s, gang_wait_p95_s, busy_gpu_hours, idle_gpu_hours, cost_usd,
    spot_node_hours, on_demand_node_hours, scale_up_actions, scale_down_actions,
    node_launches, reservations_created, reservation_idle_gpu_hours, preemptions, requeues,
    jobs_failed, lost_gpu_hours, restart_wait_p50_s, restart_wait_p95_s,
    reserved_node_hours_paid, reserved_node_hours_used, reservation_utilization,
    jobs_killed_at_block_end}}}
    """
    from dataclasses import replace

    from slurmscale.policy.model import PoolKnobs
    from slurmscale.policy.reservations import ReservationKnobs
    from slurmscale.sim.engine import SimCloud, SpotModel
    from slurmscale.sim.engine import simulate as run_sim
    from slurmscale.sim.policies import POLICY_NAMES, builtin_policy
    from slurmscale.sim.report import metrics, plot
    from slurmscale.sim.trace import TraceError, load_trace

    names = policies or POLICY_NAMES
    if plot_path and not Path(plot_path).resolve().parent.is_dir():
        raise click.BadParameter(f"{plot_path!r}: directory {Path(plot_path).parent} does "
                                 "not exist", param_hint="--plot")
    for n in names:
        if n not in POLICY_NAMES:
            raise click.BadParameter(f"{n!r} is not one of {', '.join(POLICY_NAMES)}",
                                     param_hint="--policy")
    try:
        jobs = load_trace(trace_path)
        if carry_in:
            jobs = sorted(load_trace(carry_in, carry_in=True) + jobs,
                          key=lambda j: (j.submit_s, j.job_id))
    except TraceError as e:
        click.echo(f"slurmscale: {e}", err=True)
        sys.exit(2)
    from pydantic import ValidationError

    from slurmscale.config import PoolPolicy

    policy: dict[str, Any] = {}
    if pool_name:
        cfg = _load(ctx)
        try:
            pool = cfg.pool(pool_name)
        except KeyError:
            raise click.BadParameter(f"no pool {pool_name!r} in the config (pools: "
                                     f"{', '.join(p.name for p in cfg.pools)})",
                                     param_hint="--pool") from None
        policy = pool.policy.model_dump(exclude={"mode"})
        gpus_per_node = pool.gpus_per_node or gpus_per_node
    for arg in knob_args:
        key, sep, value = arg.partition("=")
        if not sep or key not in PoolPolicy.model_fields or key == "mode":
            raise click.BadParameter(
                f"{arg!r}: expected KEY=VALUE with KEY one of "
                f"{', '.join(k for k in PoolPolicy.model_fields if k != 'mode')}",
                param_hint="--knob")
        policy[key] = value
    if cooldown is not None:
        policy["cooldown_s"] = cooldown
    try:
        checked = PoolPolicy.model_validate(policy).model_dump(exclude={"mode"})
    except ValidationError as e:
        bad = "; ".join(f"{'.'.join(map(str, x['loc'])) or 'knobs'}: {x['msg']} "
                        f"(got {x['input']!r})" for x in e.errors())
        raise click.BadParameter(bad, param_hint="--knob") from None
    base = PoolKnobs(name="gpu", gpus_per_node=gpus_per_node, max_nodes=max_nodes, **checked)
    holds = None
    if accumulate:
        holds = ReservationKnobs()
        if hold_budget is not None:
            holds = replace(holds, hold_budget_gpu_hours=hold_budget)
        if accumulate_after is not None:
            holds = replace(holds, accumulate_after_s=accumulate_after)
        if max_hold is not None:
            holds = replace(holds, max_hold_s=max_hold)
    if (storm_at is None) != (storm_fraction is None):
        raise click.BadParameter("--storm-at and --storm-fraction go together (got "
                                 f"{'--storm-at' if storm_at is not None else '--storm-fraction'}"
                                 " alone)", param_hint="--storm-at")
    od_price = price if on_demand_price is None else on_demand_price
    spot = None
    if any(v is not None for v in (interruption_rate, storm_at, on_demand_buffer,
                                   warm_on_demand_nodes, spot_price, on_demand_nodes)):
        spot = SpotModel(
            on_demand_nodes=max_nodes if on_demand_nodes is None else on_demand_nodes,
            buffer=on_demand_buffer or 0.0, warm_nodes=warm_on_demand_nodes or 0,
            interruption_rate=interruption_rate or 0.0, storm_at_s=storm_at,
            storm_fraction=storm_fraction or 0.0, storm_outage_s=storm_outage,
            requeue_delay_s=requeue_delay, max_preemptions=max_preemptions, seed=seed)
        if spot_price is None:
            spot_price = round(0.4 * od_price, 2)
    cloud = SimCloud(boot_s=boot_time, price_per_node_hour=od_price,
                     spot_price_per_node_hour=spot_price if spot else None)
    paid = _paid_capacity(reserved_nodes, reserved_preference, capacity_blocks, max_nodes)
    results = [run_sim(jobs, builtin_policy(n, base, holds), cloud, spot, paid)
               for n in names]
    out = {"trace": trace_path,
           "policies": {r.policy: metrics(r, cloud) for r in results}}
    if plot_path:
        plot(results, plot_path, f"{Path(trace_path).name}, max {max_nodes} nodes")
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    cols = ["policy", "jobs_completed", "wait_p50_s", "wait_p95_s", "gang_wait_p50_s",
            "gang_wait_p95_s", "busy_gpu_hours", "idle_gpu_hours", "cost_usd", "node_launches"]
    if spot is not None:
        cols += ["preemptions", "requeues", "jobs_failed", "restart_wait_p95_s"]
    if paid is not None:
        cols += ["on_demand_node_hours", "reserved_node_hours_paid", "reservation_utilization",
                 "jobs_killed_at_block_end"]
    click.echo(_table([{"policy": k, **v} for k, v in out["policies"].items()], cols))


def _paid_capacity(reserved_nodes: int, preference: str, blocks: tuple[str, ...],
                   max_nodes: int) -> PaidCapacity | None:
    """The simulator's paid capacity from its options; a bad value is named (exit 2)."""
    import math

    from slurmscale.sim.engine import BlockSpec, PaidCapacity

    if reserved_nodes > max_nodes:
        raise click.BadParameter(f"{reserved_nodes} is more than --max-nodes {max_nodes}",
                                 param_hint="--reserved-nodes")
    specs = []
    for text in blocks:
        parts = text.split(":")
        try:
            if len(parts) != 3:
                raise ValueError
            start, end, nodes = float(parts[0]), float(parts[1]), int(parts[2])
        except ValueError:
            raise click.BadParameter(f"{text!r} is not START_S:END_S:NODES",
                                     param_hint="--capacity-block") from None
        if not (math.isfinite(start) and math.isfinite(end) and 0 <= start < end
                and 1 <= nodes <= max_nodes):
            raise click.BadParameter(f"{text!r}: needs 0 <= START_S < END_S (finite) and 1 <= "
                                     f"NODES <= --max-nodes {max_nodes}",
                                     param_hint="--capacity-block")
        specs.append(BlockSpec(start, end, nodes))
    if not reserved_nodes and not specs:
        return None
    return PaidCapacity(reserved_nodes, preference == "use_first",
                        tuple(sorted(specs, key=lambda b: b.start_s)))


from slurmscale.cli_check import check  # noqa: E402 - commands in modules of their own
from slurmscale.cli_report import report  # noqa: E402
from slurmscale.cli_reservations import reservations  # noqa: E402
from slurmscale.cli_status import status  # noqa: E402

cli.add_command(reservations)
cli.add_command(report)
cli.add_command(check)
cli.add_command(status)


def main() -> None:
    cli(obj={})


if __name__ == "__main__":
    main()
