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
