"""The daemon's capacity pass: the policy's plan carried out on (fake) Slurm, pass after pass,
with its memory in the real store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from slurmscale.config_file import parse_config
from slurmscale.daemon.passes.capacity import CapacityPass
from slurmscale.model import QueueJob, SlurmNode
from slurmscale.slurm.reasons import Why
from slurmscale.store.repo import Store
from tests.support.fakes import FakeSlurm, pass_context
from tests.unit.conftest import base_config

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def local(t: datetime) -> str:
    """Slurm prints local time without a zone."""
    return t.astimezone().replace(tzinfo=None).isoformat(timespec="seconds")


def down(name: str) -> SlurmNode:
    return SlurmNode(name, "IDLE+CLOUD+POWERED_DOWN", name, name)


def job(job_id: str, nodes: int, submitted: datetime, reason: str = "Resources") -> QueueJob:
    return QueueJob(job_id, ("gpu-spot",), nodes, 8, 3600, local(submitted), reason, 100,
                    "alice", "PENDING")


@pytest.fixture
def governed(tmp_path):  # type: ignore[no-untyped-def]
    d = base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}")
    d["pools"][0]["policy"] = {"mode": "governed"}
    cfg = parse_config(d)
    store = Store(cfg.store_url)
    store.upgrade()
    slurm = FakeSlurm(table={n.name: n for n in
                             [down(f"spot-{i}") for i in range(1, 9)] + [down("od-1"),
                                                                         down("od-2")]})
    events: list[tuple[str, str]] = []
    cp = CapacityPass(pass_context(cfg, store, slurm,
                                   lambda kind, msg, **_: events.append((kind, msg))))
    yield cp, slurm, store, events
    store.close()


def held(slurm: FakeSlurm) -> list[str]:
    return sorted((n.name for n in slurm.table.values()
                   if "DRAIN" in n.state and n.reason.startswith(Why.HELD.value)),
                  key=lambda s: (s.split("-")[0], int(s.split("-")[1])))


def test_a_governed_pool_holds_its_nodes_and_a_gang_gets_all_four_in_one_decision(
        governed) -> None:
    cp, slurm, store, events = governed
    cp.run(T0)
    assert held(slurm) == [f"spot-{i}" for i in range(1, 9)], "target 0: every node held"
    assert store.pool_memory()["gpu-spot"].target == 0
    cp.run(T0 + timedelta(seconds=10))
    assert [c for c in slurm.calls if c[0] == "drain"] == [
        ("drain", [f"spot-{i}" for i in range(1, 9)])], "holds are not re-sent"

    slurm.queue = [job("4242", 4, T0)]
    plan = cp.run(T0 + timedelta(seconds=20))
    assert plan is not None
    assert plan.capacity.targets["gpu-spot"] == 4
    assert held(slurm) == ["spot-5", "spot-6", "spot-7", "spot-8"]
    assert ("undrain", ["spot-1", "spot-2", "spot-3", "spot-4"]) in slurm.calls
    raised = [m for k, m in events if k == "target_raised"]
    assert len(raised) == 1 and "4242 (4 nodes)" in raised[0] and "0 -> 4" in raised[0]
    assert store.pool_memory()["gpu-spot"].target == 4, "the target survives in the store"
    # The on-demand pool is immediate: never held.
    assert not any(n.startswith("od-") for n in held(slurm))


def test_idle_nodes_are_powered_down_by_slurmscale_but_an_admins_drain_is_left_alone(
        governed) -> None:
    cp, slurm, _store, events = governed
    long_ago = local(T0 - timedelta(minutes=30))
    slurm.table["od-1"] = SlurmNode("od-1", "IDLE+CLOUD", "127.0.0.1", "od-1",
                                    last_busy=long_ago)
    slurm.table["od-2"] = SlurmNode("od-2", "IDLE+DRAIN+CLOUD", "127.0.0.1", "od-2",
                                    reason="bad GPU [admin@2026-11-29T10:00:00]",
                                    last_busy=long_ago)
    slurm.table["spot-8"] = SlurmNode("spot-8", "IDLE+DRAIN+CLOUD+POWERED_DOWN", "spot-8",
                                      "spot-8", reason="maintenance [admin@x]")
    cp.run(T0)
    assert ("power_down", ["od-1"]) in slurm.calls
    assert all("od-2" not in names and "spot-8" not in names for _, names in slurm.calls)
    assert slurm.table["od-2"].reason.startswith("bad GPU")
    assert any(k == "scale_down" and "od-1" in m for k, m in events)


def test_an_unreachable_slurm_skips_the_pass_and_is_recorded_once(governed) -> None:  # type: ignore[no-untyped-def]
    cp, slurm, _store, events = governed
    slurm.fail = True
    assert cp.run(T0) is None and cp.run(T0 + timedelta(seconds=10)) is None
    assert [k for k, _ in events] == ["slurm_read_failed"]
    slurm.fail = False
    assert cp.run(T0 + timedelta(seconds=20)) is not None
    assert [k for k, _ in events][:2] == ["slurm_read_failed", "slurm_read_ok"]


def test_a_pass_that_fails_part_way_leaves_the_next_to_read_the_queue_afresh(
        governed, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The queue's view kept from pass to pass must never be left half brought up to date:
    a pass that fails after the gangs were worked out (here: the store, as the snapshot is
    built) forgets it, and the next pass plans from the whole queue again."""
    cp, slurm, store, _ = governed
    slurm.queue = [job("4242", 4, T0)]
    cp.run(T0)
    assert cp.view.kept() == {"4242"}
    slurm.queue = [job("4242", 4, T0), job("4343", 2, T0)]
    monkeypatch.setattr(store, "pool_memory", lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cp.run(T0 + timedelta(seconds=10))
    assert not cp.view.kept()
    monkeypatch.undo()
    plan = cp.run(T0 + timedelta(seconds=20))
    assert plan is not None
    assert [g.job_id for g in plan.gangs] == ["4242", "4343"]
    assert plan.capacity.demand["gpu-spot"].pending_jobs == 2
