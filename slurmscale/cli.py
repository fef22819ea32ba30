"""The `slurmscale` command. Read commands print a table, or stable JSON with --json."""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from logging.handlers import WatchedFileHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from slurmscale import __version__
from slurmscale.cli_common import (
    EXIT_SLURM_UNREADABLE,
    OWN_PROCESS,
    _db_url,
    _load,
    _open_store,
    _parse_since,
    _store,
    _table,
    end_at_once,
    in_time,
)
from slurmscale.config import Config
from slurmscale.spool import RequestKind

if TYPE_CHECKING:
    from slurmscale.daemon.passes.capacity import PassPlan

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


# syslog's priorities (sd-daemon(3): a line on a journal stream may begin with "<N>")
_PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6,
             logging.DEBUG: 7}


class JournalLines(logging.Formatter):
    """A line for journald: its syslog priority first, no timestamp (journald stamps each
    line), so `journalctl -p err` finds the errors."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        prio = _PRIORITY.get(record.levelno, 6 if record.levelno < logging.WARNING else 3)
        # (a traceback's lines would each be a journal entry of their own: kept in one)
        return f"<{prio}>" + self.inner.format(record).replace("\n", " | ")


def _on_journal() -> bool:
    """stderr is systemd's journal stream (JOURNAL_STREAM is its device:inode: systemd.exec(5))."""
    want = os.environ.get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return want == f"{st.st_dev}:{st.st_ino}"


def _setup_daemon_logging(cfg: Config, verbose: bool) -> None:
    """Under systemd (stderr is the journal): one copy of each record, to the journal, with
    its priority; the log file too only where the config names one. Elsewhere: stderr and
    the log file, which is reopened when logrotate (or anyone) moves it away."""
    plain = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    fmt: logging.Formatter = JsonLines() if cfg.log_format == "json" else plain
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    journal = _on_journal()
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(JournalLines(logging.Formatter("%(levelname)s %(name)s: %(message)s")
                                  if cfg.log_format == "text" else fmt) if journal else fmt)
    handlers: list[logging.Handler] = [err]
    if cfg.log_file and (not journal or "log_file" in cfg.model_fields_set):
        Path(cfg.log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(WatchedFileHandler(cfg.log_file))
        handlers[-1].setFormatter(fmt)
    for h in handlers:
        root.addHandler(h)
    for noisy in ("botocore", "boto3", "urllib3", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _iso(dt: datetime | None, timespec: str = "seconds") -> str | None:
    if dt is None:
        return None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).isoformat(timespec=timespec)


class _Commands(click.Group):
    """The commands that live in modules of their own are imported when run (or listed),
    not by every command: `plan --live` at 50,000 jobs paid ~70 ms for imports it never
    used."""

    LAZY = {"aws-policy": ("slurmscale.cli_stack", "aws_policy"),
            "aws-template": ("slurmscale.cli_stack", "aws_template"),
            "check": ("slurmscale.cli_check", "check"),
            "config": ("slurmscale.cli_stack", "config_group"),
            "install": ("slurmscale.cli_install", "install"),
            "node-image": ("slurmscale.cli_stack", "node_image"),
            "node-init": ("slurmscale.cli_node", "node_init_cmd"),
            "node-userdata": ("slurmscale.cli_node", "node_userdata"),
            "report": ("slurmscale.cli_report", "report"),
            "reservations": ("slurmscale.cli_reservations", "reservations"),
            "simulate": ("slurmscale.cli_simulate", "simulate"),
            "slurm-conf": ("slurmscale.cli_slurm_conf", "slurm_conf"),
            "status": ("slurmscale.cli_status", "status"),
            "uninstall": ("slurmscale.cli_install", "uninstall")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.LAZY})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.LAZY and name not in self.commands:
            import importlib

            module, attr = self.LAZY[name]
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)


@click.group(cls=_Commands)
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
    from slurmscale.daemon.api import SocketUnusable, probe_socket_path, socket_gid

    try:
        socket_gid(cfg.daemon.socket_group, cfg.daemon.api_users)
    except ValueError as e:
        click.echo(f"slurmscale: {e}", err=True)
        sys.exit(2)
    if cfg.log_file:  # (before: a directory here was an IsADirectoryError traceback)
        try:
            with open(cfg.log_file, "a"):
                pass
        except OSError as e:
            click.echo(f"slurmscale: log_file {cfg.log_file}: {e.strerror}", err=True)
            sys.exit(2)
    try:
        probe_socket_path(cfg.socket_path)  # before the daemon takes the lead
        _setup_daemon_logging(cfg, verbose)
        from slurmscale.daemon.service import Daemon

        Daemon(cfg).run()
    except SocketUnusable as e:
        click.echo(f"slurmscale: {e}", err=True)
        sys.exit(2)


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
        click.echo(json.dumps({"nodes": rows, "slurm_error": err}, indent=2, default=str))
    else:
        shown = rows if show_all else [r for r in rows if r["instance_id"] or (
            r["slurm_state"] and "POWERED_DOWN" not in r["slurm_state"])]
        click.echo(_table(shown, ["node", "pool", "slurm_state", "instance_id", "addr",
                                  "reason"]))
        if err:
            click.echo(f"warning: Slurm not readable: {err}", err=True)
    if err:
        sys.exit(EXIT_SLURM_UNREADABLE)


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
        click.echo(json.dumps({"events": rows}, indent=2, default=str))
        return
    click.echo(_table(rows, ["at", "kind", "node", "message"]))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--live", is_flag=True,
              help="Compute the plan from live Slurm state now, not the daemon's last pass.")
