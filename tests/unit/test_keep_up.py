"""The keep-up pass: the nodes slurmscale keeps idle on purpose go into SuspendExcNodes where
Slurm can change it at run time (23.02+), and come out when no longer kept; the admin's part
of the list is never touched; 22.05 (no run-time change) is left alone."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from slurmscale.config_file import parse_config
from slurmscale.daemon.passes.capacity import CapacityPass
from slurmscale.daemon.passes.keep_up import KeepUpPass, kept_up
from slurmscale.hostlists import compress
from slurmscale.model import SlurmNode
from slurmscale.policy.reservations import Hold
from slurmscale.store.repo import Store
from tests.support.fakes import FakeSlurm, pass_context
from tests.unit.conftest import base_config

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _idle_since(name: str, t: datetime) -> SlurmNode:
    busy = t.astimezone().replace(tzinfo=None).isoformat(timespec="seconds")
    return SlurmNode(name, "IDLE+CLOUD", "127.0.0.1", name, last_busy=busy)


def _world(tmp_path, suspend_exc: str | None):  # type: ignore[no-untyped-def]
    d = base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}")
    d["pools"][0]["min_nodes"] = 2
    cfg = parse_config(d)
    store = Store(cfg.store_url)
    store.upgrade()
    long_ago = T0 - timedelta(hours=3)  # idle far past max_idle_s
    slurm = FakeSlurm(table={n.name: n for n in [
        _idle_since("spot-1", long_ago), _idle_since("spot-2", long_ago),
        _idle_since("spot-3", long_ago)]}, suspend_exc=suspend_exc)
    events: list[tuple[str, str]] = []

    def event(kind: str, msg: str, **_: object) -> None:
        events.append((kind, msg))
    ctx = pass_context(cfg, store, slurm, event)
    return CapacityPass(ctx), KeepUpPass(ctx), slurm, events


def test_min_nodes_are_kept_up_and_the_admins_part_stays(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cp, keep, slurm, events = _world(tmp_path, "login[1-2],spot-[7-8]:1")
    p = cp.run(T0)
    assert p is not None
    # one of three idle nodes released, two kept by min_nodes: the plan says so
    kept = [a for a in p.capacity.actions if a.kind.value == "keep"]
    assert kept and kept[0].lasting and "min_nodes" in kept[0].reason
    assert kept_up(p) == set(kept[0].nodes) and len(kept[0].nodes) == 2
    keep.run(p)
    assert slurm.suspend_exc == f"login[1-2],spot-[7-8]:1,{compress(kept[0].nodes)}"
    assert [k for k, _ in events if k == "suspend_exclusions_set"] == ["suspend_exclusions_set"]
    writes = len([c for c in slurm.calls if c[0] == "suspend_exc"])
    keep.run(p)  # nothing changed: nothing written
    assert len([c for c in slurm.calls if c[0] == "suspend_exc"]) == writes
    # the nodes no longer kept (say the admin lowered min_nodes): taken out again
    keep.run(replace(p, capacity=replace(p.capacity, actions=())))
    assert slurm.suspend_exc == "login[1-2],spot-[7-8]:1"


def test_a_holds_nodes_are_kept_up(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cp, keep, slurm, _ = _world(tmp_path, "")
    p = cp.run(T0)
    assert p is not None
    hold = Hold("slurmscale-gang-7", "gpu-spot", "7", "alice", 4, ("spot-5", "spot-6"), 0.0)
    p = replace(p, capacity=replace(p.capacity, actions=()),
                holds=replace(p.holds, holds=(hold,)))
    keep.run(p)
    assert slurm.suspend_exc == "spot-[5-6]"


def test_slurm_before_23_02_is_left_alone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cp, keep, slurm, events = _world(tmp_path, None)
    p = cp.run(T0)
    assert p is not None and kept_up(p)
    keep.run(p)
    assert not [c for c in slurm.calls if c[0] == "suspend_exc"]
    assert not [k for k, _ in events if k == "suspend_exclusions_set"]
    slurm.suspend_exc = ""  # an upgraded slurmctld: not asked again at once (a read a pass)
    keep.run(p)
    assert slurm.suspend_exc == ""


def test_slurm_unreachable_is_no_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cp, keep, slurm, events = _world(tmp_path, "")
    p = cp.run(T0)
    assert p is not None
    slurm.fail = True
    keep.run(p)  # logged, retried next pass
    assert slurm.suspend_exc == ""
