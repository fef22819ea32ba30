"""`slurmscale reservations`: what slurmscale holds for starving gangs, and why.

Only reservations named with slurmscale's prefix are listed or released; an admin's own
reservations are never touched (use scontrol for those)."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

import click

from slurmscale.audit import Kind
from slurmscale.cli_common import EXIT_SLURM_UNREADABLE, _load, _store, _table, in_time
from slurmscale.config import Config
from slurmscale.daemon.plan_view import gang_json
from slurmscale.lifecycles import LIVE_HOLD_STATES, HoldState

FIELDS_HELP = """JSON fields: name, job_id, user, partition, pool, nodes (held now, from Slurm),
nodes_held, nodes_needed, idle_gpu_hours (spent holding), age_s, state (active |
releasing: Slurm keeps it while its job runs in it | released), attached (the job is pointed
at it), reason (why it was released), in_slurm (whether Slurm still has it), limit_use (the share of
their time limits its pool's jobs run, as the hold rule uses it now), limit_use_jobs (the
ended jobs it rests on), limit_use_source (learned | unlearned | fixed). `show` adds
standing: its job's place in Slurm's queue while it pends (as in `plan --json`'s gangs:
ahead, overtaken_by, priority, factors, expected_start, age_lift, age_lift_note), or null."""


def _rows(cfg: Config, include_released: bool) -> tuple[list[dict[str, Any]], str | None]:
    from slurmscale.daemon.passes.holds import LimitUseLearner
    from slurmscale.slurm.cli_backend import SlurmCLI
    from slurmscale.slurm.protocol import SlurmError

    store = _store(cfg)
    try:
        rows = store.holds(None if include_released else LIVE_HOLD_STATES)
        uses = LimitUseLearner(cfg, store).current(time.time())
    finally:
        store.close()
    err = None
    try:
        in_slurm = {r.name: r for r in SlurmCLI(cfg.slurm).reservations()}
    except SlurmError as e:
        in_slurm, err = {}, str(e)
    now = time.time()
    out = []
    for r in rows:
        res = in_slurm.get(r.name)
        nodes = list(res.nodes) if res else json.loads(r.nodes)
        pool = next((p for p in cfg.pools if p.name == r.pool), None)
        out.append({
            "name": r.name, "job_id": r.job_id, "user": r.user_name,
            "partition": pool.partition if pool else None, "pool": r.pool, "nodes": nodes,
            "nodes_held": len(nodes), "nodes_needed": r.needed,
            "idle_gpu_hours": round(r.spent_gpu_s / 3600, 2),
            "age_s": round((r.released_s or now) - r.created_s),
            "state": r.state, "attached": r.attached, "reason": r.reason or None,
            "in_slurm": res is not None if err is None else None,
            **({"limit_use": round(u.value, 4), "limit_use_jobs": u.jobs,
                "limit_use_source": u.source} if (u := uses.get(r.pool)) else {}),
        })
    return out, err


def _standing(cfg: Config, job_id: str) -> dict[str, object] | None:
    """The held job's place in Slurm's queue now (None: not pending, or Slurm unreadable)."""
    from slurmscale.daemon.passes.capacity import read_priorities
    from slurmscale.daemon.queue.queue_view import gang_jobs
    from slurmscale.policy.standing import gang_standings
    from slurmscale.slurm.cli_backend import SlurmCLI
    from slurmscale.slurm.protocol import SlurmError

    slurm = SlurmCLI(cfg.slurm)
    try:
        jobs = slurm.active_jobs()
        gang = tuple(g for g in gang_jobs(cfg, jobs, frozenset({job_id}))
                     if g.job_id == job_id)
        if not gang or not gang[0].pending:
            return None
        (s,) = gang_standings(gang, {p.name: p.partition for p in cfg.pools}, jobs,
                              *read_priorities(slurm), time.time())
    except SlurmError:
        return None
    return gang_json(s, None)


@click.group()
def reservations() -> None:
    """Reservations slurmscale holds for large pending gang jobs."""


@reservations.command("list", help=f"slurmscale's reservations.\n\n{FIELDS_HELP}\n\n"
                      "JSON: {\"reservations\": [...], \"slurm_error\": str|null}")
@click.option("--all", "include_released", is_flag=True, help="Include released ones.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def list_(ctx: click.Context, include_released: bool, as_json: bool) -> None:
    cfg = _load(ctx)
    rows, err = _rows(cfg, include_released)
    if as_json:
        click.echo(json.dumps({"reservations": rows, "slurm_error": err}, indent=2,
                              default=str))
    else:
        view = [{**r, "held": f"{r['nodes_held']}/{r['nodes_needed']}"} for r in rows]
        click.echo(_table(view, ["name", "job_id", "user", "partition", "held",
                                 "idle_gpu_hours", "age_s", "state", "reason"]))
        if err:
            click.echo(f"\nwarning: Slurm not readable: {err}", err=True)
    if err:
        sys.exit(EXIT_SLURM_UNREADABLE)


@reservations.command(help=f"One of slurmscale's reservations.\n\n{FIELDS_HELP}")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def show(ctx: click.Context, name: str, as_json: bool) -> None:
    cfg = _load(ctx)
    rows, err = _rows(cfg, include_released=True)
    row = next((r for r in rows if r["name"] == name), None)
    if row is None:
        click.echo(f"slurmscale: no slurmscale reservation named {name!r}", err=True)
        sys.exit(2)
    row["standing"] = _standing(cfg, row["job_id"]) if row["state"] != "released" else None
    if as_json:
        click.echo(json.dumps(row, indent=2, default=str))
        return
    for k, v in row.items():
        if k == "standing":
            continue
        click.echo(f"{k:>15}: {','.join(v) if isinstance(v, list) else v}")
    s = row["standing"]
    if s is not None:
        f = s["factors"]
        click.echo(f"{'jobs ahead':>15}: {s['ahead']} ({s['overtaken_by']} submitted after it)")
        click.echo(f"{'priority':>15}: {s['priority']:.0f}" + ("" if f is None else (
            " = " + " + ".join(f"{k} {f[k]:.0f}" for k in f))))
        start = s["expected_start"]
        click.echo(f"{'backfill plan':>15}: " + in_time(start, time.time(), "none"))
        click.echo(f"{'age lift':>15}: {s['age_lift_note']}")
    if err:
        click.echo(f"warning: Slurm not readable: {err}", err=True)


@reservations.command()
@click.argument("name")
@click.option("--reason", default="", help="Why (recorded in the audit log).")
@click.pass_context
def release(ctx: click.Context, name: str, reason: str) -> None:
    """Delete one of slurmscale's reservations now; its job is not held for again (it stays
    pending, never held)."""
    from slurmscale.slurm.cli_backend import SlurmCLI
    from slurmscale.slurm.protocol import SlurmError

    cfg = _load(ctx)
    if not name.startswith(cfg.reservations.prefix):
        click.echo(f"slurmscale: {name!r} is not a slurmscale reservation (prefix "
                   f"{cfg.reservations.prefix!r}); slurmscale never touches others",
                   err=True)
        sys.exit(2)
    store = _store(cfg)
    try:
        row = store.hold(name)
        why = "released by an admin" + (f": {reason}" if reason else "")
        try:
            SlurmCLI(cfg.slurm).delete_reservation(name)
        except SlurmError as e:
            if "invalid" not in e.stderr.lower():  # already gone is fine: record it
                click.echo(f"slurmscale: cannot delete {name}: {e}", err=True)
                sys.exit(1)
        if row is not None:
            row.state, row.reason, row.exhausted, row.released_s = (
                HoldState.RELEASED, why, True, time.time())
            store.put_hold(row)
        store.add_event(Kind.RESERVATION_RELEASED, f"{name}: {why}", datetime.now(UTC))
    finally:
        store.close()
    click.echo(f"released {name}")
