"""Reservations for starving gangs on a real Slurm: a capped pool kept busy by a stream of short,
higher-priority 1-node jobs starves a 4-node job; with accumulation slurmscale holds nodes for
it as they drain, points it at them, and it runs. Every release path, and an admin's own
reservation left alone throughout."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import yaml

from slurmscale.localcluster.cluster import LocalCluster, PoolSpec
from slurmscale.localcluster.procs import wait_for

pytestmark = pytest.mark.slurm

SMALL_S = 6  # the small jobs' run time
ADMIN_RES = "maint-window"


def _cluster(make_cluster, **reservations):  # type: ignore[no-untyped-def]
    # 5 nodes, one of them in an admin's reservation: 4 for the jobs, all busy with small ones
    c, _ = make_cluster(pools=[PoolSpec("gpu-cap", "cap-", 5)], suspend_time=600,
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
def small_job_stream(c: LocalCluster, pending: int = 6) -> Iterator[list[int]]:
    """Keep `pending` short, high-priority 1-node jobs queued until the block ends."""
    submitted: list[int] = []
    stop = threading.Event()

    def feed() -> None:
        while not stop.is_set():
            queued = c.slurm("squeue", "-h", "-t", "PD", "-n", "small", "-o", "%i").split()
            for _ in range(max(0, pending - len(queued))):
                submitted.append(c.sbatch("-N", "1", "--gres=gpu:8", "-p", "gpu-cap",
                                          "--priority=1000", "-J", "small",
                                          "--wrap", f"sleep {SMALL_S}"))
            stop.wait(0.5)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        yield submitted
    finally:
        stop.set()
        t.join(10)
        c.slurm("scancel", "-n", "small", check=False)


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
    c = _cluster(make_cluster, enabled=accumulate)
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
