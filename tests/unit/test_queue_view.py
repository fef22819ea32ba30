"""The queue observed incrementally (issue 44): the daemon's QueueView and the squeue parse's
line memo give, pass after pass, exactly what a rebuild from scratch gives, whatever changed
between passes (jobs arriving, leaving, changing state, priority or reason, requeued by
slurmscale, throttled arrays, running jobs moving)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmscale.config_file import parse_config
from slurmscale.daemon.observe import QueueView, build_snapshot, gang_jobs
from slurmscale.model import QueueJob, SlurmNode
from slurmscale.slurm.kv import SQUEUE_FIELDS, LineMemo, parse_squeue_fixed
from tests.unit.conftest import base_config

NOW = datetime(2026, 11, 29, 12, 0).timestamp()
NODES = [SlurmNode(f"spot-{i}", "ALLOCATED+CLOUD" if i <= 4 else "IDLE+CLOUD", f"spot-{i}",
                   f"spot-{i}", last_busy="2026-11-29T11:40:00") for i in range(1, 9)]

change = st.sampled_from(["same", "same", "same", "prio", "reason", "run", "gone", "submit",
                          "requeued", "throttle"])


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
    return j


NODE_STATES = ("ALLOCATED+CLOUD", "IDLE+CLOUD", "IDLE+CLOUD+POWERED_DOWN", "MIXED+CLOUD+DRAIN")


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(change, min_size=12, max_size=12), min_size=1, max_size=6),
       st.integers(0, 3),
       st.lists(st.tuples(st.integers(0, 7), st.sampled_from(NODE_STATES),
                          st.sampled_from([frozenset(), frozenset({"spot-1"})])),
                min_size=6, max_size=6))
def test_the_view_kept_across_passes_gives_what_a_rebuild_gives(
        passes: list[list[str]], arrivals: int,
        node_changes: list[tuple[int, str, frozenset[str]]]) -> None:
    cfg = parse_config(base_config())
    kept, rebuilt = QueueView(), QueueView()
    queue = [job(i) for i in range(12)]
    nodes = list(NODES)
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
        a = build_snapshot(cfg, nodes, queue, now, view=kept, requeued=requeued, paid=paid)
        b = build_snapshot(cfg, nodes, queue, now, view=rebuilt, requeued=requeued, paid=paid)
        assert a == b
        assert kept.arrivals == rebuilt.arrivals
        also = frozenset(j.job_id for j in queue[:2])
        assert gang_jobs(cfg, queue, 2, also, kept) == gang_jobs(cfg, queue, 2, also)


def test_an_unchanged_job_is_not_looked_at_again() -> None:
    """The view's point: the second pass over the same records reuses each job's demand
    (the very object), and a changed record is read afresh."""
    cfg = parse_config(base_config())
    view = QueueView()
    queue = [job(i) for i in range(8)]
    first = build_snapshot(cfg, NODES, queue, NOW, view=view)
    queue[0] = changed(queue[0], "prio")
    second = build_snapshot(cfg, NODES, queue, NOW + 60, view=view)
    same = [a is b for a, b in zip(first.jobs, second.jobs, strict=True)]
    assert same[0] is False and all(same[1:])
    assert second.jobs[0].priority == first.jobs[0].priority + 7


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
    # only the last read's lines are kept: a queue that shrinks lets go of the rest
    parse_squeue_fixed([line(3, 30)], memo)
    assert list(memo.last) == [line(3, 30)]


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
