"""The main scenario on a current Slurm (24.11, Debian 13 chroot built by
scripts/setup-slurm-chroot.sh): new resume-file and squeue formats, same hooks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.test_capacity import capacity_block_scenario
from tests.integration.test_elastic_loop import four_node_gang_scenario

CHROOT = Path(os.environ.get("SLURMSCALE_TEST_CHROOT", "/var/cache/slurmscale/trixie"))

pytestmark = [pytest.mark.slurm, pytest.mark.slurm2411]


def _require_chroot() -> None:
    if not (CHROOT / ".slurmscale-ready").exists():
        if os.environ.get("CI"):
            pytest.fail(f"no Slurm 24.11 chroot at {CHROOT}: .ci/run must build it")
        pytest.skip(f"no Slurm 24.11 chroot at {CHROOT} (scripts/setup-slurm-chroot.sh)")


def test_four_node_gang_on_slurm_24_11(make_cluster) -> None:  # type: ignore[no-untyped-def]
    _require_chroot()
    c, proxy = make_cluster(suspend_time=20, slurm_root=str(CHROOT))
    assert "24.11" in c.slurm("scontrol", "--version")
    four_node_gang_scenario(c, proxy)
    rf = [e for e in c.events() if e["kind"] == "request_received"]
    assert rf, "the 24.11 resume request reached the daemon"


def test_a_capacity_block_on_slurm_24_11(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """The block's reservations (created ahead, moved in place) as 24.11's scontrol takes them."""
    _require_chroot()
    capacity_block_scenario(make_cluster, slurm_root=str(CHROOT))
