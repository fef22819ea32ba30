"""Integration fixtures: a real local Slurm + moto per test, EC2 traffic through a recording,
fault-injecting proxy. Needs root and Debian's slurmctld/slurmd/munge (.ci/run installs them)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurmscale.localcluster.cluster import LocalCluster
from slurmscale.localcluster.options import ClusterOptions
from tests.support.ec2_proxy import EC2Proxy

HAVE_SLURM = shutil.which("slurmctld") is not None and os.geteuid() == 0


def _require_slurm() -> None:
    if not HAVE_SLURM:
        if os.environ.get("CI"):
            pytest.fail("CI must run the Slurm integration tests: slurmctld missing or not root")
        pytest.skip("needs root and Debian's slurmctld/slurmd/munge (run .ci/run)")


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(missing)"


@pytest.fixture
def make_cluster(request: pytest.FixtureRequest) -> Iterator[
        Callable[..., tuple[LocalCluster, EC2Proxy]]]:
    _require_slurm()
    made: list[tuple[LocalCluster, EC2Proxy, Path]] = []

    def make(**opts: object) -> tuple[LocalCluster, EC2Proxy]:
        proxy = EC2Proxy(upstream="",
                         clock_ahead_s=float(opts.get("aws_clock_ahead_s", 0))).start()  # type: ignore[arg-type]

        def via_proxy(moto_url: str) -> str:
            proxy.upstream = moto_url
            return proxy.url

        root = Path(tempfile.mkdtemp(prefix="ss-it-"))
        o = ClusterOptions(daemon_ec2_endpoint=via_proxy, **opts)  # type: ignore[arg-type]
        c = LocalCluster(root, o)
        made.append((c, proxy, root))
        c.start()
        return c, proxy

    yield make
    for c, proxy, root in made:
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            for name in ("slurmscale-daemon.log", "daemon.out", "slurmscale-hooks.log",
                         "slurmctld.log"):
                print(f"----- {name} -----\n{_tail(root / 'log' / name)}")
        c.stop()
        proxy.stop()
        if failed is not None and failed.passed:
            shutil.rmtree(root, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_call = rep  # type: ignore[attr-defined]
