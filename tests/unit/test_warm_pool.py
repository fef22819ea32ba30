"""Warm pools of stopped instances (daemon/passes/warm_pool.py): a suspended node's instance
stopped into its pool's warm pool, the next gang started whole from it (or launched cold when
a start is refused), and the stopped instances tended each pass. In-memory Slurm and EC2;
tests/integration/test_warm_pool.py takes the same path on real Slurm and moto."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from slurmscale.cloud.protocol import TAG_CLUSTER, TAG_GANG, TAG_NODE, CloudInstance
from slurmscale.config_base import ConfigError
from slurmscale.config_file import parse_config
from slurmscale.daemon.metrics import Metrics
from slurmscale.daemon.passes.warm_pool import pick, retired
from slurmscale.daemon.reconcile import Reconciler
from slurmscale.lifecycles import InstanceState
from slurmscale.report.compute import build_report
from slurmscale.report.render import to_csv, to_text
from slurmscale.spool import RequestKind, Spool
from slurmscale.store.repo import Store
from slurmscale.store.rows import InstanceRow
from tests.support.fakes import FakeCloud, FakeSlurm
from tests.unit.conftest import base_config
from tests.unit.test_reconcile import T0, Clock, hook


def _config(tmp_path: Any, **warm: Any) -> dict[str, Any]:
    d = base_config(spool_dir=str(tmp_path / "spool"), socket_path=str(tmp_path / "sock"),
                    hook_log_file=str(tmp_path / "hooks.log"),
                    store_url=f"sqlite:///{tmp_path / 'state.db'}")
    d["pools"][1].update(max_nodes=4, subnets=["subnet-1"],
                         warm_pool={"size": 2, **warm})
    return d


@pytest.fixture
def world(tmp_path):  # type: ignore[no-untyped-def]
    cfg = parse_config(_config(tmp_path))
    store = Store(cfg.store_url)
    store.upgrade()
    cloud, slurm, clock = FakeCloud(), FakeSlurm(), Clock()
    r = Reconciler(cfg, store, slurm, cloud, clock=clock)
    yield r, cloud, clock, Spool(cfg.spool_dir), store
    store.close()


def _kinds(store: Store) -> list[str]:
    return [e.kind for e in store.events()]


def _released_into_the_pool(r, cloud, clock, spool, store) -> list[str]:  # type: ignore[no-untyped-def]
    hook(spool, clock, RequestKind.RESUME, {1: ["od-1", "od-2"]})
    assert r.tick().launched_gangs == 1
    ids = sorted(i.instance_id for i in store.active_instances())
    clock.now += timedelta(minutes=5)
    hook(spool, clock, RequestKind.SUSPEND, {0: ["od-1", "od-2"]})
    assert r.tick().released_nodes == 2
    return ids


def test_a_suspended_gang_is_stopped_into_the_pool_and_the_next_starts_from_it(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, clock, spool, store = world
    ids = _released_into_the_pool(r, cloud, clock, spool, store)
    assert cloud.stops == [ids] and store.active_instances() == []
    assert sorted(w.instance_id for w in store.warm_instances("gpu-od")) == ids
    assert all(cloud.instances[i].state == "stopped" and cloud.instances[i].tags[TAG_NODE] == ""
               for i in ids), "a stopped instance names no node (no release takes it for one)"
    assert "warm_stopped" in _kinds(store)

    fleets = len(cloud.launches)
    hook(spool, clock, RequestKind.RESUME, {2: ["od-3", "od-4"]})
    assert r.tick().launched_gangs == 1
    assert len(cloud.launches) == fleets, "no CreateFleet: the gang started from the pool"
    assert sorted(cloud.starts) == ids
    rows = {i.node: i for i in store.active_instances()}
    assert sorted(rows) == ["od-3", "od-4"] and sorted(i.instance_id for i in rows.values()) == ids
    assert {cloud.instances[rows[n].instance_id].tags[TAG_NODE] for n in rows} == {"od-3", "od-4"}
    assert store.warm_instances() == [] and "warm_started" in _kinds(store)
    # each launch its own time-to-run row: the first (cold) kept apart, the warm start's
    phases = {(p.instance_id, p.node, p.warm) for p in store.launch_phases()}
    assert {(i, n, w) for i, n, w in phases if w} == {(i, n, True) for i, n in sorted(
        (r.instance_id, r.node) for r in rows.values())}
    assert sorted((i.split("@")[0], n) for i, n, w in phases if not w) == \
        sorted(zip(ids, ["od-1", "od-2"], strict=True))
    assert "launch_requested" not in _kinds(store)[-6:]


def test_a_refused_start_puts_the_started_back_and_the_gang_launches_cold(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, clock, spool, store = world
    ids = _released_into_the_pool(r, cloud, clock, spool, store)
    warm = [w.instance_id for w in store.warm_instances("gpu-od")]
    cloud.refuse_start = {warm[1]}  # (pick starts the most recently started first)
    fleets = len(cloud.launches)
    hook(spool, clock, RequestKind.RESUME, {2: ["od-3", "od-4"]})
    assert r.tick().launched_gangs == 1
    assert len(cloud.launches) == fleets + 1, "launched cold, whole"
    first = [i for i in cloud.starts if i != warm[1]]
    assert first and cloud.stops[-1] == first, "the one started is stopped again"
    assert sorted(w.instance_id for w in store.warm_instances()) == sorted(ids)
    for i in ids:
        assert cloud.instances[i].state == "stopped"
        assert cloud.instances[i].tags[TAG_NODE] == "", "given back: no node"
    assert sorted(i.node for i in store.active_instances()) == ["od-3", "od-4"]
    assert not set(ids) & {i.instance_id for i in store.active_instances()}
    assert "warm_start_refused" in _kinds(store)


def test_a_failed_resume_is_terminated_and_a_full_pool_terminates(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, clock, spool, store = world
    hook(spool, clock, RequestKind.RESUME, {1: ["od-1", "od-2", "od-3"]})
    r.tick()
    by_node = {i.node: i.instance_id for i in store.active_instances()}
    hook(spool, clock, RequestKind.RESUME_FAIL, {0: ["od-1"]})
    r.tick()
    assert cloud.instances[by_node["od-1"]].state == "terminated"
    hook(spool, clock, RequestKind.SUSPEND, {0: ["od-2", "od-3"]})
    r.tick()
    assert len(store.warm_instances()) == 2
    hook(spool, clock, RequestKind.RESUME, {3: ["od-4"]})
    r.tick()
    clock.now += timedelta(minutes=1)  # (a single node waits out the batch window)
    r.tick()  # (it takes one of the two warm instances)
    assert len(store.warm_instances()) == 1


def test_each_pass_retires_aged_oversized_vanished_and_untracked_stopped_instances(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = parse_config(_config(tmp_path, max_age_s=3600))
    store = Store(cfg.store_url)
    store.upgrade()
    cloud, slurm, clock = FakeCloud(), FakeSlurm(), Clock()
    r = Reconciler(cfg, store, slurm, cloud, clock=clock)
    spool = Spool(cfg.spool_dir)
    ids = _released_into_the_pool(r, cloud, clock, spool, store)
    # EC2 lost one while stopped (a hand's terminate): forgotten
    cloud.instances[ids[0]] = replace(cloud.instances[ids[0]], state="terminated")
    # a stopped instance of this cluster no row knows (a store lost): a leak
    cloud.instances["i-stray"] = CloudInstance(
        "i-stray", "stopped", {TAG_CLUSTER: cfg.cluster_name, TAG_NODE: ""}, "10.0.0.9",
        "ami-1", launched_at=T0 - timedelta(hours=1))
    r.tick()
    row = store.instance(ids[0])
    assert row is not None and row.state == InstanceState.TERMINATED
    assert cloud.instances["i-stray"].state == "terminated"
    assert store.instance(ids[1]).state == InstanceState.WARM  # type: ignore[union-attr]
    # past max_age_s since its last start: terminated
    clock.now += timedelta(hours=2)
    r.tick()
    assert cloud.instances[ids[1]].state == "terminated" and store.warm_instances() == []
    assert _kinds(store).count("warm_retired") == 3
    store.close()


def _row(iid: str, subnet: str, minutes: int, lt: str = "2") -> InstanceRow:
    return InstanceRow(instance_id=iid, node="", pool="gpu-od", gang_id="g", subnet_id=subnet,
                       instance_type="p5.48xlarge", lifecycle="on-demand",
                       launch_template_version=lt, state=InstanceState.WARM,
                       launched_at=T0 + timedelta(minutes=minutes))


def test_a_gang_takes_instances_of_one_subnet_the_least_aged_first() -> None:
    warm = [_row("a", "s1", 0), _row("b", "s2", 1), _row("c", "s1", 2), _row("d", "s1", 3)]
    got = pick(warm, 2)
    assert got is not None and [r.instance_id for r in got] == ["d", "c"]
    assert pick(warm, 4) is None, "no subnet has four: nothing (the gang launches cold)"
    assert [r.instance_id for r in pick(warm, 1) or []] == ["d"]


def test_retired_names_another_version_the_age_and_the_oldest_beyond_the_size(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    pool = parse_config(_config(tmp_path, max_age_s=3600)).pool("gpu-od")
    warm = [_row("old", "s1", 0), _row("v1", "s1", 10, lt="1"), _row("a", "s1", 20),
            _row("b", "s1", 30)]
    why = retired(pool, warm, T0 + timedelta(minutes=40))
    assert set(why) == {"v1", "old"}
    assert "v1" in why["v1"] and "size" in why["old"]
    assert set(retired(pool, warm, T0 + timedelta(minutes=85))) == {"v1", "old", "a"}


@pytest.mark.parametrize(("change", "said"), [
    ({"capacity_type": "spot"}, "needs capacity_type on-demand"),
    ({"placement": "per-gang"}, "placement per-gang"),
    ({"capacity_reservations": {"ids": ["cr-0123456789abcdef0"]}}, "capacity_reservations"),
    ({"warm_pool": {"size": 5}}, "larger than max_nodes"),
])
def test_a_warm_pool_where_ec2_cannot_keep_one_is_refused(tmp_path, change: dict[str, Any],
                                                          said: str) -> None:  # type: ignore[no-untyped-def]
    d = _config(tmp_path)
    d["pools"][1].update(change)
    with pytest.raises(ConfigError, match=said):
        parse_config(d)


class Killed(BaseException):
    """The daemon killed mid-call (nothing after it in the pass runs)."""


def _killed_at_the_second_start(r, cloud, clock, spool) -> None:  # type: ignore[no-untyped-def]
    """A 2-node gang's warm start, the daemon killed as it makes the second start."""
    start = cloud.start

    def killed_at_the_second(iid: str) -> None:
        if cloud.starts:
            raise Killed
        start(iid)
    cloud.start = killed_at_the_second
    hook(spool, clock, RequestKind.RESUME, {2: ["od-3", "od-4"]})
    with pytest.raises(Killed):
        r.tick()
    cloud.start = start


