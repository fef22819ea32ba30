"""The node image recipe run where an image is built: in a copy of the suite's Debian 13 tree
(Slurm 24.11, as a base image with Slurm's packages installed would have it). The script
keeps that slurmd (the version asked for), leaves slurmd not enabled and munged enabled,
removes the package's random munge key (or bakes the one given), installs the bootstrap and
checks that it runs; it refuses a package directory with no package. Then the local cluster
runs its Slurm from that very tree, and a 2-node gang's nodes join from it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from slurmscale.cli_node import INSTALL_PATH
from slurmscale.localcluster.cluster import REPO
from slurmscale.node_image import render_script
from tests.integration.slurm_releases import slurm_root

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_releases]


def _mounted_under(root: Path) -> list[str]:
    with open("/proc/mounts") as f:
        return [line.split()[1] for line in f
                if line.split()[1] == str(root) or line.split()[1].startswith(f"{root}/")]


def _run(image: Path, script: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chroot", str(image), "/bin/bash", f"/{script.name}"],
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env},
                          capture_output=True, text=True, timeout=300)


def test_the_recipe_makes_a_node_image_whose_nodes_join(make_cluster) -> None:  # type: ignore[no-untyped-def]
    base = Path(slurm_root("24.11"))
    version = subprocess.run(["chroot", str(base), "slurmd", "-V"], capture_output=True,
                             text=True, check=True).stdout.split()[1]
    image = Path(tempfile.mkdtemp(prefix="node-image-", dir=base.parent))
    try:
        # (not into what a cluster running beside this test mounts in the tree: its /proc
        # and /sys, its own directory and the checkout under /tmp or wherever the checkout
        # is - a copy that read them failed as they were unmounted under it)
        skip = ["./proc", "./sys", "./tmp", f"./{str(REPO).lstrip('/')}"]
        subprocess.run(f"tar -C {base} --one-file-system "
                       + " ".join(f"--exclude={x}" for x in skip)
                       + f" -cf - . | tar -C {image} -xpf -", shell=True, check=True,
                       timeout=300)  # noqa: S602
        (image / "tmp").mkdir(mode=0o1777, exist_ok=True)
        (image / "tmp").chmod(0o1777)
        script = image / "recipe.sh"
        script.write_text(render_script(version))

        empty = image / "no-packages"
        empty.mkdir()
        p = _run(image, script, SLURM_PACKAGES="/no-packages")
        assert p.returncode == 1 and "holds no .deb or .rpm" in p.stderr, p.stderr

        p = _run(image, script)
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"done: slurmd {version}" in p.stdout, p.stdout
        assert not (image / "etc/munge/munge.key").exists()
        assert not list((image / "etc/systemd/system").glob("*.wants/slurmd.service"))
        help_ = subprocess.run(["chroot", str(image), "python3", INSTALL_PATH, "--help"],
                               capture_output=True, text=True, timeout=60)
        assert help_.returncode == 0 and "--munge-key-parameter" in help_.stdout

        key = image / "site.key"
        key.write_bytes(os.urandom(1024))
        p = _run(image, script, MUNGE_KEY_FILE="/site.key")
        assert p.returncode == 0, p.stdout + p.stderr
        baked = image / "etc/munge/munge.key"
        assert baked.read_bytes() == key.read_bytes()
        assert baked.stat().st_mode & 0o777 == 0o400
        baked.unlink()  # (the local cluster brings its own munged and key)

        c, _ = make_cluster(slurm_root=str(image))
        job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 1")
        assert c.wait_job(job, {"COMPLETED"}, 240) == "COMPLETED"
        c.stop()
    finally:
        left = _mounted_under(image)
        assert not left, f"still mounted, not removed: {left}"
        shutil.rmtree(image)
