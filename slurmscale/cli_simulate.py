"""`slurmscale simulate`: replay a job trace against a simulated Slurm and cloud running the
policy code. Exit 2 with one line naming the bad value on bad input."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from slurmscale.cli_common import _load, _table

if TYPE_CHECKING:
    from slurmscale.policy.model import PoolKnobs
    from slurmscale.policy.reservations import ReservationKnobs
    from slurmscale.sim.engine import PaidCapacity, SimCloud, SpotModel
    from slurmscale.sim.replicas import Settings
    from slurmscale.sim.slurm_model import SlurmModel
    from slurmscale.sim.trace import TraceJob


@click.command()
@click.option("--trace", "trace_path", required=True, type=click.Path(dir_okay=False),
              help="CSV: job_id,submit_s,duration_s,gpus,nodes; optional time_limit_s, user, "
                   "priority (other columns ignored).")
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
@click.option("--warm-pool", default=0, show_default=True, type=click.IntRange(0),
              help="Stopped instances kept for the on-demand pool: a release stops its "
              "instance while fewer are; a launch starts them first, whole.")
@click.option("--warm-boot-time", default=60.0, show_default=True, type=click.FloatRange(0),
              help="Seconds from starting a stopped instance to a usable node.")
@click.option("--stopped-price", default=0.055, show_default=True, type=click.FloatRange(0),
              help="USD per stopped node-hour (its volumes: 500 GiB of gp3 at $0.08 per "
              "GB-month).")
@click.option("--warm-start-failure", default=0.0, show_default=True,
              type=click.FloatRange(0, 1),
              help="Chance EC2 refuses to start a stopped instance (no capacity kept for it).")
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
@click.option("--hold-end-margin", default=None, type=click.FloatRange(0),
              help="How much longer than --max-hold a hold's Slurm reservation lasts (s).")
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
@click.option("--grace-signal", "grace_margin", type=click.FloatRange(0, 120, max_open=True),
              default=None, metavar="MARGIN_S",
              help="Spot model: the daemon's grace_signal on the spot pool (its jobs are "
                   "signalled on the warning and requeued at EC2's two-minute deadline less "
                   "MARGIN_S; EC2 then takes the instance at its deadline).")
@click.option("--checkpoint-every", "checkpoint_s", type=click.FloatRange(min=0, min_open=True),
              default=None, metavar="S",
              help="Every job saves its work every S seconds of its run: a run cut short "
                   "resumes from its last save (lost_gpu_hours, saved_gpu_hours).")
@click.option("--save-on-signal", is_flag=True,
              help="Every job saves its work when Slurm signals it (with --grace-signal).")
@click.option("--reserved-nodes", default=0, show_default=True, type=click.IntRange(0),
              help="Paid capacity: an On-Demand Capacity Reservation of N nodes, paid for "
                   "the whole run.")
@click.option("--reclaim-rate", default=0.0, show_default=True, type=click.FloatRange(min=0),
              help="The reservation is interruptible: its owner reclaims a reserved node at "
                   "this rate per reserved node-hour (its jobs requeue; counted: reclaims).")
@click.option("--reserved-preference", default="use_first", show_default=True,
              type=click.Choice(["use_first", "none"]),
              help="Paid capacity: launch gangs that fit whole into the reservation first, "
                   "or never (it is paid all the same).")
@click.option("--capacity-block", "capacity_blocks", multiple=True,
              metavar="START_S:END_S:NODES",
              help="Paid capacity: a Capacity Block of NODES nodes from START_S to END_S "
                   "(trace seconds); repeatable. EC2 terminates its instances from 30 "
                   "minutes before END_S, as AWS documents. slurmscale's policies run it as "
                   "the daemon's capacity-block pool, beside --max-nodes; the others within "
                   "it.")
@click.option("--block-end-margin", "block_margin", type=click.FloatRange(min=0),
              default=None, metavar="S",
              help="The daemon's capacity_blocks.end_margin_s: no job may run past a block's "
                   "end less S (default: its default, 30 min + SuspendTimeout + 300 s, at least "
                   "40 min); "
                   "below 30 minutes, EC2's terminations kill jobs (jobs_killed_at_block_end).")
@click.option("--slurm-model", default="slurm", show_default=True,
              type=click.Choice(["slurm", "greedy"]),
              help="slurm: Slurm's main scheduler, backfill by time limits, multifactor "
                   "priority; greedy: submit order, any job that fits starts (the model "
                   "before it, to compare).")
@click.option("--time-limit-factor", default=3.0, show_default=True,
              type=click.FloatRange(1, 1000),
              help="slurm model: a job without time_limit_s in the trace gets F x its run time.")
@click.option("--no-time-limits", is_flag=True,
              help="slurm model: jobs without time_limit_s have none (INFINITE).")
@click.option("--slurm-param", "slurm_params", multiple=True, metavar="NAME=VALUE",
              help="slurm model: bf_interval, bf_window, bf_max_job_test, PriorityWeightAge, "
                   "PriorityWeightJobSize, PriorityWeightFairshare, PriorityMaxAge, "
                   "PriorityDecayHalfLife, PriorityCalcPeriod, power_up_check, "
                   "power_up_check_phase, sched_tick, batch_sched_delay (times in seconds), "
                   "PriorityFavorSmall=YES|NO; repeatable.")
@click.option("--node-failure-rate", default=None, type=click.FloatRange(0),
              metavar="PER_NODE_HOUR",
              help="Hardware failures per node-hour up: a failed node's jobs are requeued; "
                   "slurmscale replaces the node, the other policies leave it down until an "
                   "admin returns it after --admin-repair-s.")
@click.option("--admin-repair-s", default=4 * 3600.0, show_default=True,
              type=click.FloatRange(0), help="How long a failed node stays down without "
                                             "slurmscale (an admin's turnaround).")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Random seed for the spot interruptions, reservation reclaims and node "
                   "failures.")
@click.option("--replicas", default=1, show_default=True, type=click.IntRange(1, 100),
              help="Run K copies of the trace, submit times jittered (--jitter), and report "
              "each figure's median and range (in parallel processes).")
@click.option("--jitter", default=60.0, show_default=True, type=click.FloatRange(0),
              help="With --replicas: each job's submit time moved later by up to S seconds "
              "(seeded by --seed).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--plot", "plot_path", default=None, type=click.Path(dir_okay=False),
              help="Write a PNG of demand vs provisioned GPUs per policy.")
@click.pass_context
def simulate(ctx: click.Context, trace_path: str, carry_in: str | None, policies: tuple[str, ...],
             max_nodes: int, gpus_per_node: int, boot_time: float, price: float, warm_pool: int,
             warm_boot_time: float, stopped_price: float, warm_start_failure: float,
             cooldown: float | None, knob_args: tuple[str, ...], pool_name: str | None,
             accumulate: bool, hold_budget: float | None, accumulate_after: float | None,
             max_hold: float | None, hold_end_margin: float | None,
             interruption_rate: float | None, storm_at: float | None, storm_fraction: float | None,
             storm_outage: float, on_demand_buffer: float | None, warm_on_demand_nodes: int | None,
             on_demand_nodes: int | None, spot_price: float | None, on_demand_price: float | None,
             max_preemptions: int, requeue_delay: float, grace_margin: float | None,
             checkpoint_s: float | None, save_on_signal: bool, reserved_nodes: int,
             reclaim_rate: float, reserved_preference: str, capacity_blocks: tuple[str, ...],
             block_margin: float | None, slurm_model: str, time_limit_factor: float,
             no_time_limits: bool, slurm_params: tuple[str, ...], node_failure_rate: float | None,
             admin_repair_s: float, seed: int, replicas: int, jitter: float, as_json: bool,
             plot_path: str | None) -> None:
    """Replay a job trace against a simulated Slurm + cloud, running the real policy code.

    Waits are the total time a job pended, over all its runs when it was requeued.

    JSON: {"trace": str, "slurm_model": str, "policies": {NAME: {jobs, jobs_completed,
    wait_p50_s, wait_p95_s, gang_wait_p50_s, gang_wait_p95_s, busy_gpu_hours, idle_gpu_hours,
    cost_usd, spot_node_hours, on_demand_node_hours, scale_up_actions, scale_down_actions,
    node_launches, reservations_created, reservation_idle_gpu_hours, preemptions, requeues,
    jobs_failed, lost_gpu_hours, saved_gpu_hours, restart_wait_p50_s, restart_wait_p95_s,
    reserved_node_hours_paid, reserved_node_hours_used, reservation_utilization,
    jobs_killed_at_block_end, gang_start_order, node_failures, capacity_lost_gpu_hours,
    limit_use, limit_use_jobs, limit_use_learned_at_s[, warm_starts, warm_refused,
    stopped_node_hours]}}};
    with the oracle among the policies (the default) and neither spot nor paid capacity, each
    policy also has idle_vs_oracle and cost_vs_oracle (docs/simulator.md, "The clairvoyant
    bound"). With --replicas K above 1: {"trace", "slurm_model", "replicas": K, "jitter_s": S,
    "policies": {NAME: {FIGURE: {median, min, max}}}, "each": [{NAME: {FIGURE: value}}]}
    (the numeric figures; `each`: replica by replica, in seed order, for ratios taken per
    replica between two runs with the same --seed).
    """
    from slurmscale.sim.engine import FailureModel, SimResult
    from slurmscale.sim.policies import POLICY_NAMES
    from slurmscale.sim.replicas import Settings, run_all
    from slurmscale.sim.report import plot

    names = policies or POLICY_NAMES
    _check_choices(names, POLICY_NAMES, plot_path, replicas)
    jobs = _jobs(trace_path, carry_in)
    if checkpoint_s is not None or save_on_signal:  # (how the trace's jobs save their work)
        jobs = [replace(j, checkpoint_s=checkpoint_s, saves_on_signal=save_on_signal)
                for j in jobs]
    # the settings, each built once from its options and handed to every policy's run
    base = _pool_knobs(ctx, pool_name, knob_args, cooldown, gpus_per_node, max_nodes)
    holds = _hold_knobs(accumulate, hold_budget, accumulate_after, max_hold, hold_end_margin)
    cloud, spot = _cloud_and_spot(
        max_nodes, boot_time, price, on_demand_price, spot_price, interruption_rate,
        storm_at, storm_fraction, storm_outage, on_demand_buffer, warm_on_demand_nodes,
        on_demand_nodes, requeue_delay, max_preemptions, seed, grace_margin)
    cloud = _warm(cloud, warm_pool, warm_boot_time, stopped_price, warm_start_failure, seed)
    paid = _paid_capacity(reserved_nodes, reserved_preference, capacity_blocks, max_nodes,
                          block_margin, reclaim_rate, seed)
    model = _slurm_model(slurm_model, no_time_limits, time_limit_factor, slurm_params)
    failures = (FailureModel(node_failure_rate, admin_repair_s, seed)
                if node_failure_rate is not None else None)
    settings = Settings(tuple(names), base, holds, cloud, spot, paid, model, failures)
    out: dict[str, Any] = {"trace": trace_path, "slurm_model": slurm_model}
    shown = Progress(jobs, enabled=not as_json and sys.stderr.isatty())
    if replicas > 1:
        _print_replicas(_replicas(out, jobs, settings, replicas, jitter, seed, shown), as_json)
        return
    results: list[SimResult] = []
    out["policies"] = run_all(jobs, settings, results, shown.policy if shown.enabled else None)
    shown.end()
    if plot_path:
        plot(results, plot_path, f"{Path(trace_path).name}, max {max_nodes} nodes")
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    cols = _columns("idle_vs_oracle" in out["policies"].get("oracle", {}), spot is not None,
                    checkpoint_s is not None or save_on_signal, failures is not None,
                    paid is not None)
    click.echo(_table([{"policy": k, **v} for k, v in out["policies"].items()], cols))


def _replicas(out: dict[str, Any], jobs: list[TraceJob], settings: Settings, replicas: int,
              jitter: float, seed: int, shown: Progress) -> dict[str, Any]:
    """`out` with every policy run on `replicas` jittered copies of the trace: medians and
    ranges, and each replica's figures."""
    from slurmscale.sim.replicas import numeric, run_replicas, summarise

    each = run_replicas(jobs, settings, replicas, jitter, seed,
                        shown.replicas(replicas) if shown.enabled else None)
    shown.end()
    out.update(replicas=replicas, jitter_s=jitter, policies=summarise(each),
               each=[numeric(r) for r in each])
    return out


