"""`slurmscale status`: the one screen an admin opens first. Read-only: Slurm's nodes and
queue, the store, and the daemon's health; fits 80 columns."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from slurmscale.audit import Kind
from slurmscale.cli_common import (
    EXIT_DAEMON_UNREACHABLE,
    EXIT_EC2_FAILING,
    EXIT_PASS_FAILED,
    EXIT_QUEUE_UNREADABLE,
    EXIT_SLURM_UNREADABLE,
    _load,
    _store,
    _table,
)
from slurmscale.config import Config, Pool
from slurmscale.hostlists import compress
from slurmscale.lifecycles import LIVE_HOLD_STATES
from slurmscale.policy.boots import BOOT_CAUSE_PREFIX
from slurmscale.store.rows import LaunchPhasesRow, utc

if TYPE_CHECKING:
    from slurmscale.daemon.passes.ledger import PoolNow
    from slurmscale.policy.model import PoolMemory

ERROR_KINDS = frozenset({
    Kind.LAUNCH_FAILED, Kind.LAUNCH_DEFERRED, Kind.LAUNCH_QUOTA_ERROR, Kind.LAUNCH_CONFIG_ERROR,
    Kind.TERMINATE_FAILED, Kind.SLURM_UPDATE_FAILED, Kind.SLURM_READ_FAILED, Kind.CLOUD_ERROR,
    Kind.LEAK_TERMINATED, Kind.NODE_WITHOUT_INSTANCE, Kind.RESUME_FAILED, Kind.UNTRACKED_INSTANCE,
    Kind.REQUEUE_FAILED, Kind.STEER_FAILED, Kind.RESERVATION_FAILED, Kind.SPOOL_REJECTED,
    Kind.TAG_FAILED, Kind.BOOT_FAILED, Kind.SIGNAL_FAILED, Kind.TOPOLOGY_FAILED,
    Kind.NODE_STUCK,
})


def _daemon(cfg: Config) -> dict[str, Any]:
    """The daemon as its socket answers (unreachable: no answer), and how long the
    cluster's leader has been silent in the store."""
    from slurmscale.api_client import ApiError, call
    from slurmscale.daemon.leadership import holder_silence

    try:
        code, health = call(cfg.socket_path, "GET", "/v1/health", timeout=2)
        daemon = {"reachable": code == 200, "role": (health or {}).get("role"),
                  "last_tick": (health or {}).get("last_tick")}
    except ApiError:
        daemon = {"reachable": False, "role": None, "last_tick": None}
    daemon["leader_silent_s"] = holder_silence(cfg.database_url(), cfg.cluster_name)
    daemon["leader_stale_s"] = cfg.daemon.leader_stale_s
    return daemon


def _pool_row(p: Pool, now: PoolNow | None, mem: PoolMemory | None,
              instances: int) -> dict[str, Any]:
    """A pool's line: its settings, its instances, and Slurm's nodes and queue for it (none
    where Slurm could not be read)."""
    return {
        "name": p.name, "capacity_type": p.capacity_type.value, "mode": str(p.policy.mode),
        "target": mem.target if mem and str(p.policy.mode) == "governed" else None,
        "max_nodes": p.max_nodes, "instances": instances,
        **({k: getattr(now, k) for k in ("nodes_up", "nodes_busy", "nodes_booting",
                                        "nodes_held", "nodes_idle", "pending_gpus",
                                        "pending_gpu_hours", "pending_gangs")} if now else {}),
    }