def test_a_warm_start_cut_off_is_finished_by_the_next_daemon(world, tmp_path) -> None:  # type: ignore[no-untyped-def]
    r, cloud, clock, spool, store = world
    ids = _released_into_the_pool(r, cloud, clock, spool, store)
    fleets = len(cloud.launches)
    _killed_at_the_second_start(r, cloud, clock, spool)
    assert [cloud.instances[i].state for i in ids] == ["running", "stopped"]
    gangs = {cloud.instances[i].tags[TAG_GANG] for i in ids}
    assert len(gangs) == 1, "both tagged with the gang before the first start"
    clock.now += timedelta(seconds=1)
    again = Reconciler(r.cfg, store, r.slurm, cloud, clock=clock)
    assert again.tick().launched_gangs == 1
    assert len(cloud.launches) == fleets, "the warm start finished, no CreateFleet"
    assert cloud.starts == ids, "the second started now, the first not again"
    assert sorted((i.node, i.instance_id) for i in store.active_instances()) == \
        sorted(zip(["od-3", "od-4"], ids, strict=True))
    assert {cloud.instances[i].tags[TAG_NODE] for i in ids} == {"od-3", "od-4"}
    assert "launch_recovered" in _kinds(store) and "launch_failed" not in _kinds(store)


def test_a_cut_off_warm_start_whose_instances_went_elsewhere_is_given_back(world) -> None:  # type: ignore[no-untyped-def]
    r, cloud, clock, spool, store = world
    ids = _released_into_the_pool(r, cloud, clock, spool, store)
    _killed_at_the_second_start(r, cloud, clock, spool)
    cloud.instances[ids[1]] = replace(cloud.instances[ids[1]], state="terminated")
    clock.now += timedelta(seconds=1)
    again = Reconciler(r.cfg, store, r.slurm, cloud, clock=clock)
    assert again.tick().launched_gangs == 1  # (cold: one of its two is gone)
    assert cloud.instances[ids[0]].state == "stopped"
    assert cloud.instances[ids[0]].tags[TAG_NODE] == "", "given back: no node"
    assert ids[0] not in {i.instance_id for i in store.active_instances()}