def _check_choices(names: tuple[str, ...], known: tuple[str, ...], plot_path: str | None,
                   replicas: int) -> None:
    """The policies and the plot asked for, refused before the run (not after it)."""
    if plot_path and not Path(plot_path).resolve().parent.is_dir():
        raise click.BadParameter(f"{plot_path!r}: directory {Path(plot_path).parent} does "
                                 "not exist", param_hint="--plot")
    if plot_path and replicas > 1:
        raise click.BadParameter("plots one run: not with --replicas above 1",
                                 param_hint="--plot")
    if plot_path:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise click.BadParameter("needs matplotlib: pip install 'slurmscale[plot]'",
                                     param_hint="--plot")
    for n in names:
        if n not in known:
            raise click.BadParameter(f"{n!r} is not one of {', '.join(known)}",
                                     param_hint="--policy")


def _columns(oracle: bool, spot: bool, saves: bool, failures: bool, paid: bool) -> list[str]:
    """The table's columns: the figures every run has, and those of what the run modelled."""
    cols = ["policy", "jobs_completed", "wait_p50_s", "wait_p95_s", "gang_wait_p50_s",
            "gang_wait_p95_s", "busy_gpu_hours", "idle_gpu_hours", "cost_usd", "node_launches"]
    if oracle:
        cols += ["idle_vs_oracle", "cost_vs_oracle"]
    if spot:
        cols += ["preemptions", "requeues", "jobs_failed", "restart_wait_p95_s",
                 "lost_gpu_hours"]
    if saves:
        cols += ["saved_gpu_hours"]
    if failures:
        cols += ["node_failures", "requeues", "capacity_lost_gpu_hours", "lost_gpu_hours"]
    if paid:
        cols += ["on_demand_node_hours", "reserved_node_hours_paid", "reservation_utilization",
                 "jobs_killed_at_block_end"]
    return list(dict.fromkeys(cols))  # (a figure two options ask for, once)


