"""Real slurmctld (22.05, the CLI backend) passes the contract the simulated Slurm passes
(`tests/unit/test_sim_slurm_contract.py`): what the simulator assumes of Slurm is checked
against Slurm."""

from __future__ import annotations

import getpass

import pytest

from slurmscale import timeframe
from slurmscale.model import PriorityWeights
from slurmscale.slurm.cli_backend import SlurmCLI
from tests.support.slurm_contract import Harness, check_contract, check_priorities

pytestmark = pytest.mark.slurm


def test_real_slurm_keeps_the_slurm_contract(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, _ = make_cluster(start_daemon=False)
    # pending, not held, and not about to power nodes up: it may begin only in an hour
    job = c.sbatch("--begin=now+1hour", "-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "-t",
                   "60", "--wrap", "true")
    assert c.cfg is not None
    # (the daemon's client: it remembers the last read's lines, and says what changed)
    check_contract(Harness(SlurmCLI(c.cfg.slurm, remember=True), ("spot-1", "spot-2"),
                           "gpu-spot", str(job), getpass.getuser(),
                           lambda: timeframe.FRAME.now(), tells_changes=True))


def test_real_slurm_lists_eligible_pending_jobs_priority_factors(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """What sprio gives the daemon (issue 16 reads it): a line per eligible pending job and
    partition, none for a job waiting for its BeginTime or held. (Without slurmdbd Slurm
    ignores the age weight: the job size factor carries the priority here.)"""
    c, _ = make_cluster(start_daemon=False, slurm_conf_extra=(
        "PriorityWeightAge=1000", "PriorityWeightJobSize=1000", "PriorityMaxAge=1-0"))
    assert c.cfg is not None
    slurm = SlurmCLI(c.cfg.slurm)
    slurm.drain([n.name for n in slurm.nodes()], "the jobs stay pending")
    gang = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "-t", "60", "--wrap", "true")
    both = c.sbatch("-N", "1", "--gres=gpu:8", "-p", "gpu-spot,gpu-od", "-t", "60", "--wrap",
                    "true")
    later = c.sbatch("--begin=now+1hour", "-N", "1", "--gres=gpu:8", "-p", "gpu-spot", "-t",
                     "60", "--wrap", "true")
    held = c.sbatch("--hold", "-N", "1", "--gres=gpu:8", "-p", "gpu-spot", "-t", "60",
                    "--wrap", "true")
    check_priorities(slurm, {str(gang): ("gpu-spot",), str(both): ("gpu-spot", "gpu-od")},
                     {str(later), str(held)}, PriorityWeights(1000.0, 86400.0))
