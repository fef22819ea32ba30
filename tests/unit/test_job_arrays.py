"""Pending job arrays count as the demand they are: squeue lists a pending array as ONE line
(ArrayTaskID "0-19%5"), which used to count as one job and one node. Counted, never
expanded; the `%` throttle bounds what may start now."""

from __future__ import annotations

from datetime import datetime

from hypothesis import given
from hypothesis import strategies as st

from slurmscale.config_file import parse_config
from slurmscale.daemon.passes.ledger import pools_now
from slurmscale.daemon.queue.queue_view import build_snapshot
from slurmscale.model import QueueJob, SlurmNode
from slurmscale.policy.decide import decide
from slurmscale.policy.demand import pool_demand
from slurmscale.slurm.kv import array_tasks, parse_squeue_fixed
from tests.unit.conftest import base_config

NOW = datetime(2026, 11, 30, 12, 0).timestamp()
LINE = ("{id}|gpu-spot|{nodes}|gres:gpu:8|1:00:00|2026-11-30T11:00:00|Resources|100|alice|"
        "{state}|(null)|(null)|N/A||N/A|{array}|{tasks}|")


def test_array_task_specs_are_counted_not_expanded() -> None:
    assert array_tasks("0-19%5") == (20, 5)
    assert array_tasks("1,3,7-9") == (5, 0)
    assert array_tasks("1-99:2") == (50, 0)
    assert array_tasks("0-99999") == (100_000, 0)
    assert array_tasks("7") == (1, 0) and array_tasks("N/A") == (1, 0)
    assert array_tasks("9-3") == (1, 0) and array_tasks("a-b") == (1, 0)  # unreadable: one


@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 300), st.integers(1, 7)),
                min_size=1, max_size=6), st.integers(0, 50))
def test_a_task_count_is_the_size_of_its_expansion(parts, throttle) -> None:  # type: ignore[no-untyped-def]
    spec = ",".join(f"{a}-{a + w}:{s}" for a, w, s in parts) + (f"%{throttle}" if throttle
                                                                 else "")
    want = sum(len(range(a, a + w + 1, s)) for a, w, s in parts)
    assert array_tasks(spec) == (want, throttle)


def test_a_pending_array_line_is_its_tasks_in_squeue_and_in_every_demand_figure() -> None:
    text = (LINE.format(id="5", nodes=1, state="PENDING", array="5", tasks="0-19")
            + "\n" + LINE.format(id="6", nodes=1, state="PENDING", array="6", tasks="N/A"))
    arr, plain = parse_squeue_fixed(text)
    assert (arr.array_job, arr.array_tasks, arr.array_throttle) == ("5", 20, 0)
    assert (plain.array_job, plain.array_tasks) == ("", 1)
    cfg = parse_config(base_config())
    nodes = [SlurmNode(f"spot-{i}", "IDLE+CLOUD+POWERED_DOWN", "", "") for i in range(1, 9)]
    snap = build_snapshot(cfg, nodes, [arr, plain], NOW)
    (now_,) = [p for p in pools_now(snap) if p.pool == "gpu-spot"]
    assert now_.pending_gpus == 21 * 8 and now_.pending_gpu_hours == 21 * 8
    k = snap.pools[0]
    d = pool_demand(k, list(snap.jobs), NOW)
    assert d.pending_jobs == 21 and d.pending_gpu_hours == 168
    assert sum(n for _, _, n in snap.arrivals) == 8 + 1  # tasks, as many as the pool holds


def test_a_throttled_array_asks_only_for_what_may_start_now() -> None:
    d = base_config()
    d["pools"][0]["policy"] = {"mode": "governed"}
    cfg = parse_config(d)
    nodes = [SlurmNode(f"spot-{i}", "IDLE+CLOUD+POWERED_DOWN", "", "") for i in range(1, 9)]
    running = [QueueJob(str(10 + i), ("gpu-spot",), 2, 8, 3600, "2026-11-30T11:00:00", "None",
                        100, "alice", "RUNNING", array_job="9", array_tasks=1)
               for i in range(2)]
    pend = QueueJob("9", ("gpu-spot",), 2, 8, 3600, "2026-11-30T11:00:00", "Resources", 100,
                    "alice", "PENDING", array_job="9", array_tasks=10, array_throttle=3)
    snap = build_snapshot(cfg, nodes, [*running, pend], NOW)
    (j,) = snap.jobs
    assert (j.tasks, j.startable, j.actionable) == (10, 1, True)  # 3 at once, 2 running
    demand = decide(snap).demand["gpu-spot"]
    assert demand.pending_gangs == (("9", 2),) and demand.pending_jobs == 10
    full = build_snapshot(cfg, nodes, [*running, running[0]._replace(job_id="13"), pend], NOW)
    assert [j.actionable for j in full.jobs] == [False]  # throttled: nothing may start
    free = pend._replace(array_throttle=0)
    gangs = decide(build_snapshot(cfg, nodes, [free], NOW)).demand["gpu-spot"].pending_gangs
    assert gangs == (("9", 2),) * 4  # no more than the 8-node pool holds of 2-node tasks