class Progress:
    """On a terminal, one line on stderr while a simulation runs: each policy's simulated day
    against the trace's, redrawn at most twice a second; with --replicas, the replicas done.
    Nothing under --json or when stderr is not a terminal (a pipe, a cron job's log)."""

    def __init__(self, jobs: list[Any], enabled: bool) -> None:
        self.enabled = enabled
        self.days = max((j.submit_s + j.duration_s for j in jobs), default=0.0) / 86400
        self.started = time.monotonic()
        self.drawn = 0.0

    def _draw(self, text: str, force: bool = False) -> None:
        t = time.monotonic()
        if force or t - self.drawn >= 0.5:
            self.drawn = t
            sys.stderr.write(f"\r{text} ({t - self.started:.0f} s)\x1b[K")
            sys.stderr.flush()

    def policy(self, name: str) -> Callable[[float], None]:
        def tell(now_s: float) -> None:
            self._draw(f"simulating {name}: day {now_s / 86400:.1f} of {self.days:.1f}")
        return tell

    def replicas(self, k: int) -> Callable[[int], None]:
        self._draw(f"simulating {k} replicas: 0 of {k} done", force=True)

        def tell(n: int) -> None:
            self._draw(f"simulating {k} replicas: {n} of {k} done", force=True)
        return tell

    def end(self) -> None:
        if self.enabled and self.drawn:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _print_replicas(out: dict[str, Any], as_json: bool) -> None:
    """Each figure's median over the replicas, its range in brackets."""
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    cols = ["wait_p50_s", "wait_p95_s", "gang_wait_p50_s", "gang_wait_p95_s",
            "idle_gpu_hours", "cost_usd", "idle_vs_oracle", "cost_vs_oracle"]
    rows = []
    for name, figs in out["policies"].items():
        row: dict[str, Any] = {"policy": name}
        for c in cols:
            f = figs.get(c)
            row[c] = "" if f is None else f"{f['median']:g} [{f['min']:g}-{f['max']:g}]"
        rows.append(row)
    click.echo(f"{out['replicas']} replicas, submit times jittered by up to "
               f"{out['jitter_s']:g} s: median [min-max]")
    click.echo(_table(rows, ["policy", *[c for c in cols if any(r[c] for r in rows)]]))


