"""The queue observed incrementally (issue 44): the daemon's QueueView and the squeue parse's
line memo give, pass after pass, exactly what a rebuild from scratch gives, whatever changed
between passes (jobs arriving, leaving, changing state, priority or reason, requeued by
slurmscale, throttled arrays, running jobs moving)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmscale.config_file import parse_config
from slurmscale.daemon.queue.knobs import hold_knobs
from slurmscale.daemon.queue.queue_view import QueueView, build_snapshot, gang_jobs
from slurmscale.model import QueueJob, QueueRead, SlurmNode
from slurmscale.policy.reservations import RankedGangs
from slurmscale.slurm import kv
from slurmscale.slurm.kv import SQUEUE_FIELDS, LineMemo, parse_squeue_fixed
from tests.unit.conftest import base_config, with_earliest_plans

NOW = datetime(2026, 11, 29, 12, 0).timestamp()
NODES = [SlurmNode(f"spot-{i}", "ALLOCATED+CLOUD" if i <= 4 else "IDLE+CLOUD", f"spot-{i}",
                   f"spot-{i}", last_busy="2026-11-29T11:40:00") for i in range(1, 9)]

change = st.sampled_from(["same", "same", "same", "prio", "reason", "run", "gone", "submit",
                          "requeued", "throttle", "sooner", "later"])


def job(i: int) -> QueueJob:
    return QueueJob(str(i), (("gpu-spot",), ("gpu-od",), ("other",), ("gpu-spot", "gpu-od"))[i % 4],
                    1 + i % 3, 8, 3600, f"2026-11-29T{10 + i % 2}:{i % 60:02d}:00", "Resources",
                    100 + i, "alice", "PENDING")


def changed(j: QueueJob, how: str) -> QueueJob:
    match how:
        case "prio":
            return j._replace(priority=j.priority + 7)
        case "reason":
            return j._replace(reason="Dependency" if j.reason == "Resources" else "Resources")
        case "run":
            n = 1 + int(j.job_id) % 8
            return j._replace(state="RUNNING", nodelist=f"spot-{n}",
                              end_time="2026-11-29T13:00:00", start_time="2026-11-29T11:00:00")
        case "submit":
            return j._replace(submit_time="Unknown")
        case "throttle":
            return j._replace(array_job="7", array_tasks=5, array_throttle=2)
        case "sooner" | "later":  # backfill's plan for it moves
            hour = 12 if how == "sooner" else 15
            return j._replace(expected_start=f"2026-11-29T{hour}:{int(j.job_id) % 60:02d}:00")
    return j


NODE_STATES = ("ALLOCATED+CLOUD", "IDLE+CLOUD", "IDLE+CLOUD+POWERED_DOWN", "MIXED+CLOUD+DRAIN")


@pytest.mark.parametrize("start_over_min", [kv.START_OVER_MIN, 0],
                         ids=["kept", "most-changed-starts-over"])
@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(change, min_size=12, max_size=12), min_size=1, max_size=6),
       st.integers(0, 3),
       st.lists(st.tuples(st.integers(0, 7), st.sampled_from(NODE_STATES),
                          st.sampled_from([frozenset(), frozenset({"spot-1"})])),
                min_size=6, max_size=6),
       st.lists(st.booleans(), min_size=6, max_size=6))
def test_the_view_kept_across_passes_gives_what_a_rebuild_gives(
        start_over_min: int, passes: list[list[str]], arrivals: int,
        node_changes: list[tuple[int, str, frozenset[str]]], plain: list[bool]) -> None:
    """Whatever changed between passes. With START_OVER_MIN at 0 (a queue of 12 jobs is
    below it), a read with most of its records changed starts the view and the line memo
    over, as a PriorityCalcPeriod does at 50,000 jobs."""
    with mock.patch.object(kv, "START_OVER_MIN", start_over_min):
        _passes(passes, arrivals, node_changes, plain)


def _passes(passes: list[list[str]], arrivals: int,
            node_changes: list[tuple[int, str, frozenset[str]]], plain: list[bool]) -> None:
    cfg = parse_config(base_config())
    kept, rebuilt, told = QueueView(), QueueView(), QueueView()
    queue = [job(i) for i in range(12)]
    nodes = list(NODES)
    read = QueueRead(queue, 1)
    plans: dict[str, float] = {}  # the earliest plans, as a rebuild keeps them
    for p, hows in enumerate(passes):
        now = NOW + 60 * p
        k, state, paid = node_changes[p]
        nodes[k] = replace(nodes[k], state=state)
        hows = hows + ["same"] * (len(queue) - len(hows))
        requeued = frozenset(j.job_id for j, h in zip(queue, hows, strict=False)
                             if h == "requeued")
        queue = [changed(j, h) for j, h in zip(queue, hows, strict=False) if h != "gone"]
        queue += [job(100 * (p + 1) + k) for k in range(arrivals)]
        # the rebuild: the same arrival log, nothing else remembered
        rebuilt.forget()
        also = frozenset(j.job_id for j in queue[:2])
        a = kept.read(cfg, nodes, queue, now, requeued=requeued, paid=paid, also=also)
        b = rebuilt.read(cfg, nodes, queue, now, requeued=requeued, paid=paid).snapshot
        assert a.snapshot == b
        assert kept.arrivals == rebuilt.arrivals
        rebuilt_gangs = with_earliest_plans(gang_jobs(cfg, queue, also), plans)
        assert a.gangs == kept.gangs(cfg, queue, also) == rebuilt_gangs
        assert kept.plans == plans
        # the same queue as the daemon's squeue read hands it over: with what changed since
        # the read before; or, now and then, a plain list (the next read's change is then
        # relative to a read this view never saw: it walks the records instead)
        read = delta_read(read, queue, p + 2)
        given = list(queue) if plain[p] else read
        t = told.read(cfg, nodes, given, now, requeued=requeued, paid=paid, also=also)
        assert t.snapshot == b
        assert told.arrivals == rebuilt.arrivals
        assert t.gangs == told.gangs(cfg, given, also) == rebuilt_gangs
        assert told.plans == plans
        # the gangs a hold could be for, ranked per pool as they came and went: as ranked
        # from scratch
        fresh = RankedGangs(hold_knobs(cfg), {q.name: q.max_nodes for q in cfg.pools},
                            rebuilt_gangs)
        for state in (a, t):
            assert {k: v for k, v in state.ranked.by_pool.items() if v} == fresh.by_pool
        # and it holds the queue's jobs, no more: a job gone is let go
        assert told.kept() == {j.job_id for j in queue}


def delta_read(before: QueueRead, queue: list[QueueJob], serial: int) -> QueueRead:
    """`queue` as a read that says what changed since `before` (by the records' identity,
    as the squeue parse's memo tells it)."""
    now, then = {id(j) for j in queue}, {id(j) for j in before}
    return QueueRead(queue, serial, before.serial, [j for j in queue if id(j) not in then],
                     [j for j in before if id(j) not in now])


def test_an_unchanged_job_is_not_looked_at_again() -> None:
    """The view's point: the second pass over the same records reuses each job's demand
    (the very object), and a changed record is read afresh."""
    cfg = parse_config(base_config())
    view = QueueView()
    queue = [job(i) for i in range(8)]
    first = view.read(cfg, NODES, queue, NOW).snapshot
    queue[0] = changed(queue[0], "prio")
    second = view.read(cfg, NODES, queue, NOW + 60).snapshot
    same = [a is b for a, b in zip(first.jobs, second.jobs, strict=True)]
    assert same[0] is False and all(same[1:])
    assert second.jobs[0].priority == first.jobs[0].priority + 7


def test_the_same_records_give_what_their_jobs_give_now() -> None:
    """The very records of last pass, in the same order, give back last pass's answer
    (`PerJob.in_order`), but not where a job gives something else on the same record: a
    job whose submit time Slurm does not give (its demand dated now) and a job slurmscale
    requeued (demand while Slurm holds it back)."""
    cfg = parse_config(base_config())
    view = QueueView()
    queue = [changed(job(0), "submit"), job(1)._replace(reason="BeginTime"), job(4)]
    read = QueueRead(queue, 1)
    first = view.read(cfg, NODES, read, NOW).snapshot
    again = delta_read(read, queue, 2)
    second = view.read(cfg, NODES, again, NOW + 60).snapshot
    assert [j.submit_s for j in second.jobs] == [NOW + 60, first.jobs[1].submit_s,
                                                 first.jobs[2].submit_s]
    assert second.jobs[2] is first.jobs[2]
    assert not second.jobs[1].actionable
    third = view.read(cfg, NODES, delta_read(again, queue, 3), NOW + 60,
                      requeued=frozenset({"1"})).snapshot
    assert third.jobs[1].actionable, "requeued by slurmscale: demand on the same record"
    assert third == build_snapshot(cfg, NODES, queue, NOW + 60, requeued=frozenset({"1"}))


def test_a_priority_calculation_moves_every_priority_and_nothing_else() -> None:
    """Each PriorityCalcPeriod every pending line changes in its priority alone: a job's
    demand is then what it was with the new priority, but not for a job whose demand hung
    on more than its record last pass (requeued by slurmscale, no submit time) or now."""
    cfg = parse_config(base_config())
    view = QueueView()
    queue = [job(i)._replace(reason="BeginTime") if i == 1 else job(i) for i in range(12)]
    queue[2] = changed(queue[2], "submit")
    read = QueueRead(queue, 1)
    view.read(cfg, NODES, read, NOW, requeued=frozenset({"1"}))
    for step, requeued in enumerate((frozenset(), frozenset({"5"}), frozenset())):
        queue = [changed(j, "prio") for j in queue]
        read = delta_read(read, queue, step + 2)
        now = NOW + 60 * (step + 1)
        got = view.read(cfg, NODES, read, now, requeued=requeued).snapshot
        assert got == build_snapshot(cfg, NODES, queue, now, requeued=requeued), f"step {step}"
    assert not {j.job_id: j for j in got.jobs}["1"].actionable, "requeued two reads ago"


def test_a_job_held_and_released_in_a_priority_calculation_counts_as_a_rebuild_says() -> None:
    """A PriorityCalcPeriod that holds a job (priority 0: `scontrol hold`) or releases it
    moves its line's priority alone, yet its demand stops or starts counting: the kept
    view gives what a rebuild gives, job by job."""
    cfg = parse_config(base_config())
    view = QueueView()
    queue = [job(i) for i in range(8)]
    read = QueueRead(queue, 1)
    view.read(cfg, NODES, read, NOW)
    for step, prio in enumerate((0, 0, 50)):
        queue = [j._replace(priority=prio) if j.job_id == "3" else changed(j, "prio")
                 for j in queue]
        read = delta_read(read, queue, step + 2)
        now = NOW + 60 * (step + 1)
        got = view.read(cfg, NODES, read, now).snapshot
        assert got == build_snapshot(cfg, NODES, queue, now), f"step {step}"
        assert {j.job_id: j for j in got.jobs}["3"].actionable is (prio > 0)

def line(i: int, prio: int) -> str:
    f = [str(i), "gpu-spot", "2", "gres:gpu:8", "1:00:00", "2026-11-29T11:00:00", "Resources",
         str(prio), "alice", "PENDING", "proj", "(null)", "N/A", "(null)", "N/A", str(i), "N/A"]
    assert len(f) == len(SQUEUE_FIELDS)
    return "|".join(f) + "|\n"


def test_a_line_printed_again_gives_back_its_record_unparsed() -> None:
    memo = LineMemo()
    first = parse_squeue_fixed([line(1, 10), line(2, 20)], memo)
    again = parse_squeue_fixed([line(1, 10), line(2, 21), line(3, 30)], memo)
    assert again[0] is first[0]
    assert again[1] is not first[1] and again[1].priority == 21
    assert again == parse_squeue_fixed([line(1, 10), line(2, 21), line(3, 30)])
    # and it says what changed since the read before: the line parsed afresh and the ones
    # no longer printed
    assert (again.since, again.changed, again.dropped) == (first.serial, again[1:],
                                                           [first[1]])
    assert parse_squeue_fixed([line(1, 10), line(2, 21), line(3, 30)], memo).changed == []
    # only the last read's lines are kept: a queue that shrinks lets go of the rest
    shrunk = parse_squeue_fixed([line(3, 30)], memo)
    assert list(memo.last) == [line(3, 30)]
    assert shrunk.changed == [] and sorted(shrunk.dropped) == sorted(again[:2])


@pytest.mark.parametrize("start_over_min", [kv.START_OVER_MIN, 0],
                         ids=["kept", "most-changed-starts-over"])
@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(1, 9), st.integers(0, 2)), max_size=9),
                min_size=1, max_size=6))
