"""Live Slurm state (as the CLI backend parses it) -> the policy's snapshot and plan."""

from __future__ import annotations

from datetime import datetime

from slurmscale.config_file import parse_config
from slurmscale.daemon.queue.queue_view import QueueView, build_snapshot
from slurmscale.model import QueueJob, SlurmNode
from slurmscale.policy.decide import decide
from slurmscale.policy.model import ActionKind, NodeState
from slurmscale.policy.observe import node_state
from tests.unit.conftest import base_config


def sn(name: str, state: str, last_busy: str = "") -> SlurmNode:
    return SlurmNode(name, state, name, name, last_busy=last_busy)


def test_slurm_node_states_map_to_policy_states() -> None:
    assert node_state(sn("a", "IDLE+CLOUD+POWERED_DOWN")) is NodeState.POWERED_DOWN
    assert node_state(sn("a", "IDLE+CLOUD+POWERING_DOWN")) is NodeState.POWERED_DOWN
    assert node_state(sn("a", "MIXED+CLOUD")) is NodeState.ALLOCATED
    assert node_state(sn("a", "ALLOCATED+CLOUD+POWERING_UP")) is NodeState.ALLOCATED
    assert node_state(sn("a", "IDLE+CLOUD+POWERING_UP")) is NodeState.BOOTING
    assert node_state(sn("a", "IDLE+CLOUD+RESERVED")) is NodeState.RESERVED
    assert node_state(sn("a", "IDLE+CLOUD")) is NodeState.IDLE
    # a release asked for and not begun yet: not idle capacity to release again
    assert node_state(sn("a", "IDLE+CLOUD+POWER_DOWN")) is NodeState.POWERED_DOWN
    # (a job that landed first keeps it busy; Slurm powers it down after)
    assert node_state(sn("a", "MIXED+CLOUD+POWER_DOWN")) is NodeState.ALLOCATED


def test_a_governed_pool_plans_a_whole_gang_from_live_state() -> None:
    d = base_config()
    d["pools"][0]["policy"] = {"mode": "governed"}
    cfg = parse_config(d)
    now = datetime(2026, 11, 29, 12, 0).timestamp()
    nodes = [sn(f"spot-{i}", "IDLE+CLOUD+POWERED_DOWN") for i in range(1, 9)]
    jobs = [QueueJob("77", ("gpu-spot",), 4, 8, 3600, "2026-11-29T11:59:00", "Resources",
                     1000, "alice", "PENDING"),
            QueueJob("78", ("gpu-spot",), 2, 8, 3600, "2026-11-29T11:59:00", "Dependency",
                     1000, "bob", "PENDING")]
    snap = build_snapshot(cfg, nodes, jobs, now)
    assert [j.actionable for j in snap.jobs] == [True, False]
    plan = decide(snap)
    (raise_,) = [a for a in plan.actions if a.kind is ActionKind.RAISE_TARGET]
    assert raise_.pool == "gpu-spot" and raise_.count == 4 and "77 (4 nodes)" in raise_.reason
    assert plan.targets["gpu-od"] == 2  # immediate pools stay at max_nodes


def test_idle_nodes_use_last_busy_time_for_scale_down() -> None:
    d = base_config()
    d["pools"][0]["policy"] = {"min_idle_s": 60}
    cfg = parse_config(d)
    now = datetime(2026, 11, 29, 12, 0).timestamp()
    nodes = [sn("spot-1", "IDLE+CLOUD", "2026-11-29T11:40:00"),  # idle 20 min
             sn("spot-2", "IDLE+CLOUD", "2026-11-29T11:59:30"),  # idle 30 s
             sn("spot-3", "MIXED+CLOUD", "2026-11-29T11:00:00")]
    plan = decide(build_snapshot(cfg, nodes, [], now))
    released = [n for a in plan.actions if a.kind is ActionKind.RELEASE for n in a.nodes]
    assert released == ["spot-1"]


def test_every_config_policy_knob_reaches_the_policy() -> None:
    from dataclasses import fields

    from slurmscale.config import PoolPolicy
    from slurmscale.policy.model import PoolKnobs

    config_keys = set(PoolPolicy.model_fields)
    # release_paid_idle comes from the pool's capacity_reservations.release_idle
    knob_keys = {f.name for f in fields(PoolKnobs)} - {"name", "gpus_per_node", "max_nodes",
                                                        "min_nodes", "buffer",
                                                        "release_paid_idle"}
    assert config_keys == knob_keys


def test_a_pool_policy_and_its_knobs_convert_both_ways() -> None:
    """The simulator configures its daemon from the knobs it simulates (`of_knobs`); the
    daemon makes its knobs from that config (`knob_values`): every knob, the enums too,
    comes back as it went in."""
    from slurmscale.config import PoolPolicy
    from slurmscale.policy.model import Mode, PoolKnobs, StepSizing

    k = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=16, mode=Mode.GOVERNED,
                  step_sizing=StepSizing.FIXED, step_nodes=3, min_idle_s=45.0,
                  reuse_horizon_s=120.0, cooldown_s=900.0)
    policy = PoolPolicy.of_knobs(k)
    assert (policy.mode, policy.step_sizing, policy.step_nodes) == ("governed", "fixed", 3)
    back = PoolKnobs(name="gpu", gpus_per_node=8, max_nodes=16, **policy.knob_values())
    assert back == k
    # (as the enums themselves: the policy asks `is StepSizing.FIXED`, which a string fails)
    assert back.mode is Mode.GOVERNED and back.step_sizing is StepSizing.FIXED