def _jobs(trace_path: str, carry_in: str | None) -> list[TraceJob]:
    """The trace's jobs (with the carry-in's, sorted into them); a bad file is exit 2."""
    from slurmscale.sim.trace import TraceError, load_trace

    try:
        jobs = load_trace(trace_path)
        if carry_in:
            jobs = sorted(load_trace(carry_in, carry_in=True) + jobs,
                          key=lambda j: (j.submit_s, j.job_id))
    except TraceError as e:
        click.echo(f"slurmscale: {e}", err=True)
        sys.exit(2)
    return jobs


def _pool_knobs(ctx: click.Context, pool_name: str | None, knob_args: tuple[str, ...],
                cooldown: float | None, gpus_per_node: int, max_nodes: int) -> PoolKnobs:
    """The simulated pool's knobs: a config pool's policy (`--pool`), then `--knob`s and
    `--cooldown` over it, validated once as the config's `PoolPolicy` (a bad one named)."""
    from pydantic import ValidationError

    from slurmscale.config import PoolPolicy
    from slurmscale.policy.model import PoolKnobs
    from slurmscale.validation import problems

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
        valid = PoolPolicy.model_validate(policy)
    except ValidationError as e:
        raise click.BadParameter("; ".join(problems(e)), param_hint="--knob") from None
    # (its mode is the default: each simulated policy sets its own)
    return PoolKnobs(name="gpu", gpus_per_node=gpus_per_node, max_nodes=max_nodes,
                     **valid.knob_values())


