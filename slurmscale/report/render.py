"""The report as text (80 columns, for mail from cron), JSON, CSV (one `section,name,field,
value` row per number, for spreadsheets) or one self-contained HTML page with inline SVG plots
(no JavaScript, no network, no plotting library needed on the head node)."""

from __future__ import annotations

import csv
import html
import io
import textwrap
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from slurmscale.report.compute import Report, Wait
from slurmscale.report.svg import Steps, bar_chart, step_chart


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    s = float(s)
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.1f}m"
    return f"{s / 3600:.1f}h"


def _num(v: float | None, fmt: str = "{:,.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _rows(r: Report) -> Iterator[tuple[str, str, str, Any]]:
    for p in [*r.pools, r.totals]:
        for f in ("capacity_type", "instances", "node_hours", "gpu_hours_provisioned",
                  "gpu_hours_busy", "gpu_hours_idle", "est_cost_usd"):
            yield "usage", p.pool, f, getattr(p, f)
    for w in [*r.waits, r.gang_time_to_start]:
        for f in ("jobs", "p50_s", "p95_s", "max_s"):
            yield "queue_wait", w.size, f, getattr(w, f)
    for f in ("preemptions", "requeues", "launches", "launch_failures",
              "reservation_idle_gpu_hours"):
        yield "counts", "", f, getattr(r, f)
    for e in r.capacity_errors:
        yield "capacity_errors", e.pool, e.code, e.gangs
    for section, d in (("fallbacks", r.fallbacks), ("scale_actions", r.scale_actions),
                       ("anomalies", r.anomalies)):
        for k, v in d.items():
            yield section, "", k, v
    for h in r.reservations:
        for f in ("pool", "job_id", "needed", "state", "idle_gpu_hours"):
            yield "reservations", h.name, f, getattr(h, f)
    for u in r.paid_capacity:
        for f in ("pool", "kind", "total", "start", "end", "paid_node_hours",
                  "used_node_hours", "idle_node_hours", "utilization"):
            yield "paid_capacity", u.id, f, getattr(u, f)
    for x in r.replacements:
        for f in ("replaced", "left_for_admin", "jobs_requeued", "p50_to_fresh_s",
                  "lost_gpu_hours"):
            yield "replacements", f"{x.pool}/{x.cause}", f, getattr(x, f)
    for g in r.graces:
        for f in ("signalled", "left_in_grace", "requeued", "in_grace", "p50_grace_s"):
            yield "graces", f"{g.pool}/{g.cause}", f, getattr(g, f)
    for wp in r.warm_pools:
        for f in ("instances", "stopped_hours", "est_volume_cost_usd"):
            yield "warm_pools", wp.pool, f, getattr(wp, f)
    for t in r.time_to_run:
        for ph in t.phases:
            for f in ("n", "median_s", "p95_s"):
                yield "time_to_run", f"{t.pool}/{t.kind}/{ph.phase}", f, getattr(ph, f)


def to_csv(r: Report) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["section", "name", "field", "value"])
    for row in _rows(r):
        w.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


def to_json(r: Report) -> str:
    return r.model_dump_json(indent=2)


def _wait_line(w: Wait) -> str:
    return (f"  {w.size:<18} {w.jobs:>6}  {_dur(w.p50_s):>8}  {_dur(w.p95_s):>8}  "
            f"{_dur(w.max_s):>8}")


