"""Simulation results as the stable JSON `slurmscale simulate --json` prints, and a plot."""

from __future__ import annotations

from typing import Any

from slurmscale.sim.engine import SimCloud, SimResult


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    i = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return round(s[i], 1)


def metrics(r: SimResult, cloud: SimCloud) -> dict[str, Any]:
    busy_h = r.busy_gpu_s / 3600
    on_h = r.on_gpu_s / 3600
    spot_h = r.spot_node_s / 3600
    paid_up_h = r.paid_node_s / 3600
    # used: the work done on paid capacity, in node-hours (its GPU-hours / GPUs per node);
    # an instance kept idle in a reservation is up, not used
    paid_used_h = r.paid_busy_gpu_s / 3600 / max(1, r.gpus_per_node)
    paid_h = r.paid_available_node_s / 3600
    od_h = r.node_on_s / 3600 - spot_h - paid_up_h
    spot_price = cloud.spot_price_per_node_hour
    # paid capacity costs what was paid for, used or not, at the on-demand price
    cost = (od_h + paid_h) * cloud.price_per_node_hour + spot_h * (
        cloud.price_per_node_hour if spot_price is None else spot_price)
    warm = cloud.warm
    if warm is not None:  # a warm pool's stopped instances: their volumes
        cost += r.stopped_node_s / 3600 * warm.stopped_price_per_node_hour
    if r.offline_node_s is not None:  # the oracle: up as a clairvoyant release rule keeps it
        on_h = r.offline_node_s * r.gpus_per_node / 3600
        cost = r.offline_node_s / 3600 * cloud.price_per_node_hour
    return {
        "jobs": r.jobs,
        "jobs_completed": r.jobs_completed,
        "wait_p50_s": _pct(r.waits, 0.5),
        "wait_p95_s": _pct(r.waits, 0.95),
        "gang_wait_p50_s": _pct(r.gang_waits, 0.5),
        "gang_wait_p95_s": _pct(r.gang_waits, 0.95),
        "busy_gpu_hours": round(busy_h, 1),
        "idle_gpu_hours": round(max(0.0, on_h - busy_h), 1),
        "cost_usd": round(cost, 2),
        "spot_node_hours": round(spot_h, 1),
        "on_demand_node_hours": round(od_h, 1),
        "scale_up_actions": r.scale_up_actions,
        "scale_down_actions": r.scale_down_actions,
        "node_launches": r.node_launches,
        "reservations_created": r.reservations_created,
        "reservation_idle_gpu_hours": round(r.reservation_idle_gpu_s / 3600, 1),
        "preemptions": r.preemptions,
        "reclaims": r.reclaims,
        "requeues": r.requeues,
        "jobs_failed": r.jobs_failed,
        "lost_gpu_hours": round(r.lost_gpu_s / 3600, 1),
        "saved_gpu_hours": round(r.saved_gpu_s / 3600, 1),
        "restart_wait_p50_s": _pct(r.restart_waits, 0.5),
        "restart_wait_p95_s": _pct(r.restart_waits, 0.95),
        "reserved_node_hours_paid": round(paid_h, 1),
        "reserved_node_hours_used": round(paid_used_h, 1),
        "reservation_utilization": round(paid_used_h / paid_h, 3) if paid_h else None,
        "jobs_killed_at_block_end": r.jobs_killed_at_block_end,
        "gang_start_order": [j for _, j in sorted(r.gang_starts)],
        "gang_starts_one_launch": (round(sum(1 for x in r.gang_spread if x == 1)
                                         / len(r.gang_spread), 3) if r.gang_spread else None),
        "gang_launches_max": max(r.gang_spread, default=None),
        "node_failures": r.node_failures,
        "capacity_lost_gpu_hours": round(r.capacity_lost_gpu_s / 3600, 1),
        "limit_use": None if r.limit_use is None else round(r.limit_use, 3),
        "limit_use_jobs": r.limit_use_jobs,
        "limit_use_learned_at_s": r.limit_use_learned_s,
        **({} if warm is None else {
            "warm_starts": r.warm_starts, "warm_refused": r.warm_refused,
            "stopped_node_hours": round(r.stopped_node_s / 3600, 1)}),
    }


def against_oracle(figures: dict[str, dict[str, Any]]) -> None:
    """Each policy's idle GPU-hours and cost as a ratio to the oracle's (`idle_vs_oracle`,
    `cost_vs_oracle`), when the oracle ran beside them. Left out where the oracle's offline
    figures do not apply (spot or paid capacity: they are priced on demand)."""
    o = figures.get("oracle")
    if o is None:
        return
    for f in figures.values():
        f["idle_vs_oracle"] = (round(f["idle_gpu_hours"] / o["idle_gpu_hours"], 2)
                               if o["idle_gpu_hours"] else None)
        f["cost_vs_oracle"] = (round(f["cost_usd"] / o["cost_usd"], 3)
                               if o["cost_usd"] else None)


def plot(results: list[SimResult], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(11, 2.2 * len(results)), sharex=True,
                             squeeze=False)
    for ax, r in zip(axes[:, 0], results, strict=True):
        t = [x[0] / 86400 for x in r.timeline]
        ax.fill_between(t, [x[1] for x in r.timeline], step="post", alpha=0.35,
                        label="GPUs demanded (running + pending)")
        ax.step(t, [x[2] for x in r.timeline], where="post", color="black", lw=0.9,
                label="GPUs provisioned")
        ax.set_ylabel("GPUs")
        ax.set_title(r.policy, loc="left", fontsize=10)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("days")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
