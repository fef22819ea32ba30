"""Nodes that fail to join Slurm: the verdicts (pure, with a property), and the boot pass on a
fake Slurm and cloud with the real store: a fresh instance pinned where the gang is, Slurm
left waiting, and giving up with the boot error as the reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmscale.cloud.protocol import TAG_CLUSTER, TAG_GANG, TAG_NODE, CloudInstance
from slurmscale.config_file import parse_config
from slurmscale.daemon.context import PassContext
from slurmscale.daemon.passes.addresses import NodeAddresses
from slurmscale.daemon.passes.boots import BootPass
from slurmscale.daemon.passes.fleets import GangFleets
from slurmscale.daemon.passes.launch import client_token
from slurmscale.model import SlurmNode
from slurmscale.policy.boots import (
    TAG_BOOT_ERROR,
    Booting,
    BootStep,
    boot_verdicts,
    split_error,
)
from slurmscale.slurm import reasons
from slurmscale.slurm.reasons import Why
from slurmscale.store.repo import Store
from slurmscale.store.rows import GangRow, InstanceRow
from tests.support.fakes import FakeCloud, FakeSlurm
from tests.unit.conftest import base_config

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
IID = "i-00000000000000aa"
UP = "ALLOCATED+CLOUD+POWERING_UP"


def verdicts(state: str = UP, error: str | None = None, age: float = 0, attempts: int = 0,
             recent: int = 0, retries: int = 2) -> list[tuple[str, BootStep, int]]:
    nodes = {"spot-1": SlurmNode("spot-1", state, "127.0.0.1", "spot-1")}
    return [(v.cause, v.step, v.attempt) for v in boot_verdicts(
        nodes, [Booting(IID, "spot-1", "gpu-spot", 1000.0)],
        {IID: error} if error else {}, 1000.0 + age, {"gpu-spot": 420.0},
        {"spot-1": attempts}, {"spot-1": recent}, {"gpu-spot": retries}, 3)]


def test_a_reported_boot_failure_is_replaced_at_once() -> None:
    assert verdicts(error="gpu-check: 7 GPU(s) seen") == [("gpu-check", BootStep.REPLACE, 0)]


def test_a_silent_instance_is_replaced_after_the_join_timeout_only() -> None:
    assert verdicts(age=419) == []
    assert verdicts(age=420) == [("join-timeout", BootStep.REPLACE, 0)]


def test_a_registered_node_is_not_judged_whatever_its_tag_says() -> None:
    assert verdicts("ALLOCATED+CLOUD", error="gpu-check: x", age=9999) == []
    assert verdicts("IDLE+CLOUD+POWERED_DOWN", error="gpu-check: x") == []


def test_retries_spent_or_the_replace_loop_guard_give_up() -> None:
    assert verdicts(error="slurmd: x", attempts=2) == [("slurmd", BootStep.GIVE_UP, 2)]
    assert verdicts(error="slurmd: x", attempts=1) == [("slurmd", BootStep.REPLACE, 1)]
    assert verdicts(error="slurmd: x", recent=3) == [("slurmd", BootStep.GIVE_UP, 0)]
    assert verdicts(error="slurmd: x", retries=0) == [("slurmd", BootStep.GIVE_UP, 0)]


def test_the_tag_is_split_into_cause_and_detail() -> None:
    assert split_error("gpu-check: 7 GPU(s) seen by nvidia-smi") == (
        "gpu-check", "7 GPU(s) seen by nvidia-smi")
    assert split_error("something odd happened: here") == (
        "boot-error", "something odd happened: here")


@given(st.lists(st.tuples(st.sampled_from([UP, "IDLE+CLOUD", "ALLOCATED+CLOUD+POWERING_UP",
                                            "IDLE+CLOUD+POWERED_DOWN"]),
                          st.booleans(), st.floats(0, 2000), st.integers(0, 4)),
                min_size=1, max_size=8))
def test_only_nodes_still_waiting_to_join_are_acted_on_and_retries_are_bounded(
        cases: list[tuple[str, bool, float, int]]) -> None:
    nodes, running, errors, attempts = {}, [], {}, {}
    for i, (state, err, age, done) in enumerate(cases):
        name, iid = f"spot-{i}", f"i-{i:016x}"
        nodes[name] = SlurmNode(name, state, "", name)
        running.append(Booting(iid, name, "gpu-spot", 5000.0 - age))
        if err:
            errors[iid] = "gpu-check: bad"
        attempts[name] = done
    out = boot_verdicts(nodes, running, errors, 5000.0, {"gpu-spot": 600.0}, attempts, {},
                        {"gpu-spot": 2}, 3)
    for v in out:
        i = int(v.node.split("-")[1])
        state, err, age, done = cases[i]
        assert "POWERING_UP" in state and (err or age >= 600)
        assert (v.step is BootStep.REPLACE) == (done < 2)
    assert len({v.node for v in out}) == len(out)


# --- the pass ----------------------------------------------------------------------------------
@pytest.fixture
def world(tmp_path):  # type: ignore[no-untyped-def]
    d = base_config(store_url=f"sqlite:///{tmp_path / 'state.db'}")
    d["pools"][0].update(placement="per-gang", max_boot_retries=1, boot_time_s=60)
    cfg = parse_config(d)
    store = Store(cfg.store_url)
    store.upgrade()
    store.add_gang(GangRow(id="g1", pool="gpu-spot", nodes="spot-[1-2]", size=2,
                           job_ids='["42"]', request_ids='["r1"]', coalesced=False,
                           status="launching", client_token=client_token("g1"),
                           launch_template_version="3", created_at=T0, updated_at=T0))
    store.update_gang("g1", status="launched", updated_at=T0)
    store.add_instances([InstanceRow(
        instance_id=iid, node=node, pool="gpu-spot", gang_id="g1", instance_type="p5e.48xlarge",
        lifecycle="spot", launch_template_version="3", state="running", launched_at=T0)
        for iid, node in ((IID, "spot-1"), ("i-00000000000000bb", "spot-2"))])
    slurm = FakeSlurm(table={n: SlurmNode(n, UP, "127.0.0.1", n) for n in ("spot-1", "spot-2")})
    ours = {TAG_CLUSTER: "unit", TAG_GANG: "g1"}
    cloud = FakeCloud(instances={
        IID: CloudInstance(IID, "running", {**ours, TAG_NODE: "spot-1"}, subnet_id="subnet-9"),
        "i-00000000000000bb": CloudInstance("i-00000000000000bb", "running",
                                            {**ours, TAG_NODE: "spot-2"})})
    now = [T0 + timedelta(seconds=20)]
    events: list[tuple[str, str]] = []
    ctx = PassContext(cfg, store, slurm, cloud, lambda: now[0],
                      lambda k, m, **_: events.append((k, m)))
    bp = BootPass(ctx, GangFleets(ctx, client_token), NodeAddresses(ctx))
    group = bp.fleets.placement_group(cfg.pool("gpu-spot"), "g1")
    assert group is not None
    cloud.ensure_placement_group(group, ours)  # (the gang's launch made it)
    yield bp, slurm, cloud, store, events, now
    store.close()


def _pass(bp: BootPass, slurm: FakeSlurm, cloud: FakeCloud) -> None:
    bp.run(slurm.nodes(), None, cloud.find({TAG_CLUSTER: "unit"}, include_terminated=True))


def test_a_reported_failure_gets_a_fresh_instance_pinned_where_its_gang_is(world) -> None:  # type: ignore[no-untyped-def]
    bp, slurm, cloud, store, events, now = world
    cloud.instances[IID].tags[TAG_BOOT_ERROR] = "gpu-check: 7 GPU(s) seen, the pool promises 8"
    _pass(bp, slurm, cloud)
    (launch,) = cloud.launches
    spec = launch["spec"]
    assert (launch["count"], launch["min"]) == (1, 1)
    assert spec.instance_types == ("p5e.48xlarge",) and spec.subnets == ("subnet-9",)
    assert spec.placement_group is not None and spec.placement_group == \
        bp.fleets.placement_group(bp.ctx.cfg.pool("gpu-spot"), "g1")
    assert launch["token"] == client_token("g1/boot/spot-1/1") and launch["tags"][TAG_GANG] == "g1"
    (row,) = store.active_instances(["spot-1"])
    assert row.instance_id != IID and row.gang_id == "g1"
    # the fresh instance's own time to run begins at its answer (launch_phases.py)
    (phases,) = store.launch_phases()
    assert (phases.instance_id, phases.node, phases.answered_s) == (
        row.instance_id, "spot-1", now[0].timestamp())
    assert cloud.instances[IID].state == "terminated"
    assert cloud.instances[row.instance_id].tags[TAG_NODE] == "spot-1"  # its bootstrap waits
    assert slurm.powered_down == [] and ("requeue", ["42"]) not in slurm.calls  # Slurm waits
    (rep,) = store.replacements()
    assert (rep.cause, rep.jobs_requeued) == ("boot-gpu-check", 0)
    assert [k for k, _ in events if k.startswith("boot")] == ["boot_replaced"]
    # the fresh one fails too: retries (1) spent -> powered down with the reason
    fresh = row.instance_id
    cloud.instances[fresh].tags[TAG_BOOT_ERROR] = "gpu-check: 7 GPU(s) seen, the pool promises 8"
    now[0] += timedelta(seconds=10)
    _pass(bp, slurm, cloud)
    assert len(cloud.launches) == 1 and cloud.instances[fresh].state == "terminated"
    ((nodes, reason),) = slurm.powered_down
    assert nodes == ["spot-1"] and reasons.ours(reason) is Why.BOOT_FAILED
    assert reason.startswith("slurmscale: boot failed: gpu-check: 7 GPU(s) seen")
    assert "1 fresh instance(s) failed too" in reason
    assert store.active_instances(["spot-1"]) == []


def test_a_node_that_never_registers_is_replaced_after_its_join_timeout(world) -> None:  # type: ignore[no-untyped-def]
    bp, slurm, cloud, store, events, now = world
    now[0] = T0 + timedelta(seconds=179)  # boot_time_s 60 + 120
    _pass(bp, slurm, cloud)
    assert cloud.launches == []
    now[0] = T0 + timedelta(seconds=181)
    _pass(bp, slurm, cloud)
    assert len(cloud.launches) == 2  # both nodes of the gang were silent
    assert {r.cause for r in store.replacements()} == {"boot-join-timeout"}
    # once registered, nothing more happens, however long ago they launched
    for n in ("spot-1", "spot-2"):
        slurm.table[n] = SlurmNode(n, "ALLOCATED+CLOUD", "127.0.0.1", n)
    now[0] = T0 + timedelta(seconds=5000)
    _pass(bp, slurm, cloud)
    assert len(cloud.launches) == 2


def test_no_capacity_for_the_fresh_instance_gives_up_so_the_job_requeues(world) -> None:  # type: ignore[no-untyped-def]
    bp, slurm, cloud, store, events, now = world
    cloud.give = 0
    cloud.instances[IID].tags[TAG_BOOT_ERROR] = "slurmd: slurmd exited 1"
    _pass(bp, slurm, cloud)
    ((nodes, reason),) = slurm.powered_down
    assert nodes == ["spot-1"] and "no fresh instance: InsufficientInstanceCapacity" in reason
    assert cloud.instances[IID].state == "terminated"
    assert [k for k, _ in events if k.startswith("boot")] == ["boot_failed"]