def _hold_knobs(accumulate: bool, budget: float | None, after: float | None,
                max_hold: float | None, end_margin: float | None) -> ReservationKnobs | None:
    """The hold rule's knobs (None: no holds). Its limit_use is `auto`, as the daemon's
    default: learned from the simulated jobs that ended, as the daemon learns it from the
    jobs it recorded (it was told 1 / --time-limit-factor before)."""

    from slurmscale.policy.reservations import ReservationKnobs

    if not accumulate:
        return None
    holds = ReservationKnobs()
    if budget is not None:
        holds = replace(holds, hold_budget_gpu_hours=budget)
    if after is not None:
        holds = replace(holds, accumulate_after_s=after)
    if max_hold is not None:
        holds = replace(holds, max_hold_s=max_hold)
    if end_margin is not None:
        holds = replace(holds, end_margin_s=end_margin)
    return holds


def _warm(cloud: SimCloud, size: int, boot_s: float, stopped_price: float,
          start_failure: float, seed: int) -> SimCloud:
    """The cloud with the on-demand pool's warm pool of stopped instances (size 0: none)."""
    from slurmscale.sim.world import WarmPool

    return replace(cloud, warm=WarmPool(size, boot_s, stopped_price, start_failure, seed)
                   ) if size else cloud


def _cloud_and_spot(max_nodes: int, boot_time: float, price: float,
                    on_demand_price: float | None, spot_price: float | None,
                    interruption_rate: float | None, storm_at: float | None,
                    storm_fraction: float | None, storm_outage: float,
                    on_demand_buffer: float | None, warm_on_demand_nodes: int | None,
                    on_demand_nodes: int | None, requeue_delay: float,
                    max_preemptions: int, seed: int, grace_margin: float | None = None
                    ) -> tuple[SimCloud, SpotModel | None]:
    """The simulated cloud (boot delay, prices) and its spot model (None: no spot option
    given, the pool is on-demand)."""
    from slurmscale.sim.engine import SimCloud, SpotModel

    if (storm_at is None) != (storm_fraction is None):
        raise click.BadParameter("--storm-at and --storm-fraction go together (got "
                                 f"{'--storm-at' if storm_at is not None else '--storm-fraction'}"
                                 " alone)", param_hint="--storm-at")
    od_price = price if on_demand_price is None else on_demand_price
    if grace_margin is not None and interruption_rate is None and storm_at is None:
        raise click.BadParameter("signals jobs on spot interruptions: give "
                                 "--interruption-rate or --storm-at", param_hint="--grace-signal")
    spot = None
    if any(v is not None for v in (interruption_rate, storm_at, on_demand_buffer,
                                   warm_on_demand_nodes, spot_price, on_demand_nodes)):
        spot = SpotModel(
            on_demand_nodes=max_nodes if on_demand_nodes is None else on_demand_nodes,
            buffer=on_demand_buffer or 0.0, warm_nodes=warm_on_demand_nodes or 0,
            interruption_rate=interruption_rate or 0.0, storm_at_s=storm_at,
            storm_fraction=storm_fraction or 0.0, storm_outage_s=storm_outage,
            requeue_delay_s=requeue_delay, max_preemptions=max_preemptions, seed=seed,
            grace_margin_s=grace_margin)
        if spot_price is None:
            spot_price = round(0.4 * od_price, 2)
    cloud = SimCloud(boot_s=boot_time, price_per_node_hour=od_price,
                     spot_price_per_node_hour=spot_price if spot else None)
    return cloud, spot


