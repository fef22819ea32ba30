"""Real slurmctld (22.05, the CLI backend) passes the contract the simulated Slurm passes
(`tests/unit/test_sim_slurm_contract.py`): what the simulator assumes of Slurm is checked
against Slurm."""

from __future__ import annotations

import getpass

import pytest

from slurmscale.slurm.cli_backend import SlurmCLI
from tests.support.slurm_contract import Harness, check_contract

pytestmark = pytest.mark.slurm


def test_real_slurm_keeps_the_slurm_contract(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, _ = make_cluster(start_daemon=False)
    # pending, not held, and not about to power nodes up: it may begin only in an hour
    job = c.sbatch("--begin=now+1hour", "-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "-t",
                   "60", "--wrap", "true")
    assert c.cfg is not None
    check_contract(Harness(SlurmCLI(c.cfg.slurm), ("spot-1", "spot-2"), "gpu-spot", str(job),
                           getpass.getuser()))