def gather(cfg: Config) -> dict[str, Any]:
    from slurmscale.daemon.passes.ledger import pools_now
    from slurmscale.daemon.passes.lost_nodes import SLURMS_DOWN
    from slurmscale.daemon.queue.queue_view import build_snapshot
    from slurmscale.hostlists import expand
    from slurmscale.report.compute import paid_now
    from slurmscale.slurm.cli_backend import SlurmCLI
    from slurmscale.slurm.protocol import SlurmError
    from slurmscale.slurm.reasons import REPLACING, ours

    RESUME_TIMEOUT = SLURMS_DOWN[0]

    now = datetime.now(UTC)
    store = _store(cfg)
    daemon = _daemon(cfg)
    memory = store.pool_memory()
    slurm_error = None
    replacing: list[dict[str, str]] = []
    timed_out: list[str] = []
    try:
        s = SlurmCLI(cfg.slurm)
        nodes = s.nodes()
        snap = build_snapshot(cfg, nodes, s.active_jobs(), now.timestamp(), memory)
        current = {p.pool: p for p in pools_now(snap)}
        # nodes being replaced (unhealthy, a scheduled event) or left for an admin
        replacing = [{"node": n.name, "state": n.state, "reason": n.reason}
                     for n in nodes if n.reason and ours(n.reason) in REPLACING]
        timed_out = [n.name for n in nodes if n.reason.startswith(RESUME_TIMEOUT)]
    except SlurmError as e:
        current, slurm_error = {}, str(e)
    instances = store.active_instances()
    pools = [_pool_row(p, current.get(p.name), memory.get(p.name),
                       sum(1 for i in instances if i.pool == p.name)) for p in cfg.pools]
    holds = [{"name": h.name, "pool": h.pool, "job_id": h.job_id, "state": h.state,
              "nodes_held": len(json.loads(h.nodes or "[]")), "nodes_needed": h.needed,
              "idle_gpu_hours": round(h.spent_gpu_s / 3600, 2)}
             for h in store.holds(LIVE_HOLD_STATES)]
    backoff = [{"pool": o.pool, "offering": o.offering or "(all)",
                "until": datetime.fromtimestamp(o.until_s, UTC).isoformat(
                timespec="seconds"), "code": o.last_code, "repeats": o.repeats}
               for o in store.offerings() if o.until_s > now.timestamp()]
    errors = [{"at": e.at.isoformat(timespec="seconds"), "kind": e.kind, "message": e.message}
              for e in store.events(since=now - timedelta(hours=1), limit=8, kinds=ERROR_KINDS)]
    pending = [{"id": r.id, "kind": r.kind, "hostlist": r.hostlist,
                "received_at": r.received_at.isoformat(timespec="seconds")}
               for r in store.pending_requests()]
    paid = [{**u.model_dump(), "period": period} for u, period in paid_now(store, now)]
    # jobs signalled before an interruption's requeue (a pool's grace_signal)
    in_grace = [{"job_id": g.job_id, "node": g.node, "signal": g.signal,
                 "signalled_at": utc(g.signalled_at).isoformat(timespec="seconds"),
                 "requeue_at": utc(g.requeue_at).isoformat(timespec="seconds")}
                for g in store.graces()]
    flight = launches_in_flight(store.launch_phases(since_s=now.timestamp() - 3600,
                                                    open_only=True),
                                {i.instance_id for i in instances}, now.timestamp())
    # stopped instances kept for the next resumes (pools with a warm_pool)
    kept = store.warm_instances()
    warm = [{"pool": p.name, "stopped": sum(1 for r in kept if r.pool == p.name),
             "size": p.warm_pool.size} for p in cfg.pools if p.warm_pool is not None]
    day = store.replacements(since=now.timestamp() - 86400)
    quarantined = [{"table": t, "key": k, "error": why}
                   for (t, k), why in sorted(store.quarantined.items())]
    # nodes Slurm gave up booting (ResumeTimeout), now or returned to service in the hour
    stuck = store.events(since=now - timedelta(hours=1), limit=1000, kinds=[Kind.NODE_STUCK])
    timed_out += [n for e in stuck if RESUME_TIMEOUT in e.message
                  for n in expand(e.node or "")]
    store_replacements = [r for r in day if not r.left
                          and not r.cause.startswith(BOOT_CAUSE_PREFIX)]
    boots = Counter((r.pool, r.cause[len(BOOT_CAUSE_PREFIX):]) for r in day
                    if r.cause.startswith(BOOT_CAUSE_PREFIX))
    store.close()
    return {"cluster": cfg.cluster_name, "at": now.isoformat(timespec="seconds"),
            "daemon": daemon, "pools": pools, "reservations": holds, "backoff": backoff,
            "pending_requests": pending, "recent_errors": errors, "slurm_error": slurm_error,
            "paid_capacity": paid, "replacing": replacing, "in_grace": in_grace,
            "replaced_24h": len(store_replacements),
            "boot_failures_24h": [{"pool": p, "cause": c, "count": n}
                                  for (p, c), n in sorted(boots.items())],
            "quarantined_rows": quarantined, "launches_in_flight": flight, "warm_pools": warm,
            "resume_timeouts_1h": sorted(set(timed_out))}



