"""The queue view checks itself: with `SLURMSCALE_CHECK_VIEW=1` every snapshot the daemon's
kept view builds (daemon/observe.py: only the records that changed since the last pass are
looked at again) is built a second time from nothing and compared, and the first job or node
that differs raises `ViewDiverged`, naming both.

Why: the view's shortcuts (per-job memos, the priority-only path, node views kept across
passes) are kept in step with the plain computation by hand; a change that updates one and
not the other gives a daemon that decides on a queue that is not Slurm's. The unit tests and
the simulator's golden runs under pytest turn it on (tests/conftest.py,
tests/unit/test_sim_golden.py); a daemon may too, at twice the snapshot's cost. The reuse
forecast's arrivals are not compared: the view remembers jobs that have left the queue, as
the plain computation cannot."""

from __future__ import annotations

import os

from slurmscale.policy.model import Snapshot

ENV = "SLURMSCALE_CHECK_VIEW"


class ViewDiverged(AssertionError):
    """The kept view and a rebuild disagree (the message names the first difference)."""


def checking() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def compare(kept: Snapshot, plain: Snapshot) -> None:
    """Raise ViewDiverged at the first pending job or node view that differs."""
    for what, a, b, key in (("job", kept.jobs, plain.jobs, "job_id"),
                            ("node", kept.nodes, plain.nodes, "name")):
        if a == b:
            continue
        for x, y in zip(a, b, strict=False):
            if x != y:
                raise ViewDiverged(f"{what} {getattr(x, key)}: the kept view has {x!r}, a "
                                   f"rebuild {y!r}")
        raise ViewDiverged(f"{len(a)} {what}s in the kept view, {len(b)} in a rebuild (first "
                           f"extra: {(a[len(b):] or b[len(a):])[0]!r})")
