"""The elastic loop on a real Slurm: sbatch -> ResumeProgram hook -> daemon -> one CreateFleet
per gang (moto) -> slurmd boots -> job runs -> SuspendProgram -> instances terminated."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from slurmscale.localcluster.cluster import LocalCluster
from slurmscale.localcluster.procs import wait_for
from tests.support.ec2_proxy import Fault

pytestmark = pytest.mark.slurm


def _fleet_sizes(proxy) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(c.params.get("TargetCapacitySpecification.TotalTargetCapacity", ""),
             c.params.get("SpotOptions.MinTargetCapacity",
                          c.params.get("OnDemandOptions.MinTargetCapacity", "")))
            for c in proxy.fleet_calls()]


def _no_instances_left(c: LocalCluster) -> bool:
    return not c.cluster_instances(("pending", "running", "stopping", "stopped"))


def test_four_node_gang_gets_one_fleet_runs_and_is_scaled_down(make_cluster) -> None:
    c, proxy = make_cluster(suspend_time=20, metrics=True)
    job = four_node_gang_scenario(c, proxy)
    # the job's output went to the cluster's own directory, not the caller's (a checkout)
    assert (c.root / f"slurm-{job}.out").is_file()
    # what a Prometheus scrape during the run shows: the launch and the gang's start
    text = c.scrape()
    assert ('slurmscale_launches_total{capacity_type="spot",code="",pool="gpu-spot",'
            'result="launched"} 1.0') in text
    assert 'slurmscale_gang_time_to_start_seconds_count{pool="gpu-spot"} 1.0' in text
    assert "slurmscale_leader 1.0" in text
    # each of the four launches' time to run, phase by phase, from the signals both sides
    # gave (the hook's spool time, CreateFleet, EC2's LaunchTime, the bootstrap's tag,
    # slurmd's registration, the job's start): in the metrics and in `report`
    for phase in ("resume->fleet", "boot", "tag", "checks", "slurmd", "register", "->job",
                  "sbatch->running"):
        assert ('slurmscale_launch_phase_seconds_count{kind="gang",phase="' + phase
                + '",pool="gpu-spot"} 4.0') in text, phase
    rep = json.loads(c.cli("report", "--since", "1h", "--format", "json").stdout)
    (ttr,) = rep["time_to_run"]
    figures = {f["phase"]: f for f in ttr["phases"]}
    assert (ttr["pool"], ttr["kind"], ttr["launches"]) == ("gpu-spot", "gang", 4)
    assert all(figures[ph]["n"] == 4 for ph in ("boot", "slurmd", "->job", "sbatch->running"))
    # the local cluster's boot is its agent's delay (3 s) and the bootstrap's start
    assert 2.0 <= figures["boot"]["median_s"] < 30, figures["boot"]
    assert figures["sbatch->running"]["median_s"] < 150
    print("time to run (median s): " + ", ".join(
        f"{k} {v['median_s']:.1f}" for k, v in figures.items() if v["median_s"] is not None))


def four_node_gang_scenario(c: LocalCluster, proxy) -> int:  # type: ignore[no-untyped-def]
    """sbatch -N 4 -> one CreateFleet (total = min = 4) -> four slurmd -> COMPLETED ->
    SuspendProgram after the idle time -> all four instances terminated. Returns the job."""
    t0 = time.monotonic()
    # runs for several daemon passes, so the ledger sees it RUNNING and the metrics scraped
    # below count its start (a job shorter than a tick is found later, from Slurm's ended jobs)
    job = c.sbatch("-N", "4", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 8")
    c.wait_job(job, {"RUNNING", "COMPLETED"}, 150)
    t_running = time.monotonic() - t0
    c.wait_job(job, {"COMPLETED"}, 120)

    assert _fleet_sizes(proxy) == [("4", "4")], "exactly one CreateFleet, total = min = 4"
    assert c.agent is not None
    assert sorted(n for n, _, _ in c.agent.boots()) == [f"spot-{i}" for i in range(1, 5)]
    for n in range(1, 5):
        assert c.node(f"spot-{n}").get("NodeAddr") == "127.0.0.1"
    # Slurm 23.02+ records which instance backs each node (22.05 has no such field)
    backing = {n: iid for n, iid, _ in c.agent.boots()}
    if c.release() >= (23, 2):
        for n in range(1, 5):
            rec = c.node(f"spot-{n}")
            assert (rec["InstanceId"], rec["InstanceType"]) == (backing[f"spot-{n}"],
                                                                "p5.48xlarge")

    # Idle past SuspendTime: Slurm calls SuspendProgram, the daemon terminates all four.
    wait_for("all instances terminated after scale-down", lambda: _no_instances_left(c), 150)
    terminated = c.cluster_instances(("terminated", "shutting-down"))
    assert len(terminated) == 4
    wait_for("nodes powered down in Slurm",
             lambda: all("POWERED_DOWN" in c.node(f"spot-{n}").get("State", "")
                         for n in range(1, 5)), 90)
    assert all(c.node(f"spot-{n}").get("NodeAddr") == f"spot-{n}" for n in range(1, 5))
    assert all(c.node(f"spot-{n}").get("InstanceId", "") in ("", "(null)", "N/A")
               for n in range(1, 5)), "released: no instance behind the node any more"
    kinds = [e["kind"] for e in c.events()]
    assert kinds.count("launched") == 1 and "released" in kinds

    # a powered-down node left addressed at its gone instance (as when slurmctld refused the
    # reset at release) is pointed back at its name by the daemon's upkeep; a node's address
    # from slurm.conf (spot-8 never had an instance) is left as the admin set it
    configured = c.node("spot-8").get("NodeAddr")
    c.slurm("scontrol", "update", "nodename=spot-2", "nodeaddr=127.0.0.1")
    wait_for("the stale address reset", lambda: (c.node("spot-2").get("NodeAddr"),
             c.node("spot-2").get("NodeHostName")) == ("spot-2", "spot-2"), 30)
    assert "POWERED_DOWN" in c.node("spot-2").get("State", "")
    assert [e["node"] for e in c.events() if e["kind"] == "node_address_reset"] == ["spot-2"]
    assert c.node("spot-8").get("NodeAddr") == configured
    print(f"4-node gang: sbatch -> RUNNING in {t_running:.1f}s")
    return job


def test_two_gangs_and_coalesced_singles(make_cluster) -> None:
    # (idle nodes kept up for minutes: the end of the test runs a job on one while the
    # daemon is stopped; with the default seconds a loaded machine had them all powered
    # down by then)
    c, proxy = make_cluster(min_idle=300, max_idle=600, suspend_time=900)
    # submitted held, released together: what is tested is the daemon's coalescing of one
    # resume's singles, not how fast five sbatch calls land (on a loaded machine Slurm
    # scheduled between them and called the resume program twice, 2.6 s apart)
    gangs = [c.sbatch("-H", "-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 1")
             for _ in range(2)]
    singles = [c.sbatch("-H", "-N", "1", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 1")
               for _ in range(3)]
    c.slurm("scontrol", "release", ",".join(str(j) for j in gangs + singles))
    for j in gangs + singles:
        c.wait_job(j, {"COMPLETED"}, 240)
    sizes = sorted(_fleet_sizes(proxy))
    assert sizes == [("2", "2"), ("2", "2"), ("3", "1")], sizes
    launched = [e for e in c.events() if e["kind"] == "launch_requested"]
    assert sum("batch of single nodes" in e["message"] for e in launched) == 1

    def report_counts() -> dict[str, int]:
        p = c.cli("report", "--since", "1h", "--format", "json")
        assert p.returncode == 0, p.stderr
        return {w["size"]: w["jobs"] for w in json.loads(p.stdout)["waits"]}
    wait_for("the report to count all five jobs",
             lambda: sum(report_counts().values()) == 5, 30)

    # a job that starts and ends where no pass sees it running (here: while the daemon
    # restarts) still counts, found among the jobs Slurm lists after their end
    c.stop_daemon()
    up = next(n for n in (f"spot-{i}" for i in range(1, 9))
              if c.node(n).get("State", "").startswith("IDLE")
              and "POWER" not in c.node(n).get("State", ""))
    quick = c.sbatch("-N", "1", "--gres=gpu:8", "-p", "gpu-spot", "-w", up, "--wrap", "true")
    assert c.wait_job(quick, {"COMPLETED"}, 60) == "COMPLETED"
    c.start_daemon()
    wait_for("the report to count the job that ran unseen",
             lambda: sum(report_counts().values()) == 6, 30)
    assert report_counts()["1 node"] == 4, report_counts()


def test_partial_capacity_rolls_back_the_whole_gang(make_cluster) -> None:
    c, proxy = make_cluster()
    proxy.faults.append(Fault("CreateFleet", "partial", keep=2))
    job = c.sbatch("-N", "4", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 1")

    def requeued() -> bool:
        j = c.job(job)
        return j.get("JobState") == "PENDING" and j.get("Restarts") == "1"
    wait_for("job requeued once", requeued, 90)
    assert len(proxy.fleet_calls()) == 1
    # moto launched four; EC2's answer listed two; all four must be gone.
    wait_for("no instance of the failed gang left", lambda: _no_instances_left(c), 30)
    assert len(c.cluster_instances(("terminated", "shutting-down"))) == 4
    # The nodes end powered down and held by the pool's capacity backoff (180 s), its reason
    # on each. Not read at one moment: Slurm drops the launch error's reason as it powers a
    # node down (a CI run read it empty between the suspend hook and the daemon's next pass,
    # which drains the node with the backoff's), so each is waited for.
    for n in range(1, 5):
        def held(name: str = f"spot-{n}") -> bool:
            node = c.node(name)
            return ("POWER" in node["State"]
                    and "no capacity in this pool" in node.get("Reason", ""))
        wait_for(f"spot-{n} held by the pool's capacity backoff", held, 30)
    reasons = [e["message"] for e in c.events() if e["kind"] == "nodes_powered_down"]
    assert reasons and "InsufficientInstanceCapacity" in reasons[0]
    assert c.job(job)["JobState"] != "FAILED"
    c.slurm("scancel", str(job))


def _run_hook_like_slurm(c: LocalCluster, kind: str, hostlist: str,
                         resume_file: Path | None = None) -> tuple[int, float]:
    """Run the installed hook as slurmctld does: as SlurmUser, no PATH, closed stdio."""
    env = {"SLURM_CONF": str(c.conf)}
    if resume_file is not None:
        env["SLURM_RESUME_FILE"] = str(resume_file)
        os.chmod(resume_file, 0o644)  # (slurmctld's own file is readable by SlurmUser)
    t0 = time.monotonic()
    p = subprocess.run([*c.as_slurm_user(), str(c.root / "hooks" / f"slurmscale-{kind}"),
                        hostlist], env=env,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30)
    return p.returncode, time.monotonic() - t0


def test_hook_records_while_daemon_is_down_and_job_runs_later(make_cluster) -> None:
    c, proxy = make_cluster()
    c.stop_daemon()
    job = c.sbatch("-N", "1", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 1")
    hook_log = c.root / "log" / "slurmscale-hooks.log"
    wait_for("resume hook to record the request",
             lambda: hook_log.exists() and "daemon not reachable" in hook_log.read_text(), 60)
    spooled = list((c.root / "slurmscale" / "spool" / "incoming").glob("*.json"))
    assert len(spooled) == 1
    assert proxy.fleet_calls() == []
    rc, seconds = _run_hook_like_slurm(c, "suspend", "od-2")  # harmless: od-2 has nothing
    # a hang (waiting on the dead daemon) fails this; the speed itself is benchmarked
    # (tests/benchmarks/hook_latency.py), not asserted under a loaded test machine
    assert rc == 0 and seconds < 5.0, (rc, seconds)
    assert "exit status" not in (c.root / "log" / "slurmctld.log").read_text()
    c.start_daemon()
    c.wait_job(job, {"COMPLETED"}, 180)
    assert len(proxy.fleet_calls()) == 1


def test_resume_hook_run_twice_launches_once(make_cluster) -> None:
    c, proxy = make_cluster()
    c.stop_daemon()
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 20")
    incoming = c.root / "slurmscale" / "spool" / "incoming"
    wait_for("Slurm's resume request in the spool", lambda: list(incoming.glob("*.json")), 60)
    first = json.loads(next(incoming.glob("*.json")).read_text())
    copy = c.root / "resume-copy.json"
    copy.write_text(first["resume_file"])
    # The same request again (Slurm retrying, an admin re-running the hook) before the
    # daemon is back...
    assert _run_hook_like_slurm(c, "resume", first["hostlist"], copy)[0] == 0
    c.start_daemon()
    c.wait_job(job, {"RUNNING"}, 150)
    # ...and once more while the nodes are up.
    assert _run_hook_like_slurm(c, "resume", first["hostlist"], copy)[0] == 0
    wait_for("third request processed",
             lambda: any(e["kind"] == "resume_skipped" for e in c.events()), 30)
    assert _fleet_sizes(proxy) == [("2", "2")]
    assert len(c.cluster_instances(("pending", "running", "terminated",
                                    "shutting-down"))) == 2
    c.slurm("scancel", str(job))
