"""The daemon's kept queue view is compared with a rebuild in the unit tests
(SLURMSCALE_CHECK_VIEW, tests/unit/conftest.py): the check itself must see a view that went
wrong, naming the job."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from slurmscale.config import Config
from slurmscale.daemon.queue.queue_view import QueueView
from slurmscale.daemon.queue.view_check import ENV, ViewDiverged, checking
from slurmscale.model import QueueJob, SlurmNode

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC).timestamp()


def test_a_kept_view_that_went_wrong_is_caught_naming_the_job(cfg: Config) -> None:
    assert checking(), f"{ENV} is on in the unit tests"
    local = datetime.fromtimestamp(T0 - 60).isoformat(timespec="seconds")
    jobs = [QueueJob("5", ("gpu-spot",), 2, 8, 3600, local, "Resources", 100, "u", "PENDING")]
    nodes = [SlurmNode("spot-1", "IDLE+CLOUD+POWERED_DOWN", "spot-1", "spot-1")]
    view = QueueView()
    first = view.read(cfg, nodes, jobs, T0).snapshot
    assert [j.nodes for j in first.jobs] == [2]
    view.read(cfg, nodes, jobs, T0 + 10)  # unchanged: the memo answers
    (kept,) = first.jobs  # a memo edited as a shortcut might get it wrong
    view._jobs.give("5", kept._replace(nodes=3))
    with pytest.raises(ViewDiverged, match="job 5: the kept view has .*nodes=3"):
        view.read(cfg, nodes, jobs, T0 + 20)
