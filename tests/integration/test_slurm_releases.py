"""The main scenarios on the newer Slurm releases (24.11 and 26.05, in Debian chroots built by
scripts/setup-slurm-chroot.sh): their resume-file, squeue and scontrol formats, reservation
flags and power-saving states, through the same hooks and the same adapter as on 22.05."""

from __future__ import annotations

import pytest

from tests.integration.slurm_releases import NEWER, slurm_root
from tests.integration.test_capacity import capacity_block_scenario
from tests.integration.test_elastic_loop import four_node_gang_scenario
from tests.integration.test_interruptions import spot_warning_scenario
from tests.integration.test_reservations import (
    held_node_outlives_suspend_time_scenario,
    starving_gang_scenario,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_releases]


@pytest.mark.parametrize("release", NEWER)
def test_four_node_gang(make_cluster, release: str) -> None:  # type: ignore[no-untyped-def]
    c, proxy = make_cluster(suspend_time=20, slurm_root=slurm_root(release))
    assert release in c.slurm("scontrol", "--version")
    four_node_gang_scenario(c, proxy)
    rf = [e for e in c.events() if e["kind"] == "request_received"]
    assert rf, f"the {release} resume request reached the daemon"


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
