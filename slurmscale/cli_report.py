"""`slurmscale report`: for cron. Quiet when writing a file; exit 0 on success, 1 with a
message when the store cannot be read or the file written, 2 on bad arguments."""

from __future__ import annotations

import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import click

from slurmscale.cli_common import _load, _parse_since, _store


@click.command()
@click.option("--since", default="24h", show_default=True,
              help="Window start: a duration back from now (24h, 7d) or an ISO date.")
@click.option("--until", default=None, help="Window end (ISO date; default now).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "csv", "html"]),
              default="text", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write here (atomically) and print nothing; default stdout.")
@click.pass_context
def report(ctx: click.Context, since: str, until: str | None, fmt: str,
           output: str | None) -> None:
    """What capacity was bought, used and waited for: GPU-hours provisioned/busy/idle and
    estimated cost per pool, queue wait p50/p95 by job size, gang time-to-start,
    preemptions, capacity errors, fallbacks, reservations and their idle cost, scale
    actions and anomalies. HTML embeds the capacity-vs-demand and wait plots.

    Cron: `0 7 * * * slurmscale report --since 24h --format html -o /srv/reports/today.html`
    """
    from slurmscale.report.compute import build_report, nodes_up_steps
    from slurmscale.report.render import MAX_POINTS, to_csv, to_html, to_json, to_text

    cfg = _load(ctx.find_root())
    start = _parse_since(since)
    end = _parse_since(until, "--until") or datetime.now(UTC)
    assert start is not None
    # whole seconds: the window the report prints is exactly the one it computed
    start, end = start.replace(microsecond=0), end.replace(microsecond=0)
    if start >= end:
        raise click.BadParameter(f"the window is empty: {start.isoformat()} is not before "
                                 f"{end.isoformat()}", param_hint="--since/--until")
    store = _store(cfg)
    try:
        r = build_report(cfg, store, start, end)
        if fmt == "html":
            text = to_html(r, store.sample_series(start, end, MAX_POINTS),
                           {p.name: p.gpus_per_node for p in cfg.pools},
                           (start.timestamp(), end.timestamp()),
                           nodes_up_steps(store.instances_between(start, end), start, end))
        else:
            text = {"text": to_text, "json": to_json, "csv": to_csv}[fmt](r)
    except Exception as e:  # noqa: BLE001 - cron wants one line, not a traceback
        click.echo(f"slurmscale report: cannot read the store: {type(e).__name__}: {e}",
                   err=True)
        sys.exit(1)
    finally:
        store.close()
    if output is None:
        click.echo(text, nl=False)
        return
    path = Path(output)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        click.echo(f"slurmscale report: cannot write {path}: {e.strerror or e}", err=True)
        sys.exit(1)