@click.pass_context
def plan(ctx: click.Context, as_json: bool, live: bool) -> None:
    """The capacity plan, with reasons: the one the running daemon made at its last pass
    (what it carried out), or, with --live or when no daemon answers on the config's
    socket, the one the policy makes from live Slurm state now. Changes nothing.

    JSON: {"source": "daemon"|"live", "now": unix_s (when the plan was made),
    "pools": {NAME: {"target": n, "pending_jobs": n,
    "pending_gpu_hours": x, "pending_gangs": [[job_id, nodes]], "oldest_wait_s": x}},
    "actions": [{"kind", "pool", "reason", "nodes": [...], "count"}],
    "reservations": [{"kind": create|extend|attach|release, "name", "pool", "job_id",
    "reason", "nodes": [...]}], "partition_rewrites": [{"job_id", "pool", "partitions": [...],
    "reason"}], "blocks": [{"pool", "open", "reason", "closed_from", "closed_until",
    "next_start", "jobs": [{"job_id", "reason"}]}], "gangs": [GANG],
    "limit_use": {POOL: {"value" (the share of their time limits jobs run, as the hold rule
    used it), "jobs" (the ended jobs it was learned from), "source": learned|unlearned (auto,
    too few jobs yet: 1.0)|fixed (the config's), "said"}}, "in_grace": [{"job_id", "node",
    "pool", "signal", "cause" (interrupted|reclaimed|block-end|unhealthy), "signalled_at",
    "requeue_at" (unix s)}] (jobs signalled before their requeue: a pool's grace_signal),
    "routes": [{"at" (unix s), "pool", "job_id", "nodes", "kind": reserved|normal|refused,
    "reason"}] (where the daemon sent the gangs of the last 10 minutes, and why; none --live)

    GANG (each pending multi-node job): {"job_id", "pool", "partition", "nodes", "waited_s",
    "priority", "ahead" (pending jobs Slurm ranks above it), "overtaken_by" (of those,
    submitted after it), "factors": {"age", "fairshare", "job_size", "partition", "qos"} or
    null (sprio does not list it), "expected_start" (backfill's plan, unix s, or null),
    "age_lift" (when its age factor alone ranks it above the jobs that overtook it, unix s,
    or null: never), "age_lift_note", "hold" (what the reservation planner decided for it
    this pass, or null: not considered)}
    """
    import time as _time

    cfg = _load(ctx)
    data = None if live else _daemon_plan(cfg)
    heap = None
    if data is None:
        data, heap = _live_plan(cfg)
    if as_json:
        # indented for a person at a terminal; compact for a program (json's C encoder does
        # not indent: at 10,000 gangs the indented dump alone took 0.5 s)
        click.echo(json.dumps(data, indent=2 if sys.stdout.isatty() else None, default=str))
        end_at_once(ctx, heap)
        return
    _print_plan(data, _time.time())
    end_at_once(ctx, heap)


def _print_plan(data: dict[str, Any], now: float) -> None:
    """The plan as `plan` prints it for a person: the pools, the actions, the reservations,
    the gangs' standings, and what the daemon is in the middle of."""
    age = now - data["now"]
    click.echo(f"the daemon's plan of {age:.0f}s ago (--live: from Slurm now)"
               if data["source"] == "daemon" else "planned from live Slurm state now")
    click.echo(_table([{"pool": k, **{kk: vv for kk, vv in v.items() if kk != "pending_gangs"},
                        "gangs": len(v["pending_gangs"])} for k, v in data["pools"].items()],
                      ["pool", "target", "pending_jobs", "pending_gpu_hours", "gangs",
                       "oldest_wait_s"]))
    click.echo()
    if not data["actions"]:
        click.echo("no actions: capacity matches demand")
    for a in data["actions"]:
        nodes = f" [{','.join(a['nodes'])}]" if a["nodes"] else ""
        click.echo(f"{a['kind']:<13} {a['pool']:<12} {a['reason']}{nodes}")
    for r in data["reservations"]:
        click.echo(f"reservation {r['kind']:<7} {r['name']}: {r['reason']}")
    for w in data["partition_rewrites"]:
        click.echo(f"partition    job {w['job_id']} -> {','.join(w['partitions'])}: "
                   f"{w['reason']}")
    if data["gangs"]:
        click.echo()
        click.echo(_table([_gang_row(g, data["now"]) for g in data["gangs"]],
                          ["job_id", "pool", "nodes", "waited_s", "priority", "ahead",
                           "overtaken_by", FACTORS, "expected_start", "age_lift"]))
        for g in data["gangs"]:
            click.echo(f"gang         job {g['job_id']}: {g['age_lift_note']}"
                       + (f"; hold: {g['hold']}" if g["hold"] else ""))
    for pool, u in data.get("limit_use", {}).items():
        click.echo(f"limit_use    {pool:<12} {u['said']}")
    for b in data["blocks"]:
        click.echo(f"block        {b['pool']:<12} {b['reason']}")
        for j in b["jobs"]:
            click.echo(f"             job {j['job_id']}: {j['reason']}")
    for r in data.get("routes", []):
        who = f"job {r['job_id']} gang" if r["job_id"] else "single nodes"
        click.echo(f"launch       {who} {r['nodes']} ({data['now'] - r['at']:.0f}s ago) -> "
                   f"{r['kind']}: {r['reason']}")
    for g in data.get("in_grace", []):
        left = g["requeue_at"] - data["now"]
        click.echo(f"grace        job {g['job_id']} on {g['node']}: SIG{g['signal']} "
                   f"({g['cause']}); requeued in {max(0.0, left):.0f}s unless it leaves first")


