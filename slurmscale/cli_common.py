"""Helpers every `slurmscale` subcommand module shares: config loading with clean errors,
opening the store read-only-safely, plain tables."""

from __future__ import annotations

import logging
import os
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from slurmscale.config import Config, ConfigError
from slurmscale.config_file import load_config

# The read commands (status, nodes, reservations list) print what they could, and exit 3
# when Slurm could not be read: the answer is the store's and the daemon's alone (a script
# or a cron job tells a full answer, 0, from a partial one without parsing it).
EXIT_SLURM_UNREADABLE = 3
# `status` for monitoring (cron, Nagios): what is wrong, the worst first (docs/reference.md)
EXIT_DAEMON_UNREACHABLE = 4  # no daemon answers on the socket
EXIT_PASS_FAILED = 5  # the daemon's last pass failed (an exception, or the lease lost)
EXIT_EC2_FAILING = 6  # the last pass ran, but EC2 calls failed in it
EXIT_QUEUE_UNREADABLE = 7  # the events queue cannot be read: spot warnings go unhandled


# Slurm's answer for a start it cannot plan is a time about a year ahead (backfill gives a
# job it cannot place within its window no plan); shown as what it means
NO_PLAN_AFTER_S = 300 * 86400.0


# main()'s mark in the context's object: this process is the command's own (not a caller's
# CliRunner, whose process must go on after the command)
OWN_PROCESS = "own_process"


def end_at_once(ctx: click.Context, heap: object) -> None:
    """Ends a one-shot command that built a big heap (`plan --live`: hundreds of thousands of
    objects at 50,000 jobs; `heap`, held by the caller so that no return frees it piece by
    piece) as soon as its output is out: the interpreter's exit would free them one by one
    (~0.07 s of the command), for memory the kernel takes back whole. Only in the command's
    own process (main() marks it); a flush that fails (a closed pipe) leaves the ordinary
    exit to say so; no heap (None), nothing to spare."""
    if heap is None or not (ctx.obj or {}).get(OWN_PROCESS):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    logging.shutdown()
    os._exit(0)


def in_time(t: float | None, now: float, none: str) -> str:
    """A planned time as the tables show it: "in 120s", or `none` for none or Slurm's
    year-ahead "not planned"."""
    if t is None or t - now > NO_PLAN_AFTER_S:
        return none
    return f"in {max(0.0, t - now):.0f}s"


def _load(ctx: click.Context) -> Config:
    try:
        return load_config(ctx.obj.get("config"))
    except ConfigError as e:
        click.echo(f"slurmscale: {e}", err=True)
        ctx.exit(2)
        raise  # unreachable; for type checkers


def _table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    if not rows:
        return "(none)"
    def cell(r: dict[str, Any], c: str) -> str:
        v = r.get(c)
        return "-" if v is None or v == "" else str(v)

    widths = {c: max(len(c), *(len(cell(r, c)) for r in rows)) for c in cols}
    out = ["  ".join(c.upper().ljust(widths[c]) for c in cols).rstrip()]
    for r in rows:
        out.append("  ".join(cell(r, c).ljust(widths[c]) for c in cols).rstrip())
    return "\n".join(out)


def _open_store(cfg: Config):  # type: ignore[no-untyped-def]
    """The store, or one line naming why it cannot be opened (exit 2: the config's URL)."""
    from slurmscale.store.repo import Store, StoreError

    try:
        return Store(_db_url(cfg))
    except StoreError as e:
        click.echo(f"slurmscale: {e}", err=True)
        sys.exit(2)


def _db_url(cfg: Config) -> str:
    try:
        return cfg.database_url()
    except ConfigError as e:
        click.echo(f"slurmscale: {e}", err=True)
        sys.exit(2)


def _store(cfg: Config):  # type: ignore[no-untyped-def]
    s = _open_store(cfg)
    problem = s.schema_problem()
    if problem:
        click.echo(f"slurmscale: {problem}", err=True)
        sys.exit(1)
    return s


def _parse_since(text: str | None, param: str = "--since") -> datetime | None:
    if not text:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].isascii() and text[:-1].isdigit():
        seconds = int(text[:-1]) * units[text[-1]]
        if seconds > 100 * 365 * 86400:
            raise click.BadParameter(f"{text!r} reaches back more than 100 years",
                                     param_hint=param)
        return datetime.now(UTC) - timedelta(seconds=seconds)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither a duration (30m, 24h, 7d) nor an "
                                 "ISO date", param_hint=param) from None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
