"""The Slurm adapter's per-tick reads on the real Slurm versions: fixed-field squeue and
`scontrol show node -o`, parsed by the same code the daemon uses."""

from __future__ import annotations

import pytest

from slurmscale.slurm.cli_backend import SlurmCLI
from tests.integration.slurm_releases import slurm_root

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize("flavor", ["22.05", "24.11", "26.05"])
def test_pending_jobs_and_nodes_parse_on_real_slurm(make_cluster, flavor: str) -> None:  # type: ignore[no-untyped-def]
    c, _ = make_cluster(start_daemon=False, slurm_root=slurm_root(flavor))
    assert flavor in c.slurm("scontrol", "--version")
    held = c.sbatch("-H", "-N", "4", "--gres=gpu:8", "-p", "gpu-spot,gpu-od", "-t", "90",
                    "--wrap", "true")
    assert c.cfg is not None
    slurm = SlurmCLI(c.cfg.slurm)
    (job,) = [j for j in slurm.pending_jobs() if j.job_id == str(held)]
    assert job.num_nodes == 4 and job.gpus_per_node == 8
    assert set(job.partitions) == {"gpu-spot", "gpu-od"}
    assert job.time_limit_s == 5400 and job.state == "PENDING"
    assert job.reason.startswith("JobHeld") and job.priority == 0
    nodes = {n.name: n for n in slurm.nodes()}
    assert len(nodes) == 10
    assert "POWERED_DOWN" in nodes["spot-1"].flags and "CLOUD" in nodes["spot-1"].flags
    assert nodes["od-2"].partitions == ("gpu-od",)
    # the ended-jobs read (its state list) is accepted; a job cancelled while pending never
    # got nodes, so it is not one that ran unseen
    c.slurm("scancel", str(held))
    assert c.job(held).get("JobState") == "CANCELLED"
    assert [j.job_id for j in slurm.ended_jobs()] == []
    assert str(held) in c.slurm("squeue", "-h", "-t", "CA", "-o", "%i")

    if flavor != "22.05":
        return
    # `slurmscale check` on the same live cluster: what the local cluster renders agrees
    chk = c.cli("check")
    assert chk.returncode == 0, chk.stdout + chk.stderr
    hook = c.root / "hooks" / "slurmscale-resume"
    hook.chmod(0o644)  # a hook slurmctld cannot run
    chk = c.cli("check")
    assert chk.returncode == 1 and "hook_not_executable" in chk.stdout, chk.stdout
