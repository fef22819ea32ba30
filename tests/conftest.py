"""Hypothesis runs derandomized in CI, so a run is reproducible; locally it explores.

A hook run in-process by a test without its own SLURMSCALE_HOOK_VIEW would keep its compiled
config view at the system's default place (/var/spool/slurmscale): every test session points
it at a directory of its own instead."""

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import settings

from slurmscale.hookview import VIEW_ENV, VIEW_NAME

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True, scope="session")
def _private_hook_view() -> Iterator[None]:
    d = tempfile.mkdtemp(prefix="ss-hookview-")
    before = os.environ.get(VIEW_ENV)
    os.environ[VIEW_ENV] = os.path.join(d, VIEW_NAME)
    yield
    if before is None:
        os.environ.pop(VIEW_ENV, None)
    else:
        os.environ[VIEW_ENV] = before
    shutil.rmtree(d, ignore_errors=True)


# The longest integration tests first. pytest-xdist hands tests out in collection order, so
# a long test collected late keeps one worker busy while the others have nothing left: the
# suite's tail. These files hold the scenarios that wait out compressed Capacity Blocks, spot
# requeues and replays (4-7 minutes each). The unit tests (seconds each) still go before
# them, on a machine not yet loaded by Slurm clusters.
LONG_FIRST = ("tests/integration/test_capacity.py", "tests/integration/test_replay.py",
              "tests/integration/test_slurm_releases.py",
              "tests/integration/test_devcluster_docker.py",
              "tests/integration/test_interruptions.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::")[0]
        if not path.startswith("tests/integration/"):
            return (0, 0)
        return (1, LONG_FIRST.index(path)) if path in LONG_FIRST else (2, 0)
    items.sort(key=rank)  # (stable: the order inside each rank is kept)
