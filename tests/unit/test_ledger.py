"""The ledger behind reports and metrics: job starts and ends, and a sample a minute."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmscale.daemon.passes.ledger import Ledger, pools_now
from slurmscale.daemon.queue.queue_view import build_snapshot
from slurmscale.model import QueueJob, QueueRead, SlurmNode
from slurmscale.store.repo import Store
from slurmscale.store.rows import utc

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _job(jid: str, state: str, nodes: int = 2) -> QueueJob:
    local = datetime.fromtimestamp(T0.timestamp()).isoformat(timespec="seconds")
    later = datetime.fromtimestamp(T0.timestamp() + 300).isoformat(timespec="seconds")
    return QueueJob(jid, ("gpu-spot",), nodes, 8, 3600, local, "Resources", 100, "alice",
                    state, start_time=later if state == "RUNNING" else "",
                    nodelist="spot-[1-2]" if state == "RUNNING" else "")


def test_starts_ends_and_samples(cfg) -> None:  # type: ignore[no-untyped-def]
    store = Store(cfg.store_url)
    store.upgrade()
    seen: list[tuple[str, int, float]] = []
    ledger = Ledger(cfg, store, lambda *a: seen.append(a))
    nodes = [SlurmNode("spot-1", "ALLOCATED+CLOUD", "a", "a"),
             SlurmNode("spot-2", "ALLOCATED+CLOUD", "a", "a"),
             SlurmNode("spot-3", "IDLE+CLOUD+POWERED_DOWN", "a", "a")]
    jobs = [_job("1", "RUNNING"), _job("2", "PENDING", 4)]

    def observe(at: datetime, js: list[QueueJob]):  # type: ignore[no-untyped-def]
        snap = build_snapshot(cfg, nodes, js, at.timestamp())
        ledger.observe(snap, js, at)
        return pools_now(snap)

    now = observe(T0 + timedelta(seconds=310), jobs)
    spot = next(p for p in now if p.pool == "gpu-spot")
    assert (spot.nodes_up, spot.nodes_busy, spot.pending_gpus, spot.pending_gangs) == (
        2, 2, 32, 1)
    assert spot.pending_gpu_hours == 32.0
    assert seen == [("gpu-spot", 2, 300.0)], "Slurm's StartTime, not the pass's clock"
    observe(T0 + timedelta(seconds=320), jobs)  # seen again: not recorded twice
    observe(T0 + timedelta(seconds=400), [jobs[1]])  # job 1 gone from the queue: ended
    (row,) = store.jobs(T0, T0 + timedelta(hours=1))
    assert row.ended_at is not None and len(seen) == 1
    samples = store.samples(T0, T0 + timedelta(hours=1))
    assert len({s.at for s in samples}) == 2, "one sample a minute (310 s and 400 s)"
    # a restarted daemon knows which jobs it saw running
    assert Ledger(cfg, store).store.running_job_ids() == set()
    store.close()


def test_a_job_that_ran_between_two_passes_is_recorded_from_slurms_ended_jobs(cfg) -> None:  # type: ignore[no-untyped-def]
    store = Store(cfg.store_url)
    store.upgrade()
    seen: list[tuple[str, int, float]] = []

    def at(s: float) -> str:
        return datetime.fromtimestamp(T0.timestamp() + s).isoformat(timespec="seconds")

    def ended(jid: str, state: str) -> QueueJob:
        return QueueJob(jid, ("gpu-spot",), 1, 8, 3600, at(0), "None", 100, "bob", state,
                        end_time=at(130), nodelist="spot-3", start_time=at(120))

    slurm_ended = [ended("7", "COMPLETED"), ended("8", "CANCELLED"), ended("9", "FAILED")]
    ledger = Ledger(cfg, store, lambda *a: seen.append(a), lambda: slurm_ended)
    nodes = [SlurmNode("spot-3", "IDLE+CLOUD", "a", "a")]

    def observe(s: float) -> None:
        ledger.observe(build_snapshot(cfg, nodes, [], T0.timestamp() + s), [],
                       T0 + timedelta(seconds=s))

    observe(200)
    rows = {r.job_id: r for r in store.jobs(T0, T0 + timedelta(hours=1))}
    assert set(rows) == {"7", "9"}, "a job cancelled before it was seen running did not start"
    assert utc(rows["7"].started_at) == T0 + timedelta(seconds=120), "Slurm's times"
    assert utc(rows["7"].ended_at) == T0 + timedelta(seconds=130)
    assert seen == [("gpu-spot", 1, 120.0), ("gpu-spot", 1, 120.0)]
    observe(300)  # a minute on, Slurm still lists them: nothing recorded twice
    assert len(seen) == 2
    # a restarted daemon reads them again: the store keeps one row each
    Ledger(cfg, store, lambda *a: seen.append(a), lambda: slurm_ended).observe(
        build_snapshot(cfg, nodes, [], T0.timestamp() + 400), [], T0 + timedelta(seconds=400))
    assert len(seen) == 2 and len(store.jobs(T0, T0 + timedelta(hours=1))) == 2
    store.close()


def test_a_job_gone_unseen_is_looked_up_at_once_not_a_minute_later(cfg) -> None:  # type: ignore[no-untyped-def]
    store = Store(cfg.store_url)
    store.upgrade()
    reads: list[int] = []
    slurm_ended: list[QueueJob] = []

    def ended_jobs() -> list[QueueJob]:
        reads.append(1)
        return list(slurm_ended)

    ledger = Ledger(cfg, store, None, ended_jobs)
    nodes = [SlurmNode("spot-1", "IDLE+CLOUD", "a", "a")]

    def observe(s: float, js: list[QueueJob]) -> None:
        ledger.observe(build_snapshot(cfg, nodes, js, T0.timestamp() + s), js,
                       T0 + timedelta(seconds=s))

    observe(0, [_job("5", "PENDING", 1)])  # the first pass samples (and reads)
    observe(5, [_job("5", "PENDING", 1)])
    assert len(reads) == 1, "nothing gone: no extra squeue"
    ran = datetime.fromtimestamp(T0.timestamp() + 7).isoformat(timespec="seconds")
    slurm_ended.append(_job("5", "COMPLETED", 1)._replace(
        start_time=ran, end_time=ran, nodelist="spot-1"))
    observe(10, [])  # it ran between the passes
    assert len(reads) == 2
    (row,) = store.jobs(T0, T0 + timedelta(hours=1))
    assert row.job_id == "5" and utc(row.started_at) == T0 + timedelta(seconds=7)
    # users cancelling pending jobs: at most one extra squeue every 10 s, none missed
    observe(12, [_job("6", "PENDING", 1)])
    observe(14, [])
    assert len(reads) == 2, "read 4 s ago"
    observe(20, [])
    assert len(reads) == 3, "the job gone at 14 s is looked up once 10 s have passed"
    store.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(1, 8), st.sampled_from(
    ["PENDING", "RUNNING", "RUNNING", "gone"])), max_size=8), min_size=1, max_size=8),
       st.lists(st.booleans(), min_size=8, max_size=8))
def test_the_ledger_from_the_reads_change_records_what_it_records_from_a_walk(
        steps: list[list[tuple[int, str]]], told: list[bool]) -> None:
    """Issue 44: a read that says what changed since the one before (QueueRead) is worked
    out from the change alone. Two ledgers over the same passes, one given the plain
    records (a walk of every record) and one the reads with their change (some passes a
    read that does not follow: a walk again): the same starts, the same ends, at the same
    passes, and the same extra reads of Slurm's ended jobs."""
    from slurmscale.config_file import parse_config
    from slurmscale.store.memory import MemoryStore
    from tests.unit.conftest import base_config

    cfg = parse_config(base_config())
    stores, reads = (MemoryStore(), MemoryStore()), ([0], [0])
    ledgers = [Ledger(cfg, s, None, lambda r=r: r.append(1) or [])  # type: ignore[func-returns-value]
               for s, r in zip(stores, reads, strict=True)]
    states: dict[str, str] = {}
    records: dict[str, QueueJob] = {}
    before: QueueRead | None = None
    for i, step in enumerate(steps):
        for jid, state in step:
            states[str(jid)] = state
        queue = []
        for jid, state in sorted(states.items()):
            if state == "gone":
                continue
            rec = records.get(jid)
            if rec is None or rec.state != state:  # a changed line: a new record
                rec = records[jid] = _job(jid, state)
            queue.append(rec)
        for jid in [j for j, s in states.items() if s == "gone"]:
            records.pop(jid, None)
        now = T0 + timedelta(seconds=400 + 5 * i)
        serial = 100 + i
        if before is not None and told[i % len(told)]:
            mine, theirs = {id(j) for j in queue}, {id(j) for j in before}
            read = QueueRead(queue, serial, before.serial,
                             [j for j in queue if id(j) not in theirs],
                             [j for j in before if id(j) not in mine])
        else:
            read = QueueRead(queue, serial)  # (no change known: a walk)
        snap = build_snapshot(cfg, [], queue, now.timestamp())
        ledgers[0].observe(snap, list(queue), now)
        ledgers[1].observe(snap, read, now)
        before = read
        a, b = stores
        assert a.running_job_ids() == b.running_job_ids(), f"pass {i}"
        assert {r.job_id: r.ended_at for r in a._jobs.values()} == {
            r.job_id: r.ended_at for r in b._jobs.values()}, f"pass {i}"
        assert reads[0] == reads[1]


