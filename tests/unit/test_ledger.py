"""The ledger behind reports and metrics: job starts and ends, and a sample a minute."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from slurmscale.daemon.ledger import Ledger
from slurmscale.model import QueueJob, SlurmNode
from slurmscale.policy.observe import build_snapshot
from slurmscale.store.repo import Store

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
        return ledger.observe(build_snapshot(cfg, nodes, js, at.timestamp()), js, at)

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