def test_each_read_against_the_memo_is_the_plain_parse_and_says_what_changed(
        start_over_min: int, reads: list[list[tuple[int, int]]]) -> None:
    """Reads of jobs 1-9 at a few priorities (one line each; a job's line changes with its
    priority; priority 2's line is one squeue prints that slurmscale cannot read): each read
    through the memo gives what the plain parse gives, and what changed since the read
    before by the records' identity; or, with START_OVER_MIN at 0 and most lines new, no
    change (the memo made afresh from the read)."""
    memo, before = LineMemo(), None
    for jobs in reads:
        text = [line(i, p) if p < 2 else f"{i}|garbled\n" for i, p in dict(jobs).items()]
        with mock.patch.object(kv, "START_OVER_MIN", start_over_min):
            read = parse_squeue_fixed(text, memo)
        assert read == parse_squeue_fixed(text)
        if before is not None and read.since is None:  # (started over)
            assert start_over_min == 0 and not read.changed and not read.dropped
            new = {id(j) for j in read} - {id(j) for j in before}
            assert len(new) > kv.START_OVER * len(read)
        elif before is not None:
            assert read.since == before.serial
            assert {id(j) for j in read.changed} == {id(j) for j in read} - {id(j) for j in before}
            assert {id(j) for j in read.dropped} == {id(j) for j in before} - {id(j) for j in read}
        assert sorted(memo.last.values()) == sorted(read)
        before = read


def test_the_daemons_slurm_client_parses_only_what_changed_and_a_command_reads_afresh(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SlurmCLI(remember=True) (the daemon's) hands back last read's record for a line
    squeue prints again; a one-shot command's client (the default) keeps nothing."""
    import os

    from slurmscale.config import SlurmSettings
    from slurmscale.slurm.cli_backend import SlurmCLI

    out = tmp_path / "queue.txt"
    squeue = tmp_path / "squeue"
    squeue.write_text(f'#!/bin/sh\nexec cat "{out}"\n')
    os.chmod(squeue, 0o755)
    settings = SlurmSettings(bin_dir=str(tmp_path))
    out.write_text(line(1, 10) + line(2, 20))
    daemons, command = SlurmCLI(settings, remember=True), SlurmCLI(settings)
    first, once = daemons.active_jobs(), command.active_jobs()
    out.write_text(line(1, 10) + line(2, 21))
    again, twice = daemons.active_jobs(), command.active_jobs()
    assert again == twice and again[1].priority == 21
    assert again[0] is first[0] and twice[0] is not once[0]
