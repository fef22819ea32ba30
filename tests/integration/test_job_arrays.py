"""A pending job array on real Slurm is the demand it is: squeue lists the 20 pending tasks of
`--array=0-19` as one line, and `slurmscale plan` shows 20 tasks of demand on a capped pool
(it used to show one job, one node)."""

from __future__ import annotations

import json

import pytest

from slurmscale.localcluster.options import PoolSpec
from slurmscale.localcluster.procs import wait_for

pytestmark = pytest.mark.slurm


def test_a_pending_20_task_array_is_20_tasks_of_demand_in_plan(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, _proxy = make_cluster(pools=[PoolSpec("gpu-spot", "spot-", 2)])
    blocker = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "-t", "30",
                       "--wrap", "sleep 600")
    c.wait_job(blocker, {"RUNNING"}, 150)  # the capped pool is full
    arr = c.sbatch("--array=0-19", "--gres=gpu:8", "-p", "gpu-spot", "-t", "60",
                   "--wrap", "sleep 1")
    lines = wait_for("the array pending for resources", lambda: [
        ln for ln in c.slurm("squeue", "-h", "-t", "PENDING", "-O",
                             "JobID:|,ArrayTaskID:|,Reason:|").splitlines()
        if ln.startswith(f"{arr}|") and ("Resources|" in ln or "Priority|" in ln)], 60)
    assert lines == [f"{arr}|0-19|{lines[0].split('|')[2]}|"]  # one line for 20 tasks

    def plan_with_demand(*args: str) -> dict | None:
        p = json.loads(c.cli(*args).stdout)
        return p if p["pools"]["gpu-spot"]["pending_jobs"] else None

    # the running daemon's plan (of its first pass that saw the array), then one made now
    for args in (("plan", "--json"), ("plan", "--json", "--live")):
        plan = wait_for(" ".join(args), lambda a=args: plan_with_demand(*a), 30)
        assert plan["source"] == ("live" if "--live" in args else "daemon"), plan["source"]
        d = plan["pools"]["gpu-spot"]
        assert d["pending_jobs"] == 20, d
        assert d["pending_gpu_hours"] == 20 * 8 * 1.0, d  # 20 tasks x 8 GPUs x 60 min