def test_a_pass_the_store_refused_is_walked_again_and_no_end_is_lost() -> None:
    """A read's change says a job left only once: a pass whose store write failed is
    followed by a walk of the whole queue, so the job's end is still recorded."""
    from slurmscale.config_file import parse_config
    from slurmscale.store.memory import MemoryStore
    from tests.unit.conftest import base_config

    class Refusing(MemoryStore):
        refuse = False

        def end_jobs(self, job_ids, now):  # type: ignore[no-untyped-def]
            if self.refuse and job_ids:
                raise RuntimeError("the database went away")
            return super().end_jobs(job_ids, now)

    cfg = parse_config(base_config())
    store = Refusing()
    ledger = Ledger(cfg, store)
    first = [_job("1", "RUNNING"), _job("2", "PENDING")]
    read = QueueRead(first, 1)
    t = T0 + timedelta(seconds=400)
    ledger.observe(build_snapshot(cfg, [], first, t.timestamp()), read, t)
    assert store.running_job_ids() == {"1"}
    then = QueueRead(first[1:], 2, 1, [], [first[0]])  # job 1 ended
    store.refuse = True
    try:
        ledger.observe(build_snapshot(cfg, [], first[1:], t.timestamp() + 10), then,
                       t + timedelta(seconds=10))
    except RuntimeError:
        pass
    store.refuse = False
    again = QueueRead(first[1:], 3, 2, [], [])  # (nothing changed since: says nothing)
    ledger.observe(build_snapshot(cfg, [], first[1:], t.timestamp() + 20), again,
                   t + timedelta(seconds=20))
    assert store.running_job_ids() == set(), "the end recorded on the walk after"


def test_a_job_is_charged_to_the_pool_whose_nodes_it_runs_on(cfg) -> None:  # type: ignore[no-untyped-def]
    """Issue 64: a spot job that fell back to on-demand (submitted to both partitions, run on
    od- nodes) was charged to spot for its whole life: the report showed spot busier than it
    was provisioned and on-demand idle."""
    store = Store(cfg.store_url)
    store.upgrade()
    ledger = Ledger(cfg, store)
    local = datetime.fromtimestamp(T0.timestamp()).isoformat(timespec="seconds")
    fell_back = QueueJob("7", ("gpu-spot", "gpu-od"), 2, 8, 3600, local, "None", 100, "bob",
                         "RUNNING", start_time=local, nodelist="od-[1-2]")
    nodes = [SlurmNode("od-1", "ALLOCATED+CLOUD", "a", "a"),
             SlurmNode("od-2", "ALLOCATED+CLOUD", "a", "a")]
    at = T0 + timedelta(seconds=60)
    ledger.observe(build_snapshot(cfg, nodes, [fell_back], at.timestamp()), [fell_back], at)
    (row,) = store.jobs(T0 - timedelta(hours=1), T0 + timedelta(hours=1))
    assert row.pool == "gpu-od"
    store.close()
