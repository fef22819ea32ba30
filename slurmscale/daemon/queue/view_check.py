"""The queue view checks itself: with `SLURMSCALE_CHECK_VIEW=1` every read of the daemon's
kept view (daemon/queue/queue_view.py: only the records that changed since the last pass are looked
at again) is made a second time by a fresh view and compared, and the first job, node, tally
or gang that differs raises `ViewDiverged`, naming both.

Why: the view's shortcuts (per-job memos, node views kept across passes, the demand
tallies and gang rankings kept as jobs come and go, starting over when most changed) must
give what the plain computation gives; a change that updates one and not the other gives a
daemon that decides on a queue that is not Slurm's. The unit tests and the simulator's
golden runs under pytest turn it on (tests/conftest.py, tests/unit/test_sim_golden.py); a
daemon may too, at twice the read's cost. Not compared: the reuse forecast's arrivals and
each gang's earliest backfill plan, which the kept view remembers of earlier passes as a
fresh one cannot."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from slurmscale.policy.model import Snapshot
from slurmscale.policy.reservations import GangJob

ENV = "SLURMSCALE_CHECK_VIEW"


class ViewDiverged(AssertionError):
    """The kept view and a rebuild disagree (the message names the first difference)."""


def checking() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def compare(kept: Snapshot, plain: Snapshot, kept_gangs: Sequence[GangJob] = (),
            plain_gangs: Sequence[GangJob] = ()) -> None:
    """Raise ViewDiverged at the first pending job, node view, pool tally or gang that
    differs."""
    for what, a, b, key in (
            ("job", kept.jobs, plain.jobs, "job_id"),
            ("node", kept.nodes, plain.nodes, "name"),
            ("gang", _unplanned(kept_gangs), _unplanned(plain_gangs), "job_id")):
        _first_difference(what, a, b, key)
    for what, x, y in (("tally", kept.tallies, plain.tallies),
                       ("tally of other pools' jobs", kept.near, plain.near)):
        if x != y:
            pool = next(p for p in sorted({*(x or {}), *(y or {})})
                        if (x or {}).get(p) != (y or {}).get(p))
            raise ViewDiverged(f"{what} of pool {pool}: the kept view has "
                               f"{(x or {}).get(pool)!r}, a rebuild {(y or {}).get(pool)!r}")


def _unplanned(gangs: Sequence[GangJob]) -> tuple[GangJob, ...]:
    return tuple(g._replace(first_expected_s=None) for g in gangs)


def _first_difference(what: str, a: Sequence[Any], b: Sequence[Any], key: str) -> None:
    if tuple(a) == tuple(b):
        return
    for x, y in zip(a, b, strict=False):
        if x != y:
            raise ViewDiverged(f"{what} {getattr(x, key)}: the kept view has {x!r}, a "
                               f"rebuild {y!r}")
    raise ViewDiverged(f"{len(a)} {what}s in the kept view, {len(b)} in a rebuild (first "
                       f"extra: {(a[len(b):] or b[len(a):])[0]!r})")