def _daemon_plan(cfg: Config) -> dict[str, Any] | None:
    """The running daemon's plan of its last pass, or None (and why, on stderr) when it
    has none to give: not running, standing by, no pass yet, this user not allowed."""
    from slurmscale.api_client import PLAN_TIMEOUT_S, ApiError, call

    try:
        status, data = call(cfg.socket_path, "GET", "/v1/plan", timeout=PLAN_TIMEOUT_S)
    except ApiError as e:
        why = str(e)
    else:
        if status == 200 and isinstance(data, dict):
            return data
        why = f"{status}: {data.get('error') if isinstance(data, dict) else data}"
    click.echo(f"slurmscale: no plan from the daemon ({why}); planning from live Slurm "
               "state", err=True)
    return None


def _live_plan(cfg: Config) -> tuple[dict[str, Any], PassPlan]:
    """The plan from live Slurm state now, as `plan` prints it, and the pass's plan it came
    from (the whole queue read: the caller may end the process without freeing it)."""
    import gc
    import time as _time

    from slurmscale.daemon.passes.capacity import REQUEUED_RECENTLY_S, current_plan
    from slurmscale.daemon.passes.holds import limit_use_runs_since
    from slurmscale.daemon.plan_view import SOURCE_LIVE, plan_data
    from slurmscale.slurm.cli_backend import SlurmCLI
    from slurmscale.slurm.protocol import SlurmError
    from slurmscale.store.snapshot import ReadAside, StoreUnreadable

    # A second's work over the whole queue that makes no reference cycles worth collecting,
    # in a process that ends with it: the collector's walks of it (every 100,000 allocations
    # even as tuned, gc_tuning.py) cost about a tenth of the command at 50,000 jobs
    gc.disable()
    now = _time.time()
    # The daemon's memory (governed targets, cooldown clocks, hold budgets) makes this the
    # plan it would carry out: read by a child process while this one reads and parses
    # Slurm (opening the SQL store alone is SQLAlchemy's import: a third of the command)
    # (and, once the queue is read, the gangs' standings by another: sprio's read and a
    # sweep of the queue, while this one builds its snapshot)
    aside = ReadAside(lambda: _store(cfg), now - REQUEUED_RECENTLY_S,
                      limit_use_runs_since(cfg, now))
    try:
        pp = current_plan(cfg, SlurmCLI(cfg.slurm), aside.snapshot, now, standings=True,
                          aside=True)
    except SlurmError as e:
        click.echo(f"slurmscale: cannot read Slurm: {e}", err=True)
        sys.exit(1)
    except StoreUnreadable as e:
        click.echo(f"slurmscale: cannot read the store: {e}", err=True)
        sys.exit(1)
    finally:
        aside.close()
    return plan_data(pp, SOURCE_LIVE), pp


FACTORS = "age/fs/size/part/qos"  # sprio's weighted factors, as the plan's table heads them


def _gang_row(g: dict[str, Any], now: float) -> dict[str, object]:
    """One gang as a table row: times relative to now."""
    f = g["factors"]
    return {**g, "priority": f"{g['priority']:.0f}",
            FACTORS: "-" if f is None else "/".join(
                f"{f[k]:.0f}" for k in ("age", "fairshare", "job_size", "partition", "qos")),
            "expected_start": in_time(g["expected_start"], now, "no plan"),
            "age_lift": in_time(g["age_lift"], now, "never")}



def main() -> None:
    from slurmscale.gc_tuning import tune_gc

    tune_gc()
    cli(obj={OWN_PROCESS: True})


if __name__ == "__main__":
    main()
