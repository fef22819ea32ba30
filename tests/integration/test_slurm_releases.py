"""The main scenarios on the newer Slurm releases (24.11 and 26.05, in Debian chroots built by
scripts/setup-slurm-chroot.sh): their resume-file, squeue and scontrol formats, reservation
flags and power-saving states, through the same hooks and the same adapter as on 22.05."""

from __future__ import annotations

import pytest

from slurmscale.hostlists import expand
from slurmscale.localcluster.procs import wait_for
from slurmscale.slurm.cli_backend import SlurmCLI
from tests.integration.slurm_releases import NEWER, slurm_root
from tests.integration.test_capacity import capacity_block_scenario
from tests.integration.test_elastic_loop import four_node_gang_scenario
from tests.integration.test_interruptions import _instance_of, spot_warning_scenario
from tests.integration.test_reservations import (
    held_node_outlives_suspend_time_scenario,
    starving_gang_scenario,
)
from tests.support.eventbridge_messages import spot_warning

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_releases]


@pytest.mark.parametrize("release", NEWER)
def test_four_node_gang(make_cluster, release: str) -> None:  # type: ignore[no-untyped-def]
    c, proxy = make_cluster(suspend_time=20, slurm_root=slurm_root(release))
    assert release in c.slurm("scontrol", "--version")
    four_node_gang_scenario(c, proxy)
    rf = [e for e in c.events() if e["kind"] == "request_received"]
    assert rf, f"the {release} resume request reached the daemon"
    # the release's InstanceId/InstanceType updates all taken (26.05 refused a cleared list)
    refused = [line for line in (c.root / "log" / "slurmscale-daemon.log").read_text()
               .splitlines() if "instance ids of" in line]
    assert not refused, refused


@pytest.mark.parametrize("release", NEWER)
def test_a_capacity_block(make_cluster, release: str) -> None:  # type: ignore[no-untyped-def]
    """The block's reservations (created ahead, moved in place) as this scontrol takes them."""
    capacity_block_scenario(make_cluster, slurm_root=slurm_root(release))


@pytest.mark.parametrize("release", NEWER)
def test_a_hold_starts_a_starving_gang(make_cluster, release: str) -> None:  # type: ignore[no-untyped-def]
    starving_gang_scenario(make_cluster, True, slurm_root=slurm_root(release))


@pytest.mark.parametrize("release", NEWER)
def test_a_spot_warning_requeues_the_gang(make_cluster, release: str) -> None:  # type: ignore[no-untyped-def]
    spot_warning_scenario(make_cluster, slurm_root=slurm_root(release))


@pytest.mark.parametrize("release", NEWER)
def test_a_held_node_outlives_suspend_time(make_cluster, release: str) -> None:  # type: ignore[no-untyped-def]
    """23.02+: SuspendExcNodes changed at run time, so SuspendTime may be shorter than a hold."""
    held_node_outlives_suspend_time_scenario(make_cluster, slurm_root(release))


def test_a_gang_slurmscale_requeues_restarts_before_higher_priority_work_where_slurm_expedites(
        make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Issue 64: Slurm 25.11's expedited requeue (26.05 here). slurm.conf as `slurm-conf`
    renders it for this release lets jobs ask for it (SlurmctldParameters=
    enable_expedited_requeue); a gang submitted with `--requeue=expedite` that slurmscale
    requeues on a spot warning restarts before a job of higher priority that waited for the
    same nodes all along. (A plain `scontrol requeue` of such a job spares it the requeue
    delay but keeps its priority: the other job went first. A node set DOWN is what Slurm
    expedites, so slurmscale requeues such a job that way: cli_backend.requeue.)"""
    from slurmscale.localcluster.options import PoolSpec

    c, _proxy = make_cluster(slurm_root=slurm_root("26.05"),
                             pools=[PoolSpec("gpu-spot", "spot-", 2)], cred_expire=15,
                             capacity={"unavailable_ttl_s": 5, "max_unavailable_ttl_s": 10})
    running = c.slurm("scontrol", "show", "config")
    assert "enable_expedited_requeue" in running, "slurm-conf's lines lack the mode on 26.05"
    gang = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--exclusive",
                    "--requeue=expedite", "--wrap", "sleep 600")
    c.wait_job(gang, {"RUNNING"}, 150)
    rival = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--exclusive",
                     "--priority=100000", "--wrap", "sleep 600")
    wait_for("the rival pending on the gang's nodes",
             lambda: c.job(rival).get("Reason") in ("Resources", "Priority"), 30)
    assert int(c.job(rival)["Priority"]) > int(c.job(gang)["Priority"])
    victim = expand(c.job(gang)["NodeList"])[0]
    c.send_event(spot_warning(_instance_of(c, victim)))
    wait_for("the gang requeued", lambda: c.job(gang).get("Restarts") == "1", 90)
    # until its node is back, Slurm holds it EXPEDITING, which `squeue -t PD` leaves out: the
    # daemon's adapter still reads it as pending demand
    slurm = SlurmCLI(c.cfg.slurm)
    assert c.job(gang)["JobState"] == "EXPEDITING"
    assert str(gang) in [j.job_id for j in slurm.pending_jobs()]
    assert str(gang) in [j.job_id for j in slurm.active_jobs() if j.state == "PENDING"]
    c.wait_job(gang, {"RUNNING"}, 240)
    assert c.job(rival)["JobState"] == "PENDING", c.job(rival)
    assert c.job(gang)["ExpeditedRequeue"] == "Yes"
    assert "job_requeued" in [e["kind"] for e in c.events()]
    # (requeued by its node set DOWN: the node still comes back to service once powered down)
    wait_for(f"{victim} back in service", lambda: not any(
        s in c.node(victim).get("State", "") for s in ("DOWN", "DRAIN")), 120)
