"""Reservations for starving gangs on a real Slurm: a capped pool kept busy by a stream of short,
higher-priority 1-node jobs starves a 4-node job; with accumulation slurmscale holds nodes for
it as they drain, points it at them, and it runs. Every release path, and an admin's own
reservation left alone throughout."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
import yaml

from slurmscale.hostlists import expand
from slurmscale.localcluster.cluster import LocalCluster
from slurmscale.localcluster.options import PoolSpec
from slurmscale.localcluster.procs import wait_for

pytestmark = pytest.mark.slurm

SMALL_S = 6  # the small jobs' run time
ADMIN_RES = "maint-window"


def _cluster(make_cluster, slurm_root: str = "/", suspend_time: int = 600,  # type: ignore[no-untyped-def]
             **reservations):
    # 5 nodes, one of them in an admin's reservation: 4 for the jobs, all busy with small ones
    c, _ = make_cluster(pools=[PoolSpec("gpu-cap", "cap-", 5)], suspend_time=suspend_time,
                        slurm_root=slurm_root,
                        reservations={"accumulate_after_s": 10, "hold_budget_gpu_hours": 1000,
                                      "max_hold_s": 500, **reservations})
    c.slurm("scontrol", "create", "reservation", f"ReservationName={ADMIN_RES}",
            "StartTime=now", "Duration=120", "Nodes=cap-5", "Users=root")
    return c


def _reservations(c: LocalCluster) -> dict[str, dict[str, str]]:
    from slurmscale.slurm.kv import parse_oneliner
    out = c.slurm("scontrol", "show", "res", "-o")
    rows = [parse_oneliner(x) for x in out.splitlines() if x.startswith("ReservationName=")]
    return {r["ReservationName"]: r for r in rows}


@contextmanager
def job_stream(c: LocalCluster, name: str, submit: Callable[[int], int],
               pending: int) -> Iterator[list[int]]:
    """Keep `pending` jobs named `name` queued (the i-th submitted by `submit(i)`) until the
    block ends; then the queued ones are cancelled."""
    submitted: list[int] = []
    stop = threading.Event()

    def feed() -> None:
        i = 0
        while not stop.is_set():
            queued = c.slurm("squeue", "-h", "-t", "PD", "-n", name, "-o", "%i").split()
            for _ in range(max(0, pending - len(queued))):
                i += 1
                submitted.append(submit(i))
            stop.wait(0.5)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        yield submitted
    finally:
        stop.set()
        t.join(10)
        c.slurm("scancel", "-n", name, check=False)


def small_job_stream(c: LocalCluster, pending: int = 6) -> AbstractContextManager[list[int]]:
    """Short, high-priority 1-node jobs, each taking a whole node."""
    return job_stream(c, "small", lambda _: c.sbatch(
        "-N", "1", "--gres=gpu:8", "-p", "gpu-cap", "--priority=1000", "-J", "small",
        "--wrap", f"sleep {SMALL_S}"), pending)


def _start_time(c: LocalCluster, job: int) -> float | None:
    from datetime import datetime
    info = c.job(job)
    if info.get("JobState") not in ("RUNNING", "COMPLETING", "COMPLETED"):
        return None
    return datetime.fromisoformat(info["StartTime"]).timestamp()


def _all_busy(c: LocalCluster) -> bool:
    return all(c.node(f"cap-{i}").get("State", "").startswith(("ALLOCATED", "MIXED"))
               for i in range(1, 5))


def _gang(c: LocalCluster) -> int:
    return c.sbatch("-N", "4", "--gres=gpu:8", "-p", "gpu-cap", "--priority=1", "-J", "gang",
                    "--wrap", "sleep 3")


def _admin_untouched(c: LocalCluster) -> None:
    res = _reservations(c)
    assert res[ADMIN_RES]["Nodes"] == "cap-5" and res[ADMIN_RES]["Users"] == "root"
    assert not any(ADMIN_RES in e["message"] for e in c.events())


@pytest.mark.parametrize("accumulate", [False, True])
def test_a_starving_gang_runs_only_with_accumulation(make_cluster, accumulate: bool) -> None:  # type: ignore[no-untyped-def]
    starving_gang_scenario(make_cluster, accumulate)


def starving_gang_scenario(make_cluster, accumulate: bool, slurm_root: str = "/") -> None:  # type: ignore[no-untyped-def]
    """A 4-node gang behind a stream of small jobs: overtaken for good without holds, started
    within accumulate_after + one small job with them (test_slurm_releases: newer Slurms)."""
    c = _cluster(make_cluster, slurm_root, enabled=accumulate)
    with small_job_stream(c) as small:
        wait_for("all four nodes busy with small jobs", lambda: _all_busy(c), 180)
        gang = _gang(c)
        submitted_at = time.time()
        if not accumulate:
            # the starvation the feature exists for: >= 8 small jobs start after it, it does not
            def overtaken() -> bool:
                after = [j for j in small if (s := _start_time(c, j)) and s > submitted_at]
                return len(after) >= 8
            wait_for(">= 8 small jobs started after the gang", overtaken, 180, interval=1)
            assert c.job_state(gang) == "PENDING"
            assert not [n for n in _reservations(c) if n.startswith("slurmscale-")]
        else:
            c.wait_job(gang, {"RUNNING", "COMPLETED"}, 120)
            waited = (_start_time(c, gang) or time.time()) - submitted_at
            # accumulate_after + the longest small job + slack (ticks, scheduling passes)
            assert waited <= 10 + SMALL_S + 30, f"gang waited {waited:.0f}s"
            print(f"4-node gang behind a stream of small jobs started after {waited:.0f}s")
    if accumulate:
        c.wait_job(gang, {"COMPLETED"}, 60)
        wait_for("slurmscale's reservation gone",
                 lambda: not [n for n in _reservations(c) if n.startswith("slurmscale-")], 60)
        kinds = [e["kind"] for e in c.events() if e["kind"].startswith("reservation_")]
        assert kinds[0] == "reservation_create" and "reservation_attach" in kinds
        assert kinds[-1] == "reservation_released"
        listing = c.cli("reservations", "list", "--all", "--json")
        assert '"state": "released"' in listing.stdout and f'"job_id": "{gang}"' in listing.stdout
    _admin_untouched(c)


def held_node_outlives_suspend_time_scenario(make_cluster, slurm_root: str) -> None:  # type: ignore[no-untyped-def]
    """Slurm 23.02+ (test_slurm_releases): SuspendTime 20 s, holds up to 500 s. A hold that
    cannot fill (a long job keeps one of the four nodes) keeps its idle nodes up well past
    SuspendTime, listed in SuspendExcNodes; once the gang has run and the hold is gone, the
    list no longer names them."""
    suspend = 20
    c = _cluster(make_cluster, slurm_root, suspend_time=suspend, max_hold_s=500)
    with small_job_stream(c):
        wait_for("all four nodes busy", lambda: _all_busy(c), 180)
        blocker = c.sbatch("-N", "1", "--gres=gpu:8", "-p", "gpu-cap", "--priority=5000",
                           "-J", "blocker", "--wrap", "sleep 600")
        c.wait_job(blocker, {"RUNNING"}, 60)
        gang = _gang(c)
        name = f"slurmscale-gang-{gang}"

        def idle_held() -> str | None:
            res = _reservations(c).get(name)
            for n in expand(res["Nodes"]) if res and res.get("Nodes") not in (None, "",
                                                                               "(null)") else []:
                if c.node(n).get("State", "").startswith("IDLE"):
                    return n
            return None
        node = wait_for(f"an idle node in {name}", idle_held, 120, interval=0.5)
        idle_from = time.time()
        # for SuspendTime and two daemon passes beyond it, the held node is never powered down
        while time.time() - idle_from < suspend + 15:
            state = c.node(node).get("State", "")
            assert "POWER" not in state, f"held {node} powered down by Slurm: {state}"
            time.sleep(1)
        exc = c.slurm("scontrol", "show", "config")
        listed = next(ln.split("=", 1)[1].strip() for ln in exc.splitlines()
                      if ln.startswith("SuspendExcNodes"))
        assert node in expand(listed), listed
        assert any(e["kind"] == "suspend_exclusions_set" and node in expand(
            e["message"].split()[1].strip("+:")) for e in c.events()), c.events()[-5:]
        c.slurm("scancel", str(blocker))
        c.wait_job(gang, {"RUNNING", "COMPLETED"}, 120)
    c.wait_job(gang, {"COMPLETED"}, 60)

    def released() -> bool:
        exc = c.slurm("scontrol", "show", "config")
        listed = next(ln.split("=", 1)[1].strip() for ln in exc.splitlines()
                      if ln.startswith("SuspendExcNodes"))
        return listed == "(null)"
    wait_for("slurmscale's part of SuspendExcNodes emptied", released, 60)
    _admin_untouched(c)


def _restart_with(c: LocalCluster, **reservations: object) -> None:
    c.stop_daemon()
    data = yaml.safe_load(c.cfg_path.read_text())
    data["reservations"].update(reservations)
    c.cfg_path.write_text(yaml.safe_dump(data, sort_keys=False))
    c.start_daemon()


def _released(c: LocalCluster, name: str) -> str | None:
    for e in c.events():
        if e["kind"] == "reservation_released" and e["message"].startswith(name + ":"):
            return str(e["message"])
    return None


def _passes(c: LocalCluster, n: int) -> None:
    """Wait until the daemon has run n more passes (its health reports each one)."""
    import json
    seen: set[str] = set()

    def tick() -> bool:
        st = json.loads(c.cli("status", "--json").stdout)
        at = (st["daemon"].get("last_tick") or {}).get("at")
        if at:
            seen.add(at)
        return len(seen) > n

    wait_for(f"{n} daemon passes", tick, 60)


def test_every_release_path_frees_the_nodes_and_never_holds_the_job(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c = _cluster(make_cluster)
    with small_job_stream(c):
        wait_for("all four nodes busy", lambda: _all_busy(c), 180)
        # One node stays busy for minutes, so no hold can fill up and start its job: each
        # phase ends by the release path under test.
        blocker = c.sbatch("-N", "1", "--gres=gpu:8", "-p", "gpu-cap", "--priority=5000",
                           "-J", "blocker", "--wrap", "sleep 600")
        c.wait_job(blocker, {"RUNNING"}, 60)
        for knobs, end, why in (
                ({}, "cancel", "is no longer queued"),
                ({"hold_budget_gpu_hours": 0.002}, None, "hold budget spent"),
                ({"hold_budget_gpu_hours": 1000, "max_hold_s": 8}, None, "maximum hold time")):
            if knobs:
                _restart_with(c, **knobs)
            gang = _gang(c)
            name = f"slurmscale-gang-{gang}"
            wait_for(f"{name} created", lambda n=name: n in _reservations(c), 60)
            if end == "cancel":
                c.slurm("scancel", str(gang))
            msg = wait_for(f"{name} released", lambda n=name: _released(c, n), 90)
            assert why in str(msg), msg
            assert name not in _reservations(c)
            if end != "cancel":
                # released for budget or time: the job stays pending (never held) and is not
                # held for again
                info = c.job(gang)
                assert info["JobState"] == "PENDING", info
                assert not info.get("Reason", "").startswith(("JobHeld", "Reservation")), info
                assert info.get("Priority") != "0"
                _passes(c, 3)
                assert name not in _reservations(c)
                c.slurm("scancel", str(gang))
        c.slurm("scancel", str(blocker))
    _admin_untouched(c)


LIMIT_S = 60  # the small jobs' time limit: Slurm's limits are whole minutes


def shared_node_stream(c: LocalCluster,
                       pending: int = 8) -> AbstractContextManager[list[int]]:
    """Small high-priority jobs that SHARE nodes (2 of a node's 8 GPUs and 1 of its 4 CPUs
    each: up to four per node), with varied run times (3-10 s) under a one-minute limit."""
    return job_stream(c, "shared", lambda i: c.sbatch(
        "-n", "1", "--gres=gpu:2", "-p", "gpu-cap", "--time=1", "--priority=1000", "-J",
        "shared", "--wrap", f"sleep {3 + i * 7 % 8}"), pending)


def _created_for(c: LocalCluster, job: int) -> list[str]:
    return [e["message"] for e in c.events() if e["kind"] == "reservation_create"
            and e["message"].startswith(f"slurmscale-gang-{job}:")]


def test_two_gangs_behind_small_jobs_sharing_nodes_start_and_one_planned_soon_is_not_held(
        make_cluster) -> None:
    """Holds that only help, on a real Slurm. (1) Two gangs of different sizes and
    priorities, both below a stream of small jobs that share the nodes: the small ones keep
    overtaking them (backfill's plan for each slips), slurmscale holds nodes for one gang at
    a time, and both start within accumulate_after + the small jobs' time limit + slack.
    (2) A gang above everything, behind running jobs with time limits: backfill plans it where
    their limits end, so it gets no hold, and `plan` says why."""
    c, _ = make_cluster(pools=[PoolSpec("gpu-cap", "cap-", 4, cpus=4)], suspend_time=600,
                        # four CPUs on a 2-core machine: slurmd takes the configured count
                        slurm_conf_extra=["SchedulerParameters=bf_interval=5",
                                          "SlurmdParameters=config_overrides"],
                        reservations={"accumulate_after_s": 10, "hold_budget_gpu_hours": 1000,
                                      "max_hold_s": 500})
    with shared_node_stream(c):
        wait_for("all four nodes busy with shared small jobs", lambda: all(
            c.node(f"cap-{i}").get("State", "").startswith(("ALLOCATED", "MIXED"))
            for i in range(1, 5)), 180)
        big = c.sbatch("-N", "3", "--gres=gpu:8", "-p", "gpu-cap", "--time=1",
                       "--priority=20", "-J", "gang3", "--wrap", "sleep 3")
        small = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-cap", "--time=1",
                         "--priority=10", "-J", "gang2", "--wrap", "sleep 3")
        submitted_at = time.time()
        for gang in (big, small):
            c.wait_job(gang, {"RUNNING", "COMPLETED"}, 240)
        waits = {g: (_start_time(c, g) or time.time()) - submitted_at for g in (big, small)}
    print(f"gangs behind shared small jobs started after {waits[big]:.0f}s (3 nodes) and "
          f"{waits[small]:.0f}s (2 nodes)")
    for g, waited in waits.items():
        assert waited <= 10 + LIMIT_S + 30, (g, waited)
        assert _created_for(c, g), f"gang {g} started without a hold: not the case under test"
    # (2) four jobs of 45 s under a one-minute limit fill the pool; a top-priority gang
    # behind them is planned by backfill where their limits end
    fill = [c.sbatch("-N", "1", "--gres=gpu:8", "-p", "gpu-cap", "--time=1", "-J", "fill",
                     "--wrap", "sleep 45") for _ in range(4)]
    for j in fill:
        c.wait_job(j, {"RUNNING"}, 60)
    top = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-cap", "--time=1", "--priority=5000",
                   "-J", "top", "--wrap", "sleep 2")

    def said() -> dict[str, Any] | None:
        gangs = json.loads(c.cli("plan", "--json").stdout)["gangs"]
        g = next((g for g in gangs if g["job_id"] == str(top)), None)
        return g if g is not None and g["hold"] else None
    entry = wait_for("plan to say why the top gang gets no hold", said, 40)
    assert "backfill plans to start it" in entry["hold"], entry
    assert entry["expected_start"] is not None and entry["ahead"] == 0, entry
    c.wait_job(top, {"RUNNING", "COMPLETED"}, LIMIT_S + 30)
    assert not _created_for(c, top), "a gang backfill planned got a hold"
    _passes(c, 2)
    assert not _created_for(c, top)


@pytest.mark.parametrize("limit_use", ["auto", 1.0])
def test_a_learned_limit_use_gives_a_starving_gang_the_hold_the_limits_alone_refuse(
        make_cluster, limit_use: str | float) -> None:
    """Small jobs run a quarter of their one-minute limits (15 s); max_hold_s is 30 s. By the
    limits alone the nodes a hold would drain free 45-60 s from now: no hold can gather them
    in time, and the gang is skipped (limit_use: 1.0). With `auto` the daemon learns from the
    jobs it saw end (plan --json shows the value and how many jobs it rests on) that they free
    in a quarter of that, and holds for the gang, which then runs."""
    c, _ = make_cluster(pools=[PoolSpec("gpu-cap", "cap-", 4)], suspend_time=600,
                        reservations={"accumulate_after_s": 10, "hold_budget_gpu_hours": 1000,
                                      "max_hold_s": 30, "limit_use": limit_use,
                                      "limit_use_auto": {"min_jobs": 5, "every_s": 5}})

    def learned() -> dict[str, Any] | None:
        u = json.loads(c.cli("plan", "--json").stdout)["limit_use"]["gpu-cap"]
        return u if u["source"] != "unlearned" else None
    with job_stream(c, "small", lambda _: c.sbatch(
            "-N", "1", "--gres=gpu:8", "-p", "gpu-cap", "--time=1", "--priority=1000",
            "-J", "small", "--wrap", "sleep 15"), 6):
        wait_for("all four nodes busy with small jobs", lambda: _all_busy(c), 180)
        use = wait_for("limit_use learned from the jobs that ended", learned, 120, interval=1)
        print(f"limit_use {limit_use}: plan says {use}")
        if limit_use == "auto":
            assert use["source"] == "learned" and use["jobs"] >= 5, use
            assert 0.2 <= use["value"] <= 0.45, use  # 15 s of 60, ended a pass late
        else:
            assert use == {"value": 1.0, "jobs": 0, "source": "fixed",
                           "said": "1 (set in the config)"}, use
        gang = _gang_with_limit(c)
        if limit_use == "auto":
            c.wait_job(gang, {"RUNNING", "COMPLETED"}, 120)
            assert _created_for(c, gang), "the gang started without a hold: not the case"
            return

        def skipped() -> str | None:
            gangs = json.loads(c.cli("plan", "--json").stdout)["gangs"]
            g = next((g for g in gangs if g["job_id"] == str(gang)), None)
            return None if g is None or not g["hold"] else str(g["hold"])
        why = wait_for("the rule to say why the gang gets no hold", skipped, 60)
        assert "could not gather its 4 nodes within max_hold_s (30s)" in why, why
        _passes(c, 3)
        assert not _created_for(c, gang) and c.job_state(gang) == "PENDING"


def _gang_with_limit(c: LocalCluster) -> int:
    return c.sbatch("-N", "4", "--gres=gpu:8", "-p", "gpu-cap", "--time=1", "--priority=1",
                    "-J", "gang", "--wrap", "sleep 3")


def test_a_gang_that_needs_a_powered_down_node_is_held_with_it_and_runs(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Three nodes; short high-priority jobs pinned to cap-1 and cap-2 keep them busy while
    cap-3 stays powered down; a 3-node gang behind them cannot start (one node short) and is
    overtaken. Its hold takes the powered-down node as well as the two it drains (a hold of
    the busy two alone never reaches three), is attached once they are idle, and Slurm
    powers cap-3 up for the gang."""
    c, _ = make_cluster(pools=[PoolSpec("gpu-cap", "cap-", 3)], suspend_time=600,
                        reservations={"accumulate_after_s": 10, "hold_budget_gpu_hours": 1000,
                                      "max_hold_s": 500})
    with job_stream(c, "pinned", lambda i: c.sbatch(
            "-N", "1", "-w", f"cap-{1 + i % 2}", "--gres=gpu:8", "-p", "gpu-cap", "--time=1",
            "--priority=1000", "-J", "pinned", "--wrap", f"sleep {SMALL_S}"), 4):
        wait_for("cap-1 and cap-2 busy, cap-3 powered down", lambda: all(
            c.node(f"cap-{i}").get("State", "").startswith(("ALLOCATED", "MIXED"))
            for i in (1, 2)) and "POWERED_DOWN" in c.node("cap-3").get("State", ""), 180)
        gang = c.sbatch("-N", "3", "--gres=gpu:8", "-p", "gpu-cap", "--time=1",
                        "--priority=1", "-J", "gang", "--wrap", "sleep 3")
        c.wait_job(gang, {"RUNNING", "COMPLETED"}, 240)
    (created,) = _created_for(c, gang)
    assert "holding 3 of 3 node(s)" in created, created
    assert set(expand(c.job(gang)["NodeList"])) == {"cap-1", "cap-2", "cap-3"}
