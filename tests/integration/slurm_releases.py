"""The Slurm releases the integration tests run besides the host's 22.05: each in a Debian
chroot scripts/setup-slurm-chroot.sh builds (trixie: 24.11, sid: 26.05), run through the
local cluster's `slurm_root`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROOTS = {
    "24.11": Path(os.environ.get("SLURMSCALE_TEST_CHROOT", "/var/cache/slurmscale/trixie")),
    "26.05": Path(os.environ.get("SLURMSCALE_TEST_CHROOT_SID", "/var/cache/slurmscale/sid")),
}
NEWER = tuple(CHROOTS)  # the releases beside 22.05, oldest first


def slurm_root(release: str) -> str:
    """The chroot running `release` ("22.05": the host, "/"): fails in CI when it is missing
    (.ci/run builds them), skips elsewhere."""
    if release == "22.05":
        return "/"
    path = CHROOTS[release]
    if not (path / ".slurmscale-ready").exists():
        if os.environ.get("CI"):
            pytest.fail(f"no Slurm {release} chroot at {path}: .ci/run must build it")
        pytest.skip(f"no Slurm {release} chroot at {path} (scripts/setup-slurm-chroot.sh "
                    f"{path})")
    return str(path)
