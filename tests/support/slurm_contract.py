"""What the capacity passes rely on from a `SlurmClient`, as one test both the simulated Slurm
(`sim/slurm_adapter.py`, unit tests) and real slurmctld through the CLI backend (integration
tests) must pass: the simulator is only as good as its adapter's agreement with Slurm.

Each step is a call the passes make (drain and undrain a held node, create, resize, attach and
delete a hold's reservation; create, move and delete a block pool's window reservation) and
what the next read must show.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TypeVar

import pytest

from slurmscale.model import JobPriority, PriorityWeights, QueueJob, QueueRead, SlurmNode
from slurmscale.policy.model import NodeState
from slurmscale.policy.observe import node_state, slurm_time
from slurmscale.slurm import reasons
from slurmscale.slurm.protocol import SlurmClient, SlurmError
from slurmscale.slurm.reasons import Why

T = TypeVar("T")


@dataclass
class Harness:
    slurm: SlurmClient
    down: tuple[str, str]  # two powered-down nodes of one partition
    partition: str
    job_id: str  # a pending 2-node job that may run in `partition`, not held
    user: str  # its user
    now: Callable[[], float]  # the daemon's clock (Unix seconds) as this Slurm reads it
    # its queue reads say what changed since the one before (QueueRead), as the daemon's
    # squeue parse and the simulated Slurm's do: the daemon's queue view works a pass out
    # from that account alone, so it must be exact
    tells_changes: bool = False


def check_changes(before: list[QueueJob], read: list[QueueJob]) -> None:
    """A queue read that says what changed since the read before says it exactly: the
    records not the very ones of that read (new jobs, changed lines), and that read's
    records not printed again (jobs gone, the old records of changed ones)."""
    assert isinstance(before, QueueRead) and isinstance(read, QueueRead), (before, read)
    assert read.since == before.serial and read.serial != before.serial
    assert {id(j) for j in read.changed} == {id(j) for j in read} - {id(j) for j in before}
    assert {id(j) for j in read.dropped} == {id(j) for j in before} - {id(j) for j in read}


def check_contract(h: Harness, refresh: Callable[[], None] = lambda: None) -> None:
    """`refresh`: what must happen before a read sees an update (nothing, for the simulated
    Slurm; real slurmctld answers at once too)."""
    s, (a, b) = h.slurm, h.down

    def node(name: str) -> SlurmNode:
        return _node(s, name, refresh)

    reads: list[list[QueueJob]] = []

    def job():  # type: ignore[no-untyped-def]
        refresh()
        reads.append(s.active_jobs())
        if h.tells_changes and len(reads) > 1:
            check_changes(reads[-2], reads[-1])
        (j,) = [j for j in reads[-1] if j.job_id == h.job_id]
        return j

    # powered-down cloud nodes, usable, in their partition
    for name in (a, b):
        n = node(name)
        assert node_state(n) is NodeState.POWERED_DOWN, n
        assert {"POWERED_DOWN", "CLOUD"} <= n.flags and "DRAIN" not in n.flags, n
        assert h.partition in n.partitions and reasons.drained_by_us(n) is None

    # the pending gang as squeue shows it
    j = job()
    assert (j.state, j.num_nodes, j.reservation) == ("PENDING", 2, ""), j
    assert h.partition in j.partitions and j.priority >= 1 and j.user == h.user, j
    assert j.time_limit_s is not None and j.time_limit_s > 0 and slurm_time(j.submit_time)

    # a governed pool holds a node above its target: drained with our reason, then returned
    s.drain([a], reasons.reason(Why.HELD))
    n = node(a)
    assert "DRAIN" in n.flags and reasons.drained_by_us(n) is Why.HELD, n
    assert node_state(n) is NodeState.POWERED_DOWN
    s.undrain([a])
    assert reasons.drained_by_us(node(a)) is None and "DRAIN" not in node(a).flags

    # a hold: created for the gang's user, resized, the job pointed at it, deleted
    name = "slurmscale-contract-1"
    s.create_reservation(name, [a, b], [h.user], 3600.0)
    refresh()
    (r,) = [r for r in s.reservations() if r.name == name]
    assert set(r.nodes) == {a, b} and r.users == (h.user,), r
    start, end = slurm_time(r.start_time), slurm_time(r.end_time)
    assert start is not None and end is not None and end - start == pytest.approx(3600, abs=60)
    with pytest.raises(SlurmError):
        s.create_reservation(name, [a], [h.user], 600.0)  # one name, one reservation
    s.set_reservation_nodes(name, [a])
    refresh()
    assert [r.nodes for r in s.reservations() if r.name == name] == [(a,)]
    s.set_job_reservation(h.job_id, name)
    assert job().reservation == name and job().state == "PENDING"
    with pytest.raises(SlurmError):
        s.set_job_reservation(h.job_id, "slurmscale-contract-none")
    # Slurm keeps a reservation any job points at, pending ones too: a hold given up on is
    # first taken from its job ("" clears a job's reservation)
    with pytest.raises(SlurmError):
        s.delete_reservation(name)
    s.set_job_reservation(h.job_id, "")
    j = job()
    assert (j.state, j.reservation) == ("PENDING", "") and j.priority >= 1, j
    s.delete_reservation(name)
    refresh()
    assert name not in {r.name for r in s.reservations()}
    with pytest.raises(SlurmError):
        s.delete_reservation(name)
    if h.tells_changes:  # (the job's record changed with its reservation, twice)
        assert any(j.job_id == h.job_id for r in reads[1:] for j in r.changed)
    check_windows(h, refresh)


def check_windows(h: Harness, refresh: Callable[[], None]) -> None:
    """A Capacity Block pool's closed spans as the block pass keeps them: a reservation over
    a time window, listed with its span, moved in place (its start kept when not given),
    its nodes changed; Slurm refuses a second one over any of the same nodes for
    overlapping hours (the block plan orders its edits by that rule: policy/blocks.py)."""
    s, (a, b) = h.slurm, h.down
    t0 = h.now()

    def span(name: str) -> tuple[float, float, tuple[str, ...]]:
        refresh()
        (r,) = [r for r in s.reservations() if r.name == name]
        start, end = slurm_time(r.start_time), slurm_time(r.end_time)
        assert start is not None and end is not None, r
        return start, end, tuple(sorted(r.nodes))

    def node(name: str) -> SlurmNode:
        return _node(s, name, refresh)

    w, w2 = "slurmscale-contract-window", "slurmscale-contract-window-2"
    s.create_window_reservation(w, [a, b], [h.user], t0 + 7200, t0 + 10800)
    start, end, nodes = span(w)
    assert nodes == tuple(sorted((a, b)))
    assert start == pytest.approx(t0 + 7200, abs=60) and end == pytest.approx(t0 + 10800, abs=60)
    with pytest.raises(SlurmError):  # the same hours on one of its nodes
        s.create_window_reservation(w2, [b], [h.user], t0 + 9000, t0 + 12600)
    s.update_window_reservation(w, [a, b], t0 + 3600, t0 + 14400)
    start, end, _ = span(w)
    assert start == pytest.approx(t0 + 3600, abs=60) and end == pytest.approx(t0 + 14400, abs=60)
    s.update_window_reservation(w, [a], None, t0 + 18000)  # the start left as it is
    start, end, nodes = span(w)
    assert nodes == (a,) and start == pytest.approx(t0 + 3600, abs=60)
    assert end == pytest.approx(t0 + 18000, abs=60)
    s.create_window_reservation(w2, [b], [h.user], t0 + 9000, t0 + 12600)  # b is free now
    assert span(w2)[2] == (b,)
    for name in (w, w2):
        s.delete_reservation(name)
    refresh()
    assert not {w, w2} & {r.name for r in s.reservations()}

    # a window from now (a block pool's span once its block has closed): its node shows
    # RESERVED while it lasts (slurmctld marks it at its next reservation check, within
    # seconds), and is still the powered-down node it was
    s.create_window_reservation(w, [a], [h.user], None, t0 + 3600)
    n = _settled(lambda: node(a), lambda n: "RESERVED" in n.flags)
    assert node_state(n) is NodeState.POWERED_DOWN and "RESERVED" not in node(b).flags, n
    s.delete_reservation(w)
    _settled(lambda: node(a), lambda n: "RESERVED" not in n.flags)


def _node(s: SlurmClient, name: str, refresh: Callable[[], None]) -> SlurmNode:
    """Node `name` as the next read shows it."""
    refresh()
    (n,) = [n for n in s.nodes() if n.name == name]
    return n


def _settled(read: Callable[[], T], ok: Callable[[T], bool], within_s: float = 30.0) -> T:
    """Read until `ok` holds, for up to `within_s` (a state slurmctld sets on its own
    periodic check, not at the update): the last read, asserted."""
    deadline = time.monotonic() + within_s
    got = read()
    while not ok(got) and time.monotonic() < deadline:
        time.sleep(0.5)
        got = read()
    assert ok(got), got
    return got


def check_priorities(s: SlurmClient, eligible: Mapping[str, tuple[str, ...]],
                     not_listed: Collection[str], weights: PriorityWeights) -> None:
    """`sprio` as the daemon reads it: each eligible pending job once per partition it may run
    in, with the priority squeue shows, its weighted factors summing to it (sprio prints whole
    numbers); a job waiting for its BeginTime (or held) not at all. And the age weights
    (`scontrol show config`) the standing's age lift is reckoned with."""
    assert s.priority_weights() == weights
    by_job: dict[str, list[JobPriority]] = {}
    for r in s.priorities():
        by_job.setdefault(r.job_id, []).append(r)
    queue = {j.job_id: j for j in s.pending_jobs()}
    for job, parts in eligible.items():
        got = by_job.get(job, [])
        assert sorted(r.partition for r in got) == sorted(parts), (job, got)
        for r in got:
            assert r.priority == queue[job].priority >= 1, (r, queue[job])
            assert abs(r.age + r.fairshare + r.job_size + r.partition_factor + r.qos
                       - r.priority) <= 1, r
        assert any(r.job_size > 0 for r in got), got  # the job size weight is set
    assert not set(by_job) & set(not_listed), by_job
