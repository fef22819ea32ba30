"""Capacity errors: classification, the growing TTL, and holding a pool's nodes while it has
no capacity (fake Slurm, real store)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from slurmscale.cloud.errors import ErrorClass, classify, unavailable_ttl
from slurmscale.daemon.backoff import CapacityBackoff
from slurmscale.model import SlurmNode
from slurmscale.slurm.reasons import Why
from slurmscale.store.repo import Store
from tests.support.fakes import FakeSlurm

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("code", "cls"), [
    ("InsufficientInstanceCapacity", ErrorClass.CAPACITY),
    ("MaxSpotInstanceCountExceeded", ErrorClass.CAPACITY),
    ("VcpuLimitExceeded", ErrorClass.QUOTA),
    ("RequestLimitExceeded", ErrorClass.THROTTLE),
    ("UnauthorizedOperation", ErrorClass.CONFIG),
    ("InvalidLaunchTemplateName.NotFoundException", ErrorClass.CONFIG),
    ("InternalError", ErrorClass.TRANSIENT),
    ("EndpointConnectionError", ErrorClass.TRANSIENT),
    ("SomethingNew", ErrorClass.OTHER),
])
def test_error_codes_are_classified(code: str, cls: ErrorClass) -> None:
    assert classify(code) is cls


def test_the_ttl_doubles_with_repeats_up_to_the_cap() -> None:
    assert [unavailable_ttl(n, 180, 1800) for n in range(1, 7)] == [
        180, 360, 720, 1440, 1800, 1800]


@pytest.fixture
def world(cfg):  # type: ignore[no-untyped-def]
    store = Store(cfg.store_url)
    store.upgrade()
    slurm = FakeSlurm(table={
        "spot-1": SlurmNode("spot-1", "IDLE+CLOUD+POWERED_DOWN", "spot-1", "spot-1"),
        "spot-2": SlurmNode("spot-2", "ALLOCATED+CLOUD", "127.0.0.1", "spot-2"),
        "spot-3": SlurmNode("spot-3", "IDLE+DRAIN+CLOUD+POWERED_DOWN", "spot-3", "spot-3",
                            reason="bad PSU [admin@x]"),
        "od-1": SlurmNode("od-1", "IDLE+CLOUD+POWERED_DOWN", "od-1", "od-1")})
    events: list[tuple[str, str]] = []
    b = CapacityBackoff(cfg, store, slurm, lambda k, m, **_: events.append((k, m)))
    yield b, slurm, store, events
    store.close()


def test_a_capacity_error_holds_the_pool_until_its_ttl_and_repeats_grow_it(world) -> None:  # type: ignore[no-untyped-def]
    b, slurm, store, events = world
    b.launch_failed("gpu-spot", "InsufficientInstanceCapacity", "no room", T0)
    assert store.offering("gpu-spot").until_s == T0.timestamp() + 180
    b.upkeep(slurm.nodes(), T0 + timedelta(seconds=1))
    drained = [n for op, ns in slurm.calls if op == "drain" for n in ns]
    assert drained == ["spot-1"], "busy, admin-drained and other pools' nodes are left alone"
    assert slurm.table["spot-1"].reason.startswith(Why.NO_CAPACITY.value)
    b.launch_failed("gpu-spot", "InsufficientInstanceCapacity", "no room", T0)
    assert store.offering("gpu-spot").until_s == T0.timestamp() + 360, "second in a row"
    b.upkeep(slurm.nodes(), T0 + timedelta(seconds=400))
    assert ("undrain", ["spot-1"]) in slurm.calls
    b.launched("gpu-spot", T0 + timedelta(seconds=500))
    assert store.offering("gpu-spot").repeats == 0
    b.launch_failed("gpu-spot", "RequestLimitExceeded", "slow down", T0)
    assert store.offering("gpu-spot").repeats == 0, "throttling is never a capacity error"
    b.launch_failed("gpu-spot", "UnauthorizedOperation", "no iam", T0)
    assert events[-1][0] == "launch_config_error"