def exit_code(d: dict[str, Any]) -> int:
    """What `status` exits with, the worst first: the daemon unreachable, its last pass
    failed, EC2 failing in it, the events queue unreadable, Slurm unreadable; 0 all well."""
    dm = d["daemon"]
    tick = dm.get("last_tick") or {}
    if not dm["reachable"]:
        return EXIT_DAEMON_UNREACHABLE
    if tick.get("ok") is False:
        return EXIT_EC2_FAILING if tick.get("ec2_failed_calls") else EXIT_PASS_FAILED
    if tick.get("queue_error"):
        return EXIT_QUEUE_UNREADABLE
    if d["slurm_error"]:
        return EXIT_SLURM_UNREADABLE
    return 0


def _headline(d: dict[str, Any]) -> list[str]:
    """The daemon's line, and first what needs an admin now: failing passes, the events
    queue unreadable, a silent leader, nodes Slurm gave up booting."""
    dm = d["daemon"]
    up = f"up, {dm['role']}" if dm["reachable"] else "NOT REACHABLE"
    tick = dm.get("last_tick") or {}
    last = str(tick.get("at", "-"))[11:19] or "-"
    if tick.get("ok") is False:  # the truth first: every pass failing is the news
        ok_at = str(tick.get("last_ok_at") or "")[11:19] or "never"
        n = tick.get("failed_in_a_row", 1)
        if tick.get("ec2_failed_calls"):  # the passes run on, EC2 does not answer them
            out = [f"cluster {d['cluster']}  daemon {up}  last pass {last} EC2 FAILING",
                   f"  {n} pass(es) in a row with EC2 calls failing "
                   f"({tick['ec2_failed_calls']} in the last); last good pass {ok_at}"]
        else:
            out = [f"cluster {d['cluster']}  daemon {up}  last pass {last} FAILED",
                   f"  {n} pass(es) failed in a row; last good pass {ok_at}"]
        out += [f"  {tick.get('error', 'see the daemon log')}"[:100], ""]
    else:
        out = [f"cluster {d['cluster']}  daemon {up}  last pass {last}", ""]
    if tick.get("queue_error"):  # spot handling is off while it lasts: said first
        out[1:1] = [f"  EVENTS QUEUE UNREADABLE: {tick['queue_error']}"[:100],
                    "  spot warnings, block events and scheduled changes are not handled; "
                    "`slurmscale check` names the fix"]
    silent = dm.get("leader_silent_s")
    if silent is not None and dm.get("leader_stale_s") and silent > dm["leader_stale_s"]:
        out[1:1] = [f"  LEADER SILENT {silent:.0f} s: its lease session has said nothing for "
                    f"longer than daemon.leader_stale_s ({dm['leader_stale_s']:g} s): frozen or "
                    "stuck; a standby cuts it off and leads"]
    if d.get("resume_timeouts_1h"):  # Slurm gives up on boots: said before the pools
        out[1:1] = [f"  NODES RAN INTO RESUMETIMEOUT (1h): "
                    f"{compress(d['resume_timeouts_1h'])}"[:100],
                    "  slurmctld could not run the resume hook (`slurmscale check`), or boots "
                    "outlast ResumeTimeout"]
    return out


