"""The Slurm adapter's per-tick reads on the real Slurm versions: fixed-field squeue and
`scontrol show node -o`, parsed by the same code the daemon uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

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
    hook.chmod(0o755)
    # the hooks' Python under a home SlurmUser may not enter (pyenv under /root): every mode
    # bit on the hooks is right, only running them as SlurmUser shows it (exit 126)
    home = c.root / "root-home"
    home.mkdir(mode=0o700)
    (home / "python3").symlink_to(sys.executable)
    env_file = c.root / "hooks" / "hooks.env"
    good = env_file.read_text()
    env_file.write_text(good.replace(f"SLURMSCALE_PYTHON={sys.executable}",
                                     f"SLURMSCALE_PYTHON={home / 'python3'}"))
    chk = c.cli("check", "--json")
    assert chk.returncode == 1, chk.stdout + chk.stderr
    runs = [p["message"] for p in json.loads(chk.stdout)["problems"] if p["code"] == "hook_run"]
    assert len(runs) == 3 and "exit 126" in runs[0] and "cannot start the Python" in runs[0]
    env_file.write_text(good)

    # AWS problems are errors, not warnings: a template version EC2 does not have, and no
    # credentials at all (before: a WARNING and exit 0 for the first, exit 0 for the second)
    data = yaml.safe_load(c.cfg_path.read_text())
    data["pools"][0]["launch_template"]["version"] = "9"
    c.cfg_path.write_text(yaml.safe_dump(data, sort_keys=False))
    chk = c.cli("check")
    assert chk.returncode == 1, chk.stdout + chk.stderr
    assert "ERROR" in chk.stdout and "template_unreadable" in chk.stdout
    assert "launch template version 9 cannot be read" in chk.stdout
    data["pools"][0]["launch_template"]["version"] = "1"
    c.cfg_path.write_text(yaml.safe_dump(data, sort_keys=False))
    no_keys = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    chk = subprocess.run([sys.executable, "-m", "slurmscale", "--config", str(c.cfg_path),
                          "check", "--json"], capture_output=True, text=True, timeout=120,
                         env={**no_keys, "AWS_EC2_METADATA_DISABLED": "true",
                              "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                              "AWS_CONFIG_FILE": "/nonexistent"})
    assert chk.returncode == 1, chk.stdout + chk.stderr
    found = {p["code"]: p["message"] for p in json.loads(chk.stdout)["problems"]
             if p["severity"] == "error"}
    assert {"template_unreadable", "subnet_unreadable"} <= set(found), found
    assert "NoCredentialsError" in found["subnet_unreadable"]