def to_text(r: Report) -> str:
    out = [f"slurmscale report: cluster {r.cluster}", f"{r.since} .. {r.until}", "",
           "GPU-hours by pool       provisioned      busy      idle  cost (USD)",
           *(f"  {p.pool[:14]:<14} {p.capacity_type[:9]:<9} {p.gpu_hours_provisioned:>9,.1f} "
             f"{p.gpu_hours_busy:>9,.1f} {p.gpu_hours_idle:>9,.1f}  "
             f"{_num(p.est_cost_usd, '{:,.2f}'):>10}" for p in [*r.pools, r.totals]),
           "", "Queue wait by job size     jobs       p50       p95       max",
           *(_wait_line(w) for w in [*r.waits, r.gang_time_to_start]), "",
           f"Launches {r.launches}, failed {r.launch_failures}; preemptions {r.preemptions}, "
           f"requeues {r.requeues}"]
    if r.capacity_errors:
        out += ["Capacity errors:", *(f"  {e.pool}: {e.code} x{e.gangs}"
                                      for e in r.capacity_errors)]
    out.append("Fallbacks: " + ", ".join(f"{k} {v}" for k, v in r.fallbacks.items()))
    out.append("Scale actions: " + ", ".join(f"{k} {v}" for k, v in r.scale_actions.items()))
    out.append(f"Reservations: {len(r.reservations)}, idle cost "
               f"{r.reservation_idle_gpu_hours:,.2f} GPU-hours")
    out += [f"  {h.name} job {h.job_id} ({h.pool}, {h.needed} nodes): {h.state}, "
            f"{h.idle_gpu_hours:,.2f} GPU-h idle" for h in r.reservations]
    if r.replacements:
        # (cause boot-*: a launched node that did not join Slurm, given a fresh instance)
        out.append("Nodes replaced             replaced  left  requeued  to fresh  lost GPU-h")
        out += [f"  {x.pool[:12]:<12} {x.cause[:16]:<16} {x.replaced:>4} {x.left_for_admin:>5} "
                f"{x.jobs_requeued:>9} {_dur(x.p50_to_fresh_s):>9} {x.lost_gpu_hours:>11,.2f}"
                for x in r.replacements]
    if r.graces:
        # (jobs signalled before a requeue: the pool's grace_signal)
        out.append("Jobs signalled             signalled  left  requeued  in grace  p50 grace")
        out += [f"  {g.pool[:12]:<12} {g.cause[:12]:<12} {g.signalled:>9} {g.left_in_grace:>5} "
                f"{g.requeued:>9} {g.in_grace:>9} {_dur(g.p50_grace_s):>10}" for g in r.graces]
    if r.warm_pools:
        # (stopped instances kept for the next resumes: billed for their volumes)
        out.append("Warm pools                 stopped  instance-h  volume cost")
        out += [f"  {w.pool[:24]:<24} {w.instances:>7} {w.stopped_hours:>11,.1f} "
                f"{_num(w.est_volume_cost_usd, '{:,.2f}'):>12}" for w in r.warm_pools]
    if r.paid_capacity:
        out.append("Paid capacity (node-hours)      paid      used      idle   use")
        out += [f"  {u.id[-12:]:<12} {'block' if u.kind == 'capacity-block' else 'odcr':<5} "
                f"{u.pool[:10]:<10} {u.paid_node_hours:>9,.1f} {u.used_node_hours:>9,.1f} "
                f"{u.idle_node_hours:>9,.1f} {_num(u.utilization, '{:.0%}'):>5}"
                for u in r.paid_capacity]
    out += _time_to_run_lines(r)
    bad = {k: v for k, v in r.anomalies.items() if v}
    out.append("Anomalies: " + (", ".join(f"{k} {v}" for k, v in bad.items()) or "none"))
    out += [f"  {a.at[5:16]} {a.kind}: {a.message}"[:80] for a in r.recent_anomalies[-5:]]
    if r.unpriced:
        out.append("No price configured (prices:) for: " + ", ".join(r.unpriced))
    return "\n".join(textwrap.fill(line, 80, subsequent_indent="    ", break_on_hyphens=False)
                     if len(line) > 80 else line for line in out) + "\n"


def _time_to_run_lines(r: Report) -> list[str]:
    """Each pool's launches, phase by phase (docs/operations.md: Time to run)."""
    if not r.time_to_run:
        return []
    out = ["Time to run, launch by launch (median/p95; phases a launch has both ends of)"]
    for t in r.time_to_run:
        out.append(f"  {t.pool} {'gangs' if t.kind == 'gang' else 'single nodes'}, "
                   f"{t.launches} instance(s):")
        line = "  "
        for ph in t.phases:
            if not ph.n:
                continue
            cell = f"  {ph.phase} {_dur(ph.median_s)}/{_dur(ph.p95_s)}"
            if len(line) + len(cell) > 80:
                out.append(line)
                line = "  "
            line += cell
        out.append(line)
        out += [f"    slow: {s}" for s in t.slow]
    return out