def _slurm_model(kind: str, no_time_limits: bool, time_limit_factor: float,
                 params: tuple[str, ...]) -> SlurmModel:
    from slurmscale.sim.slurm_model import SchedulerKind, SlurmModel, parse_params

    try:
        return parse_params(SlurmModel(SchedulerKind(kind), time_limits=not no_time_limits,
                                       time_limit_factor=time_limit_factor), params)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--slurm-param") from None


def _paid_capacity(reserved_nodes: int, preference: str, blocks: tuple[str, ...],
                   max_nodes: int, block_margin: float | None = None,
                   reclaim_rate: float = 0.0, seed: int = 0) -> PaidCapacity | None:
    """The simulator's paid capacity from its options; a bad value is named (exit 2)."""
    import math

    from slurmscale.sim.engine import BlockSpec, PaidCapacity

    if reclaim_rate and not reserved_nodes:
        raise click.BadParameter(f"{reclaim_rate:g} needs --reserved-nodes (the reservation "
                                 "its owner reclaims from)", param_hint="--reclaim-rate")
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
    from slurmscale.config import CapacityBlockSettings, PowerSaving, default_block_margin_s

    lead = CapacityBlockSettings().termination_lead_s
    margin = (default_block_margin_s(lead, PowerSaving().suspend_timeout) if block_margin is None
              else block_margin)
    return PaidCapacity(reserved_nodes, preference == "use_first",
                        tuple(sorted(specs, key=lambda b: b.start_s)), margin, lead,
                        reclaim_rate, seed)
