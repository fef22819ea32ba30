"""Named points in launch, release, a block's close and a job's grace where a test can make
the daemon die with SIGKILL, to prove that a restart resumes correctly from what was
recorded. Inert unless the process runs with SLURMSCALE_TEST_MODE=1; SLURMSCALE_CRASH_AT
names the point."""

from __future__ import annotations

import os
import signal

POINTS = (
    "launch:before_fleet",  # the gang's intent is recorded; CreateFleet not sent
    "launch:after_fleet",  # EC2 launched the instances; nothing of them recorded
    "launch:between_fleets",  # a gang of several fleets: the first answered, the rest unsent
    "launch:after_record",  # instances recorded; not yet tagged with nodes or addressed
    "release:before_terminate",  # a suspend is being carried out; nothing terminated
    "release:after_terminate",  # instances terminated; the store still has them running
    "warm:before_start",  # a gang's warm instances tagged with its nodes; none started
    "warm:between_starts",  # a gang's first warm instance started; the others still stopped
    "block:after_requeue",  # a block's close requeued its jobs; its nodes still powered up
    "grace:after_signal",  # a job signalled before its requeue and its grace recorded; the
    # warning's message not yet deleted (it comes back), the requeue not yet due
)


def crash_point(name: str) -> None:
    if os.environ.get("SLURMSCALE_TEST_MODE") != "1":
        return
    if os.environ.get("SLURMSCALE_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
