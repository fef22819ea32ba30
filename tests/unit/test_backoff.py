"""Capacity errors: classification, the growing TTL, and holding a pool's nodes while it has
no capacity (fake Slurm, real store)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from slurmscale.cloud.errors import ErrorClass, classify, unavailable_ttl
from slurmscale.daemon.passes.backoff import CapacityBackoff
from slurmscale.model import SlurmNode
from slurmscale.slurm.reasons import Why
from slurmscale.store.repo import Store
from tests.support.fakes import FakeSlurm, pass_context

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
    b = CapacityBackoff(pass_context(cfg, store, slurm, lambda k, m, **_: events.append((k, m))))
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


def test_an_offering_out_leaves_the_pool_its_other_offerings_and_the_last_one_holds_it(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A spot pool of two instance types: EC2 has no p5 (its error names the override), the
    fleet fills on p4d. Only p5/us-east-1a/spot is out: the pool is not held, and the next
    fleet leaves p5 out of its overrides. When p4d runs out too, no offering is left: the
    pool is out (its powered-down nodes held) until the first comes back. A spot
    interruption takes its instance's offering out, not the pool."""
    from slurmscale.config_file import parse_config
    from slurmscale.daemon.reconcile import Reconciler
    from slurmscale.spool import RequestKind, Spool
    from tests.support.fakes import FakeCloud
    from tests.unit.conftest import base_config
    from tests.unit.test_reconcile import Clock, hook

    d = base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}",
                    spool_dir=str(tmp_path / "spool"))
    (spot,) = [p for p in d["pools"] if p["name"] == "gpu-spot"]
    spot["instance_types"] = ["p5.48xlarge", "p4d.24xlarge"]
    cfg = parse_config(d)
    store = Store(cfg.store_url)
    store.upgrade()
    cloud, clock = FakeCloud(sold_out={("p5.48xlarge", "subnet-1")}), Clock()
    slurm = FakeSlurm(table={f"spot-{i}": SlurmNode(f"spot-{i}", "IDLE+CLOUD+POWERED_DOWN",
                                                    f"spot-{i}", f"spot-{i}")
                             for i in range(7, 9)})
    r = Reconciler(cfg, store, slurm, cloud, clock=clock)
    spool = Spool(cfg.spool_dir)
    try:
        hook(spool, clock, RequestKind.RESUME, {1: ["spot-1", "spot-2"]})
        r.tick()
        assert {i.instance_type for i in store.active_instances()} == {"p4d.24xlarge"}
        rows = {o.offering: o for o in store.offerings()}
        assert set(rows) == {"p5.48xlarge/us-east-1a/spot"}
        assert rows["p5.48xlarge/us-east-1a/spot"].until_s == clock.now.timestamp() + 180
        assert not [n for op, ns in slurm.calls if op == "drain" for n in ns]
        def launch(job: int, nodes: list[str]) -> None:
            """A resume for these nodes, passes until its fleet is sent (a batch waits)."""
            sent = len(cloud.launches)
            hook(spool, clock, RequestKind.RESUME, {job: nodes})
            for _ in range(10):
                clock.now += timedelta(seconds=5)
                r.tick()
                if len(cloud.launches) > sent:
                    return
            raise AssertionError("no launch")

        # the next fleet leaves p5 out
        launch(2, ["spot-3", "spot-4"])
        assert cloud.launches[-1]["spec"].overrides() == [("p4d.24xlarge", "subnet-1")]
        # p4d runs out too: no offering left, the pool is out until p5 comes back
        cloud.sold_out.add(("p4d.24xlarge", "subnet-1"))
        launch(3, ["spot-5", "spot-6"])
        pool_row = store.offering("gpu-spot")
        assert pool_row is not None and pool_row.until_s == T0.timestamp() + 180
        said = [m for k, m in [(e.kind, e.message) for e in store.events()]
                if k == "capacity_unavailable"]
        assert "go to its 1 other offering(s)" in said[0]
        assert "no offering of the pool left: unavailable for" in said[-1]
        held = [n for op, ns in slurm.calls if op == "drain" for n in ns]
        assert "spot-8" in held and "spot-1" not in held
        # a spot interruption of the p4d instance: that offering, not the pool
        store.put_offering(replace(pool_row, until_s=0.0, repeats=0))
        for o in store.offerings():
            store.put_offering(replace(o, until_s=0.0, repeats=0))
        inst = store.active_instances()[0]
        r.backoff.reclaimed("gpu-spot", clock.now, r.backoff.offering(
            cfg.pool("gpu-spot"), inst.instance_type, inst.subnet_id, "spot"))
        assert inst.subnet_id == "subnet-1"
        out = {o.offering for o in store.offerings() if o.until_s > clock.now.timestamp()}
        assert out == {"p4d.24xlarge/us-east-1a/spot"}
    finally:
        store.close()


def test_the_endpoint_retry_stays_bounded_however_long_ec2_is_away() -> None:
    """A million failures in a row (an endpoint away for days): the delay is the cap, no
    OverflowError (before: `base * 2 ** (failures - 1)` overflowed at 1,025, and every later
    launch raised); a count read back from the store is clamped before it is parsed."""
    import time

    from slurmscale.daemon.passes.retry import MAX_COUNT, RETRY, SUBJECT, EndpointRetry
    from slurmscale.store.memory import MemoryStore

    r = EndpointRetry(base_s=5.0, cap_s=60.0)
    assert [r.failed(0.0) for _ in range(5)] == [5.0, 10.0, 20.0, 40.0, 60.0]
    r.failures = 10**6 - 1
    assert r.failed(100.0) == 60.0 and r.until == 160.0
    for _ in range(3):
        assert r.failed(100.0) == 60.0
    assert r.failures == MAX_COUNT
    store = MemoryStore()
    for note, want in (("1" + "0" * 11, MAX_COUNT), ("9" * 100_000, MAX_COUNT),
                       ("3", 3), ("0", 1), ("junk", 1), ("", 1)):
        store.set_timers(RETRY, {SUBJECT: 50.0}, {SUBJECT: note})
        t0 = time.process_time()
        back = EndpointRetry(base_s=5.0, store=store)
        assert back.waiting(51.0) and back.failures == want, (note[:20], back.failures)
        assert time.process_time() - t0 < 0.5
    assert EndpointRetry(base_s=5.0, store=store).failed(60.0) == 10.0  # "" read as 1, then 2
