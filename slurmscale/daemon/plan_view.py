"""A pass's plan as `slurmscale plan --json` prints it, wherever the plan was made.

The daemon makes this plan every pass; `plan` asks the running daemon for its last one (the
plan it carried out, no second read of a busy slurmctld, and at 50,000 jobs a reply in well
under a second where computing it afresh in a new process takes over two) and computes it
from live Slurm state itself only with `--live` or when no daemon answers. Both go through
`plan_data`, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slurmscale.store.rows import utc

if TYPE_CHECKING:  # the CLI imports this module for every command: keep it light
    from slurmscale.config import Config
    from slurmscale.daemon.passes.capacity import PassPlan
    from slurmscale.policy.reservations import HoldPlan
    from slurmscale.policy.standing import GangStanding
    from slurmscale.slurm.protocol import SlurmClient

# where the plan came from: the daemon's last pass, or computed by the command itself
SOURCE_DAEMON, SOURCE_LIVE = "daemon", "live"


def gang_json(s: GangStanding, hold: str | None) -> dict[str, object]:
    """A pending gang's standing in Slurm's queue as `plan` and `reservations show` print it;
    `hold`: what the reservation planner decided for it."""
    f = s.factors
    return {"job_id": s.job_id, "pool": s.pool, "partition": s.partition, "nodes": s.nodes,
            "waited_s": round(s.waited_s), "priority": s.priority, "ahead": s.ahead,
            "overtaken_by": s.overtaken_by,
            "factors": None if f is None else {
                "age": f.age, "fairshare": f.fairshare, "job_size": f.job_size,
                "partition": f.partition_factor, "qos": f.qos},
            "expected_start": s.expected_start_s, "age_lift": s.lift_s,
            "age_lift_note": s.lift_note, "hold": hold}


def holds_said(holds: HoldPlan) -> dict[str, str]:
    """What the reservation planner decided for each job it considered this pass (a skip's
    reason first, as it explains why no action was taken)."""
    said = {a.job_id: a.reason for a in reversed(holds.actions)}
    said.update({x.job_id: x.reason for x in reversed(holds.skipped)})
    return said


def with_standings(cfg: Config, slurm: SlurmClient, pp: PassPlan) -> PassPlan:
    """`pp` with every pending gang's standing, as of the pass. A daemon pass reads sprio
    only where a gang's backfill plan slipped; `plan` shows all of them, so they are
    completed here, from the pass's own queue read and a sprio read now."""
    from dataclasses import replace

    from slurmscale.daemon.passes.capacity import read_priorities
    from slurmscale.policy.standing import gang_standings

    # a pass that read sprio ranked every pending gang (pp.gangs holds running ones too)
    if pp.standings or not any(g.pending for g in pp.gangs):
        return pp
    standings = gang_standings(pp.gangs, {p.name: p.partition for p in cfg.pools},
                               list(pp.jobs), *read_priorities(slurm), pp.capacity.now)
    return replace(pp, standings=tuple(standings))


def plan_data(pp: PassPlan, source: str) -> dict[str, Any]:
    p = pp.capacity
    said = holds_said(pp.holds)
    return {
        "source": source,
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
        "gangs": [gang_json(s, said.get(s.job_id)) for s in pp.standings],
        "blocks": [{"pool": b.pool, "open": b.plan.is_open, "reason": b.plan.reason,
                    "closed_from": b.plan.closed_from, "closed_until": b.plan.closed_until,
                    "next_start": b.plan.next.start if b.plan.next else None,
                    "jobs": [{"job_id": j, "reason": why} for j, why in b.jobs]}
                   for b in pp.blocks],
        "limit_use": {pool: {"value": round(u.value, 4), "jobs": u.jobs, "source": u.source,
                             "said": u.describe()} for pool, u in pp.limit_use.items()},
        "routes": [{"at": r.at, "pool": r.pool, "job_id": r.job_id, "nodes": r.nodes,
                    "kind": r.kind.value, "reason": r.reason} for r in pp.routes],
        "in_grace": [{"job_id": g.job_id, "node": g.node, "pool": g.pool,
                      "signal": g.signal, "cause": g.cause,
                      "signalled_at": utc(g.signalled_at).timestamp(),
                      "requeue_at": utc(g.requeue_at).timestamp()} for g in pp.graces],
    }