def launches_in_flight(rows: list[LaunchPhasesRow], running: set[str],
                       now: float) -> list[dict[str, str]]:
    """Launches of the last hour whose node has not registered, grouped by where they are
    ("spot-[1-4]: booting 2m10s, bootstrap not yet seen")."""
    from slurmscale.hostlists import compress
    from slurmscale.report.time_to_run import in_flight

    where: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if r.instance_id in running and r.registered_s is None:
            where.setdefault((r.pool, in_flight(r, now)), []).append(r.node)
    return [{"pool": pool, "nodes": compress(nodes), "where": text}
            for (pool, text), nodes in sorted(where.items())]


def render(d: dict[str, Any]) -> str:
    out = _headline(d)
    short = {"on-demand": "od", "capacity-block": "blk"}
    rows = [{"pool": p["name"][:12], "type": short.get(p["capacity_type"], p["capacity_type"][:4]),
             "tgt": p["target"] if p["target"] is not None else "-",
             "up": p.get("nodes_up", "?"), "busy": p.get("nodes_busy", "?"),
             "boot": p.get("nodes_booting", "?"), "held": p.get("nodes_held", "?"),
             "idle": p.get("nodes_idle", "?"), "max": p["max_nodes"],
             "q_gpus": p.get("pending_gpus", "?"), "gangs": p.get("pending_gangs", "?")}
            for p in d["pools"]]
    out.append(_table(rows, list(rows[0]) if rows else ["pool"]))
    if d["reservations"]:
        out += ["", "reservations (holds for starving gangs):",
                _table([{"name": h["name"][:24], "job": h["job_id"], "state": h["state"],
                         "held": f"{h['nodes_held']}/{h['nodes_needed']}",
                         "idle_gpu_h": h["idle_gpu_hours"]} for h in d["reservations"]],
                       ["name", "job", "state", "held", "idle_gpu_h"])]
    if d.get("paid_capacity"):
        out += ["", "paid capacity, node-hours (blocks since their start, reservations 24h):",
                _table([{"id": p["id"][-10:], "pool": p["pool"][:10],
                         "kind": {"capacity-block": "block", "interruptible": "intr"}.get(
                             p["kind"], "odcr"),
                         "state": p["state"][:9], "free": f"{p['available']}/{p['total']}",
                         "window": _window(p), "paid": p["paid_node_hours"],
                         "used": p["used_node_hours"],
                         "use": "-" if p["utilization"] is None
                         else f"{p['utilization']:.0%}"} for p in d["paid_capacity"]],
                       ["id", "pool", "kind", "state", "free", "window", "paid", "used",
                        "use"])]
    if d.get("in_grace"):
        out += ["", "jobs signalled before their requeue (EC2 takes their node back):",
                *(f"  job {g['job_id']} on {g['node']}: SIG{g['signal']} at "
                  f"{g['signalled_at'][11:19]}, requeued at {g['requeue_at'][11:19]} UTC "
                  "unless it leaves first"[:80] for g in d["in_grace"])]
    if d.get("replacing") or d.get("replaced_24h"):
        out += ["", f"unhealthy nodes (replaced in 24h: {d.get('replaced_24h', 0)}):",
                *(f"  {r['node']} {r['state']}: {r['reason']}"[:80]
                  for r in d.get("replacing", []))]
    if d.get("quarantined_rows"):
        out += ["", "store rows that cannot be read (skipped; repair or delete them):",
                *(f"  {q['table']} {q['key']}: {q['error']}"[:80]
                  for q in d["quarantined_rows"])]
    if d.get("boot_failures_24h"):
        out += ["", "boot failures (24h): " + ", ".join(
            f"{b['pool']} {b['cause']} {b['count']}" for b in d["boot_failures_24h"])]
    if d.get("launches_in_flight"):
        out += ["", "launches in flight:",
                *(f"  {f['nodes']} ({f['pool']}): {f['where']}"[:80]
                  for f in d["launches_in_flight"])]
    if d.get("warm_pools"):
        out += ["", "warm pools (stopped instances kept for the next resumes): " + ", ".join(
            f"{w['pool']} {w['stopped']}/{w['size']}" for w in d["warm_pools"])]
    if d["backoff"]:
        out += ["", "capacity backoff (a pool, or one of its offerings: type/AZ/capacity):",
                *(f"  {b['pool']} {b.get('offering', '(all)')} until {b['until'][11:19]} UTC "
                  f"({b['code']}, x{b['repeats']})" for b in d["backoff"])]
    if d["pending_requests"]:
        out += ["", f"pending requests: {len(d['pending_requests'])}",
                *(f"  {r['received_at'][11:19]} {r['kind']:<11} {r['hostlist']}"[:80]
                  for r in d["pending_requests"][:5])]
    out += ["", "recent errors (1h):" if d["recent_errors"] else "recent errors (1h): none",
            *(f"  {e['at'][11:19]} {e['kind']}: {e['message']}"[:80]
              for e in d["recent_errors"])]
    if d["slurm_error"]:
        out += ["", f"Slurm not readable: {d['slurm_error']}"[:80]]
    return "\n".join(out)