def test_a_spot_pools_buffer_becomes_its_fallback_pools_knob() -> None:
    from slurmscale.config import ConfigError
    from slurmscale.config_file import parse_config
    from slurmscale.daemon.queue.knobs import knobs
    from slurmscale.policy.model import BufferRule

    def cfg(spot: dict[str, object], on: str = "spot") -> dict[str, object]:
        base = {"instance_types": ["g5.xlarge"], "subnets": ["subnet-1"],
                "launch_template": {"name": "lt", "version": "1"}}
        pools = [dict(base, name="spot", partition="spot", node_prefix="spot-",
                      max_nodes=4, fallback_pool="od"),
                 dict(base, name="od", partition="od", node_prefix="od-", max_nodes=2,
                      capacity_type="on-demand")]
        pools[0 if on == "spot" else 1]["spot"] = spot
        return {"cluster_name": "c", "pools": pools}

    by = {k.name: k for k in knobs(parse_config(cfg({"warm_on_demand_nodes": 1})))}
    assert by["od"].buffer == (BufferRule("spot", 0.2, 1),)
    assert by["spot"].buffer == ()
    off = {k.name: k for k in knobs(parse_config(cfg({"on_demand_buffer": 0})))}
    assert off["od"].buffer == ()
    import pytest
    with pytest.raises(ConfigError, match="spot settings apply only to a spot pool"):
        parse_config(cfg({"max_preemptions": 3}, on="od"))
    with pytest.raises(ConfigError, match="on_demand_buffer"):
        parse_config(cfg({"on_demand_buffer": 1.5}))


def test_running_jobs_are_arrivals_and_held_out_jobs_are_demand() -> None:
    d = base_config()
    d["pools"][0]["policy"] = {"mode": "governed"}
    cfg = parse_config(d)
    now = datetime(2026, 11, 29, 12, 0).timestamp()
    held_out = ("Nodes required for job are DOWN, DRAINED or reserved for jobs in higher "
                "priority partitions")
    jobs = [QueueJob("80", ("gpu-spot",), 4, 8, 3600, "2026-11-29T11:58:00", held_out, 50,
                     "alice", "PENDING"),
            QueueJob("81", ("gpu-spot",), 1, 8, 3600, "2026-11-29T11:50:00", "None", 50,
                     "bob", "RUNNING")]
    snap = build_snapshot(cfg, [], jobs, now)
    assert [(j.job_id, j.actionable) for j in snap.jobs] == [("80", True)]
    assert sorted(n for _, _, n in snap.arrivals) == [1, 4]


def test_a_job_the_scheduler_has_not_looked_at_yet_is_demand() -> None:
    """Just submitted, a pending job's reason is None until the scheduler's next run: it is
    about to take idle nodes, so they are not idle for the scale-down (an integration run
    released two idle nodes under four such jobs, and two of them waited for a boot)."""
    cfg = parse_config(base_config())
    now = datetime(2026, 11, 29, 12, 0).timestamp()
    jobs = [QueueJob(str(i), ("gpu-spot",), 1, 8, 60, "2026-11-29T11:59:58", "None", 1,
                     "alice", "PENDING") for i in range(4)]
    snap = build_snapshot(cfg, [], jobs, now)
    assert [j.actionable for j in snap.jobs] == [True] * 4


def test_the_daemons_arrival_log_remembers_finished_jobs_for_the_reuse_forecast() -> None:
    cfg = parse_config(base_config())
    now = datetime(2026, 11, 29, 12, 0).timestamp()
    view = QueueView()
    running = [QueueJob(str(i), ("gpu-spot",), 1, 8, 600, "2026-11-29T11:50:00", "None", 1,
                        "bob", "RUNNING") for i in range(3)]
    view.read(cfg, [], running, now)
    later = view.read(cfg, [], [], now + 60).snapshot  # they finished
    assert len(later.arrivals) == 3
    gone = view.read(cfg, [], [], now + 3600).snapshot  # out of the window
    assert gone.arrivals == () and view.arrivals == {}