def _time_to_run_html(r: Report) -> str:
    if not r.time_to_run:
        return "<p>No launch in the window.</p>"
    return _table(["pool", "kind", "phase", "launches", "p50", "p95"],
                  [[t.pool, t.kind, ph.phase, ph.n, _dur(ph.median_s), _dur(ph.p95_s)]
                   for t in r.time_to_run for ph in t.phases if ph.n]) + "".join(
        f"<p>{html.escape(t.pool)}: {html.escape(s)}</p>" for t in r.time_to_run for s in t.slow)


def _warm_html(r: Report) -> str:
    head = "<h2>Warm pools (stopped instances kept for the next resumes)</h2>"
    if not r.warm_pools:
        return head + "<p>None.</p>"
    return head + _table(["pool", "instances stopped", "stopped instance-hours",
                          "volume cost"],
                         [[w.pool, w.instances, f"{w.stopped_hours:,.1f}",
                           _num(w.est_volume_cost_usd, "{:,.2f}")] for w in r.warm_pools])


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0}td,th{padding:3px 10px;border-bottom:1px solid #eee;
text-align:right}th{background:#f5f5f5}td:first-child,th:first-child{text-align:left}
.kpi{display:inline-block;margin:0 24px 8px 0}.kpi b{display:block;font-size:22px}
.bad{color:#b00}svg{max-width:100%;height:auto}"""


# per line: a day of minute samples drawn as they are (a burst of a few minutes shows), a
# month as means of half an hour (in SQL)
MAX_POINTS = 1440


def _charts(series: dict[str, list[tuple[float, float, float, float]]],
            gpus_per_node: dict[str, int], window: tuple[float, float], ups: Steps,
            waits: list[Wait]) -> list[str]:
    """Each pool's capacity against its demand (steps), and the queue waits by job size."""
    charts = []
    for pool in sorted(set(series) | set(ups)):
        rows = series.get(pool, [])
        gpn = gpus_per_node.get(pool, 1) or 1
        times = [p[0] for p in rows]
        charts.append(step_chart(f"{pool}: capacity vs demand", {
            "nodes up": ups.get(pool) or (times, [p[1] for p in rows]),
            "busy": (times, [p[2] for p in rows]),
            "demand (pending GPUs / GPUs per node)": (times, [p[3] / gpn for p in rows])},
            "nodes", window, whole=True))
    charts.append(bar_chart("queue wait by job size", [w.size for w in waits],
                            {"p50": [(w.p50_s or 0) / 60 for w in waits],
                             "p95": [(w.p95_s or 0) / 60 for w in waits]},
                            "wait (minutes)", "job size"))
    return charts


def to_html(r: Report, series: dict[str, list[tuple[float, float, float, float]]],
            gpus_per_node: dict[str, int], window: tuple[float, float],
            ups: Steps | None = None) -> str:
    """`series`: per pool, (time, nodes up, busy, pending GPUs) averaged per chart point
    (`Store.sample_series(since, until, MAX_POINTS)`); `ups`: per pool, its nodes up as
    steps from its instances' launches and ends (`compute.nodes_up_steps`; else the
    samples'); `window`: the report's (Unix s), the charts' x axis."""
    t = r.totals
    util = (t.gpu_hours_busy / t.gpu_hours_provisioned * 100) if t.gpu_hours_provisioned \
        else None
    kpis = [("GPU-hours provisioned", f"{t.gpu_hours_provisioned:,.1f}"),
            ("busy", f"{t.gpu_hours_busy:,.1f} ({_num(util, '{:.0f}')}%)"),
            ("estimated cost", "-" if t.est_cost_usd is None else f"${t.est_cost_usd:,.2f}"),
            ("gang time-to-start p95", _dur(r.gang_time_to_start.p95_s)),
            ("preemptions", str(r.preemptions)),
            ("anomalies", str(sum(r.anomalies.values())))]
    waits = [*r.waits, r.gang_time_to_start]
    charts = _charts(series, gpus_per_node, window, ups or {}, waits)
    parts = [
        f"<h1>slurmscale report: {html.escape(r.cluster)}</h1>",
        f"<p>{html.escape(r.since)} to {html.escape(r.until)}</p>",
        "".join(f'<div class="kpi">{html.escape(k)}<b>{html.escape(v)}</b></div>'
                for k, v in kpis),
        "<h2>Capacity and demand</h2>", *charts,
        "<h2>GPU-hours by pool</h2>",
        _table(["pool", "capacity", "instances", "node-hours", "provisioned", "busy", "idle",
                "cost (USD)"],
               [[p.pool, p.capacity_type, p.instances, f"{p.node_hours:,.2f}",
                 f"{p.gpu_hours_provisioned:,.2f}", f"{p.gpu_hours_busy:,.2f}",
                 f"{p.gpu_hours_idle:,.2f}", _num(p.est_cost_usd, "{:,.2f}")]
                for p in [*r.pools, r.totals]]),
        "<h2>Queue wait by job size</h2>",
        _table(["job size", "jobs started", "p50", "p95", "max"],
               [[w.size, w.jobs, _dur(w.p50_s), _dur(w.p95_s), _dur(w.max_s)] for w in waits]),
        "<h2>Launches, preemptions, capacity errors</h2>",
        _table(["launches", "failed launches", "preemptions", "requeues"],
               [[r.launches, r.launch_failures, r.preemptions, r.requeues]]),
        _table(["pool", "error code", "gangs"],
               [[e.pool, e.code, e.gangs] for e in r.capacity_errors]) if r.capacity_errors
        else "<p>No capacity errors.</p>",
        _table(["fallback", "count"], [[k, v] for k, v in r.fallbacks.items()]),
        "<h2>Nodes replaced (unhealthy; boot-*: did not join Slurm)</h2>",
        _table(["pool", "cause", "replaced", "left for an admin", "jobs requeued",
                "detection to fresh node (p50)", "GPU-hours lost"],
               [[x.pool, x.cause, x.replaced, x.left_for_admin, x.jobs_requeued,
                 _dur(x.p50_to_fresh_s), f"{x.lost_gpu_hours:,.2f}"] for x in r.replacements])
        if r.replacements else "<p>None.</p>",
        "<h2>Jobs signalled before a requeue (grace_signal)</h2>",
        _table(["pool", "warned by", "signalled", "left in their grace", "requeued",
                "in their grace", "signal to off the node (p50)"],
               [[g.pool, g.cause, g.signalled, g.left_in_grace, g.requeued, g.in_grace,
                 _dur(g.p50_grace_s)] for g in r.graces]) if r.graces else "<p>None.</p>",
        "<h2>Time to run, launch by launch</h2>", _time_to_run_html(r), _warm_html(r),
        "<h2>Reservations for starving gangs</h2>",
        _table(["reservation", "pool", "job", "nodes needed", "state", "idle GPU-hours"],
               [[h.name, h.pool, h.job_id, h.needed, h.state, f"{h.idle_gpu_hours:,.2f}"]
                for h in r.reservations]) if r.reservations else "<p>None.</p>",
        f"<p>Idle cost of holds: {r.reservation_idle_gpu_hours:,.2f} GPU-hours.</p>",
        "<h2>Paid capacity (capacity reservations, Capacity Blocks)</h2>",
        _table(["reservation", "kind", "pool", "window", "paid node-h", "used node-h",
                "idle node-h", "utilisation"],
               [[u.id, u.kind, u.pool, f"{u.start or '-'} .. {u.end or '-'}",
                 f"{u.paid_node_hours:,.1f}", f"{u.used_node_hours:,.1f}",
                 f"{u.idle_node_hours:,.1f}", _num(u.utilization, "{:.0%}")]
                for u in r.paid_capacity]) if r.paid_capacity else "<p>None.</p>",
        "<h2>Scale actions</h2>",
        _table(["action", "count"], [[k, v] for k, v in r.scale_actions.items()]),
        "<h2>Anomalies</h2>",
        _table(["kind", "count"], [[k, v] for k, v in r.anomalies.items()]),
        _table(["at", "kind", "message"], [[a.at, a.kind, a.message]
                                           for a in r.recent_anomalies])
        if r.recent_anomalies else "",
        (f'<p class="bad">No price configured for: {html.escape(", ".join(r.unpriced))}</p>'
         if r.unpriced else ""),
        f"<p><small>made {datetime.now().astimezone().isoformat(timespec='seconds')} by "
        "slurmscale report</small></p>",
    ]
    return ("<!doctype html><html><head><meta charset='utf-8'><title>slurmscale report "
            f"{html.escape(r.cluster)}</title><style>{CSS}</style></head><body>"
            + "\n".join(parts) + "</body></html>\n")