def _window(p: dict[str, Any], now: float | None = None) -> str:
    """A block's window (UTC) and the time to its start or end: `12-01 14:00-18:00 2h10m
    left`."""
    if p["kind"] != "capacity-block" or not p["start"] or not p["end"]:
        return "-"
    t = time.time() if now is None else now
    start, end = (datetime.fromisoformat(p[k]).timestamp() for k in ("start", "end"))
    when = (f"opens in {_span(start - t)}" if t < start else
            f"{_span(end - t)} left" if t < end else "over")
    return f"{p['start'][5:10]} {p['start'][11:16]}-{p['end'][11:16]} {when}"


def _span(s: float) -> str:
    m = int(s // 60)
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m"


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--watch", type=float, default=None, is_flag=False, flag_value=5.0,
              help="Redraw every N seconds (default 5) until Ctrl-C.")
@click.pass_context
def status(ctx: click.Context, as_json: bool, watch: float | None) -> None:
    """Pools (target, nodes up/busy/booting/held/idle, pending GPUs and gangs), reservations
    held for starving gangs, unhealthy nodes being replaced, pools in capacity backoff,
    pending hook requests, the last hour's errors, and the daemon's health and role.

    JSON: {"cluster", "at", "daemon": {reachable, role, last_tick: {ok, at, seconds, error,
    failed_in_a_row, last_ok_at, ec2_failed_calls (a pass whose EC2 calls failed: ok false),
    phase_seconds (each phase of the pass), wait_seconds (on Slurm, EC2, the store, ...)}},
    "pools": [{name,
    capacity_type, mode, target, max_nodes, instances, nodes_up, nodes_busy, nodes_booting,
    nodes_held, nodes_idle, pending_gpus, pending_gpu_hours, pending_gangs}],
    "reservations": [...], "backoff": [{pool, offering
    (type/AZ/capacity, or "(all)": the whole pool), until, code, repeats}], "pending_requests":
    [...], "recent_errors": [{at, kind, message}], "slurm_error", "paid_capacity": [{id,
    pool, kind, instance_type, state, total, available, start, end, paid_node_hours,
    used_node_hours, idle_node_hours, utilization, period}], "replacing": [{node, state,
    reason}] (nodes being replaced or left for an admin), "replaced_24h", "boot_failures_24h":
    [{pool, cause, count}] (launched nodes that did not join Slurm: docs/node-image.md),
    "quarantined_rows": [{table, key, error}] (store rows skipped: they cannot be decoded),
    "warm_pools": [{pool, stopped, size}] (a pool's warm pool: stopped instances kept)}"""
    cfg = _load(ctx.find_root())
    while True:
        d = gather(cfg)
        # (default=str: a store value that is not text, bytes in a text column, still prints)
        text = json.dumps(d, indent=2, default=str) if as_json else render(d)
        if watch is None:
            click.echo(text)
            if d["slurm_error"] and not as_json:
                click.echo("warning: Slurm not readable", err=True)
            code = exit_code(d)
            if code:
                sys.exit(code)
            return
        click.clear()
        click.echo(text)
        try:
            time.sleep(watch)
        except KeyboardInterrupt:
            return