def test_spot_only_jobs_get_the_fallback_partition_only_when_allowed_and_due() -> None:
    from slurmscale.config_file import parse_config
    from slurmscale.daemon.queue.knobs import fallback_rules
    from slurmscale.model import QueueJob
    from slurmscale.policy.fallback import partition_rewrites
    from slurmscale.policy.observe import slurm_time
    from tests.unit.conftest import base_config

    d = base_config()
    d["pools"][0]["fallback_pool"] = "gpu-od"
    d["pools"][0]["spot"] = {"allow_partition_rewrite": True, "fallback_after_s": 900}
    cfg = parse_config(d)
    submit = "2026-11-29T11:00:00"
    t0 = slurm_time(submit)
    assert t0 is not None

    def job(jid: str, parts: tuple[str, ...], reason: str = "Resources",
            state: str = "PENDING") -> QueueJob:
        return QueueJob(jid, parts, 1, 8, 3600, submit, reason, 100, "alice", state)

    jobs = [job("1", ("gpu-spot",)), job("2", ("gpu-spot", "gpu-od")),
            job("3", ("gpu-spot",), reason="Dependency"), job("4", ("gpu-spot",),
                                                                state="RUNNING")]
    down = {"gpu-spot": t0 + 10_000}
    (rw,) = partition_rewrites(fallback_rules(cfg), jobs, down, t0 + 901)
    assert (rw.job_id, rw.partitions) == ("1", ("gpu-spot", "gpu-od"))
    assert "fallback_after_s 900" in rw.reason
    rules = fallback_rules(cfg)
    assert partition_rewrites(rules, jobs, down, t0 + 899) == ()  # not waited long enough
    assert partition_rewrites(rules, jobs, {}, t0 + 5000) == ()  # spot has capacity
    d["pools"][0]["spot"] = {"fallback_after_s": 900}  # rewriting not allowed (default)
    assert partition_rewrites(fallback_rules(parse_config(d)), jobs, down, t0 + 5000) == ()


def test_a_job_submitted_to_two_pools_counts_as_near_demand_in_the_second() -> None:
    from slurmscale.config_file import parse_config
    from slurmscale.daemon.queue.queue_view import build_snapshot
    from slurmscale.model import QueueJob
    from tests.unit.conftest import base_config

    cfg = parse_config(base_config())
    jobs = [QueueJob("1", ("gpu-spot", "gpu-od"), 1, 8, 3600, "2026-11-29T11:00:00",
                     "Resources", 100, "alice", "PENDING")]
    (pj,) = build_snapshot(cfg, [], jobs, 0.0).jobs
    assert (pj.pool, pj.also) == ("gpu-spot", ("gpu-od",))


def test_gpus_in_use_come_from_running_jobs_when_alloc_tres_has_none() -> None:
    from slurmscale.config_file import parse_config
    from slurmscale.daemon.queue.queue_view import build_snapshot
    from slurmscale.model import QueueJob, SlurmNode
    from tests.unit.conftest import base_config

    cfg = parse_config(base_config())
    nodes = [SlurmNode("spot-1", "MIXED+CLOUD", "127.0.0.1", "spot-1"),
             SlurmNode("spot-2", "ALLOCATED+CLOUD", "127.0.0.1", "spot-2", alloc_gpus=8)]
    run = [QueueJob(str(i), ("gpu-spot",), 1, 4, 3600, "2026-11-29T11:00:00", "None", 100,
                    "alice", "RUNNING", end_time="2026-11-29T12:00:00", nodelist="spot-1")
           for i in (1, 2, 3)]
    views = {v.name: v for v in build_snapshot(cfg, nodes, run, 0.0).nodes}
    assert views["spot-1"].alloc_gpus == 8  # 3 x 4 GPUs, capped at the node's 8
    assert views["spot-2"].alloc_gpus == 8  # AllocTRES, when Slurm reports it, wins


def test_gang_jobs_fills_every_field_in_order() -> None:
    """gang_jobs makes each GangJob from its record (daemon/observe.gang) positionally: it
    must be the GangJob the keywords make, field for field (a field added to GangJob and not
    there fails this); a pending gang's earliest plan is its first."""
    from slurmscale.daemon.queue.queue_view import gang_jobs
    from slurmscale.policy.observe import slurm_time
    from slurmscale.policy.reservations import GangJob

    cfg = parse_config(base_config())
    q = [QueueJob("7", ("gpu-spot",), 4, 8, 3600, "2026-11-29T10:00:00", "Resources", 50,
                  "alice", "PENDING", "proj", "resv", "", "", "",
                  "2026-11-29T12:00:00"),
         QueueJob("8", ("gpu-spot",), 2, 0, None, "2026-11-29T10:00:01",
                  "JobHeldUser", 0, "bob", "PENDING")]
    a, b = gang_jobs(cfg, q)
    assert a == GangJob(job_id="7", pool="gpu-spot", nodes=4, gpus_per_node=8,
                        submit_s=slurm_time("2026-11-29T10:00:00"), priority=50,
                        user="alice", account="proj", pending=True,
                        waiting_for_capacity=True, held=False, reservation="resv",
                        expected_start_s=slurm_time("2026-11-29T12:00:00"),
                        first_expected_s=slurm_time("2026-11-29T12:00:00"))
    assert (b.gpus_per_node, b.held, b.waiting_for_capacity, b.expected_start_s) == (
        8, True, False, None)
    assert len(a) == len(GangJob._fields) and type(a) is GangJob