def test_the_report_counts_each_run_and_prices_the_stops_apart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Two nodes run an hour, stop two hours, run an hour again, then stay stopped: 4
    node-hours at the on-demand price (not 8 from their first launch), 6 stopped
    instance-hours at the volumes' price."""
    d = _config(tmp_path, stopped_usd_per_hour=0.5)
    d["prices"] = {"p5.48xlarge": {"on-demand": 10.0}}
    cfg = parse_config(d)
    store = Store(cfg.store_url)
    store.upgrade()
    cloud, clock = FakeCloud(), Clock()
    r = Reconciler(cfg, store, FakeSlurm(), cloud, clock=clock)
    spool = Spool(cfg.spool_dir)
    for job, (up, down) in enumerate([(0, 1), (3, 4)], start=1):
        clock.now = T0 + timedelta(hours=up)
        hook(spool, clock, RequestKind.RESUME, {job: ["od-1", "od-2"]})
        assert r.tick().launched_gangs == 1
        clock.now = T0 + timedelta(hours=down)
        hook(spool, clock, RequestKind.SUSPEND, {0: ["od-1", "od-2"]})
        assert r.tick().released_nodes == 2
    assert len(cloud.launches) == 1 and len(cloud.starts) == 2
    rep = build_report(cfg, store, T0, T0 + timedelta(hours=5))
    (od,) = [p for p in rep.pools if p.pool == "gpu-od"]
    assert (od.instances, od.node_hours, od.est_cost_usd) == (2, 4.0, 40.0)
    assert [(w.pool, w.instances, w.stopped_hours, w.est_volume_cost_usd)
            for w in rep.warm_pools] == [("gpu-od", 2, 6.0, 3.0)]
    assert "Warm pools" in to_text(rep)
    assert "warm_pools,gpu-od,stopped_hours,6.0" in to_csv(rep)
    store.close()


def test_the_launches_metric_tells_a_warm_start_from_a_fleet(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = parse_config(_config(tmp_path))
    store = Store(cfg.store_url)
    store.upgrade()
    cloud, clock, metrics = FakeCloud(), Clock(), Metrics()
    r = Reconciler(cfg, store, FakeSlurm(), cloud, clock=clock, metrics=metrics)
    _released_into_the_pool(r, cloud, clock, Spool(cfg.spool_dir), store)
    hook(Spool(cfg.spool_dir), clock, RequestKind.RESUME, {2: ["od-3", "od-4"]})
    r.tick()
    text = metrics.text()
    line = ('slurmscale_launches_total{capacity_type="on-demand",code="%s",pool="gpu-od",'
            'result="launched"} 1.0')
    assert line % "" in text and line % "WarmStarted" in text
    store.close()
