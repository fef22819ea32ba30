"""Capacity the way AWS sells it, on a real Slurm, with EC2's capacity reservations and
placement groups served by the test proxy in EC2's shapes (moto has neither): a gang goes
whole into a reservation or wholly elsewhere, and a gang larger than one fleet is several
fleets in one placement group and AZ, rolled back together."""

from __future__ import annotations

import json

import pytest

from slurmscale.hostlists import expand
from slurmscale.localcluster.cluster import NODE_METADATA, LocalCluster
from slurmscale.localcluster.options import PoolSpec
from slurmscale.localcluster.procs import wait_for
from tests.support.ec2_capacity import Reservation
from tests.support.ec2_proxy import Call, EC2Proxy, Fault

pytestmark = pytest.mark.slurm

CR = "cr-0a1b2c3d4e5f60001"
GROUP_ARN = "arn:aws:resource-groups:us-east-1:123456789012:group/slurmscale-odcr"


def _reserved_version(c: LocalCluster) -> None:
    """The pool's launch template version 2: targets the reservations' resource group (the way
    EC2 Fleet takes targeted reservations); version 1 targets nothing."""
    c.ec2().create_launch_template_version(
        LaunchTemplateName=c.lt_name, LaunchTemplateData={
            "ImageId": "ami-0a1b2c3d4e5f60718", "InstanceType": "p5.48xlarge",
            "MetadataOptions": NODE_METADATA,
            "CapacityReservationSpecification": {"CapacityReservationTarget": {
                "CapacityReservationResourceGroupArn": GROUP_ARN}}})


def _reserved(call: Call) -> bool:
    return (call.params.get("OnDemandOptions.CapacityReservationOptions.UsageStrategy")
            == "use-capacity-reservations-first")


def _lt_version(call: Call) -> str:
    return call.params.get("LaunchTemplateConfigs.1.LaunchTemplateSpecification.Version", "")


def _job_instances(c: LocalCluster, job: int) -> set[str]:
    nodes = set(expand(c.job(job)["NodeList"]))
    return {i["InstanceId"] for i in c.cluster_instances()
            if {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get("slurmscale:node")
            in nodes}


def test_a_gang_goes_whole_into_the_reservation_and_the_next_wholly_elsewhere(
        make_cluster) -> None:
    # Slurm's own SuspendTime (the backstop for a daemon that is down) well past the test
    c, proxy = make_cluster(suspend_time=120, metrics=True, start_daemon=False, pools=[PoolSpec(
        "gpu-od", "od-", 8, capacity_type="on-demand",
        extra={"capacity_reservations": {"ids": [CR], "launch_template_version": "2"}})])
    proxy.capacity.add(Reservation(CR, "p5.48xlarge", total=6, resource_group_arn=GROUP_ARN))
    _reserved_version(c)
    c.start_daemon()
    gang = ("-N", "4", "--gres=gpu:8", "-p", "gpu-od", "--wrap")
    first = c.sbatch(*gang, "sleep 25")
    c.wait_job(first, {"RUNNING"}, 150)
    # 2 reserved nodes left free: a 4-node gang must not be split across them
    second = c.sbatch(*gang, "sleep 1")
    c.wait_job(second, {"COMPLETED"}, 150)
    c.wait_job(first, {"COMPLETED"}, 150)

    fleets = proxy.fleet_calls()
    assert [(_reserved(f), _lt_version(f)) for f in fleets] == [(True, "2"), (False, "1")]
    inside = proxy.capacity.in_reservation()
    assert _job_instances(c, first) <= set(inside), "the whole first gang is reserved"
    assert not _job_instances(c, second) & set(inside), "nothing of the second gang is"
    assert proxy.capacity.reservations[CR].available == 2
    # the daemon read the free count through DescribeCapacityReservations
    assert any(x.action == "DescribeCapacityReservations" and x.status == 200
               for x in proxy.calls)
    events = c.events()
    requested = [e["message"] for e in events if e["kind"] == "launch_requested"]
    assert "reserved: fits whole" in requested[0]
    assert "the gang needs 4" in requested[1]

    # Reserved capacity is paid whether used or not: the normal nodes are released once idle,
    # the reserved ones kept (until Slurm's own SuspendTime backstop).
    second_nodes = set(expand(c.job(second)["NodeList"]))
    first_nodes = set(expand(c.job(first)["NodeList"]))

    def normal_released() -> bool:
        return all("POWERED_DOWN" in c.node(n).get("State", "") for n in second_nodes)
    wait_for("the normal-capacity nodes released", normal_released, 120)
    assert not any("POWER" in c.node(n).get("State", "") for n in first_nodes), \
        [c.node(n).get("State") for n in first_nodes]
    released = [e["node"] for e in c.events() if e["kind"] == "scale_down"]
    assert not {n for r in released for n in expand(r)} & first_nodes, released
    plan = json.loads(c.cli("plan", "--json").stdout)
    kept = [a for a in plan["actions"] if a["kind"] == "keep"
            and "reserved capacity" in a["reason"]]
    assert kept and set(kept[0]["nodes"]) == first_nodes, plan["actions"]
    # status and the metrics show the reservation as the daemon last read it
    wait_for("the daemon's read of the free count", lambda: any(
        p["available"] == 2 for p in json.loads(c.cli("status", "--json").stdout)[
            "paid_capacity"]), 60)
    (paid,) = json.loads(c.cli("status", "--json").stdout)["paid_capacity"]
    assert (paid["id"], paid["kind"], paid["total"]) == (CR, "default", 6)
    assert 0 < paid["used_node_hours"] < paid["paid_node_hours"], paid
    metrics = c.scrape()
    assert ('slurmscale_capacity_reservation_instances{count="available",kind="default",'
            f'pool="gpu-od",reservation="{CR}"}} 2.0') in metrics


def _placement(call: Call) -> tuple[str, str]:
    o = "LaunchTemplateConfigs.1.Overrides."
    groups = {v for k, v in call.params.items()
              if k.startswith(o) and k.endswith(".Placement.GroupName")}
    subnets = {v for k, v in call.params.items() if k.startswith(o) and k.endswith(".SubnetId")}
    assert len(groups) == 1 and len(subnets) == 1, call.params
    return groups.pop(), subnets.pop()


def test_a_gang_larger_than_one_fleet_shares_one_group_and_rolls_back_whole(
        make_cluster) -> None:
    c, proxy = make_cluster(
        pools=[PoolSpec("gpu-od", "od-", 6, capacity_type="on-demand",
                        extra={"placement": "per-gang"})],
        aws={"max_instances_per_fleet": 2}, cred_expire=15)
    proxy.faults.append(Fault("CreateFleet", "none", code="InsufficientInstanceCapacity",
                              skip=2))
    job = c.sbatch("-N", "5", "--gres=gpu:8", "-p", "gpu-od", "--wrap", "sleep 1")
    wait_for("the first attempt rolled back",
             lambda: any(e["kind"] == "launch_failed" for e in c.events()), 120)
    first = proxy.fleet_calls()
    assert [x.params["TargetCapacitySpecification.TotalTargetCapacity"] for x in first] == [
        "2", "2", "1"]
    assert len({_placement(x) for x in first}) == 1, "one placement group, one subnet (AZ)"
    wait_for("every instance of the first attempt terminated",
             lambda: not c.cluster_instances(), 60)

    c.wait_job(job, {"COMPLETED"}, 300)
    assert c.job(job)["Restarts"] == "1", c.job(job)
    calls = proxy.fleet_calls()
    assert len(calls) == 6, [x.status for x in calls]
    assert len({_placement(x) for x in calls[3:]}) == 1
    _assert_groups_cleaned(c, proxy)


def _assert_groups_cleaned(c: LocalCluster, proxy: EC2Proxy) -> None:
    """Each per-gang placement group goes once its gang's instances are gone."""
    wait_for("all instances terminated", lambda: not c.cluster_instances(), 150)
    wait_for("the per-gang placement groups deleted", lambda: not proxy.capacity.groups, 60)
    made = {x.params["GroupName"] for x in proxy.calls
            if x.action == "CreatePlacementGroup" and x.status == 200}
    assert len(made) == 2, "each launch attempt (a new resume request) has its own group"


def test_check_names_each_reservation_no_gang_could_use(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """`slurmscale check` against EC2's answers (the proxy's DescribeCapacityReservations):
    a reservation in another AZ than the pool's subnet, an expired one, one for dedicated
    tenancy, one for Windows, and a cancelled Capacity Block: one error each, naming it;
    a good one passes."""
    from datetime import UTC, datetime, timedelta

    ids = {"zone": "cr-0a1b2c3d4e5f600a1", "expired": "cr-0a1b2c3d4e5f600e1",
           "dedicated": "cr-0a1b2c3d4e5f600d1", "windows": "cr-0a1b2c3d4e5f600c1",
           "good": "cr-0a1b2c3d4e5f600f1", "block": "cr-0a1b2c3d4e5f600b1"}
    c, proxy = make_cluster(
        pools=[PoolSpec("gpu-od", "od-", 2, capacity_type="on-demand", extra={
                   "capacity_reservations": {"ids": [ids[k] for k in (
                       "zone", "expired", "dedicated", "windows", "good")]}}),
               PoolSpec("gpu-cb", "cb-", 2, capacity_type="capacity-block",
                        extra={"capacity_reservations": {"ids": [ids["block"]]}})],
        start_daemon=False)
    now = datetime.now(UTC)
    for r in {
            "zone": Reservation(ids["zone"], "p5.48xlarge", 2, availability_zone="us-east-1b"),
            "expired": Reservation(ids["expired"], "p5.48xlarge", 2, state="expired"),
            "dedicated": Reservation(ids["dedicated"], "p5.48xlarge", 2, tenancy="dedicated"),
            "windows": Reservation(ids["windows"], "p5.48xlarge", 2, platform="Windows"),
            "good": Reservation(ids["good"], "p5.48xlarge", 2),
            "block": Reservation(ids["block"], "p5.48xlarge", 2, state="cancelled",
                                 reservation_type="capacity-block", start=now,
                                 end=now + timedelta(hours=1))}.values():
        proxy.capacity.add(r)
    chk = c.cli("check", "--json")
    assert chk.returncode == 1, chk.stdout + chk.stderr
    found = sorted((p["code"], next(k for k, i in ids.items() if i in p["message"]))
                   for p in json.loads(chk.stdout)["problems"]
                   if p["code"].startswith("reservation_"))
    assert found == [("reservation_gone", "block"), ("reservation_gone", "expired"),
                     ("reservation_platform", "windows"), ("reservation_tenancy", "dedicated"),
                     ("reservation_zone", "zone")], found


BLOCK = "cr-0b1c2d3e4f5a60001"
# EC2 begins terminating a block's instances 30 minutes before its end; the scenarios run on a
# compressed clock (blocks of minutes), so that lead is 30 s here, in the proxy and the config
LEAD = 30


def _block_pool(make_cluster, ids: list[str], margin: float,  # type: ignore[no-untyped-def]
                pool: dict[str, object] | None = None, others: tuple[PoolSpec, ...] = (),
                **opts: object):
    """A 4-node capacity-block pool over `ids` (and `pool`'s other settings), the daemon not
    started: EC2's early terminations on the scenarios' compressed clock (LEAD), the pool's
    template version with the market type blocks take and no target (each fleet names the
    open blocks); `others`: pools beside it."""
    c, proxy = make_cluster(
        pools=[PoolSpec("gpu-cb", "cb-", 4, capacity_type="capacity-block",
                        launch_template_version="2",
                        extra={"capacity_reservations": {"ids": ids}, **(pool or {})}),
               *others],
        extra_config={"capacity_blocks": {"end_margin_s": margin,
                                          "termination_lead_s": LEAD}},
        start_daemon=False, **opts)
    proxy.capacity.termination_lead_s = LEAD
    c.ec2().create_launch_template_version(LaunchTemplateName=c.lt_name, LaunchTemplateData={
        "ImageId": "ami-0a1b2c3d4e5f60718", "InstanceType": "p5.48xlarge",
        "MetadataOptions": NODE_METADATA,
        "InstanceMarketOptions": {"MarketType": "capacity-block"}})
    return c, proxy


def test_a_capacity_block_runs_jobs_inside_its_window_and_none_past_it(make_cluster) -> None:  # type: ignore[no-untyped-def]
    capacity_block_scenario(make_cluster)


def capacity_block_scenario(make_cluster, **opts: object) -> None:  # type: ignore[no-untyped-def]
    """A 3-minute block opening a minute in: jobs pend before it, start at its start, none
    outlasts its close, one still running then is requeued, nothing is left at its end."""
    from datetime import UTC, datetime, timedelta

    margin = 80
    c, proxy = _block_pool(make_cluster, [BLOCK], margin, **opts)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=60)
    end = start + timedelta(seconds=180)
    close = end.timestamp() - margin
    proxy.capacity.add(Reservation(BLOCK, "p5.48xlarge", total=4,
                                   reservation_type="capacity-block", start=start, end=end))
    part = ("-p", "gpu-cb", "--gres=gpu:8")
    # before the daemon's first pass: the rendered slurm.conf has the partition DOWN, so a
    # job submitted now pends (it would otherwise start at once, outside any window)
    assert "State=DOWN" in c.slurm("scontrol", "show", "partition", "gpu-cb", "-o")
    early = c.sbatch("-N", "1", "--time=1", *part, "--wrap", "sleep 1")
    wait_for("the early job pending", lambda: c.job(early).get("Reason") == "PartitionDown", 30)
    c.start_daemon()
    wait_for("the pool closed until the block starts",
             lambda: "slurmscale-block-gpu-cb" in c.slurm("scontrol", "show", "res", "-o"),
             30)
    wait_for("the partition opened", lambda: "State=UP" in c.slurm(
        "scontrol", "show", "partition", "gpu-cb", "-o"), 30)
    assert c.job(early)["JobState"] == "PENDING", c.job(early)
    c.slurm("scancel", str(early))
    gang = c.sbatch("-N", "2", "--time=1", *part, "--wrap", "sleep 20")
    # a time limit that runs past the window's close: never started in this block
    too_long = c.sbatch("-N", "1", "--time=4", *part, "--wrap", "sleep 10")
    # fits the window when it starts; an admin extends it later, past the close
    tail = c.sbatch("-N", "1", "--time=1", *part, "--wrap", "sleep 300")
    wait_for("the gang pending", lambda: c.job(gang).get("Reason") not in ("", "None"), 30)
    assert c.job(gang)["JobState"] == "PENDING", c.job(gang)
    pending_reason = c.job(gang)["Reason"]
    ids = {str(gang), str(tail), str(too_long)}

    def block_with_jobs() -> dict | None:
        # the daemon's plan of its last pass: the one after the submissions lists them
        (b,) = json.loads(c.cli("plan", "--json").stdout)["blocks"]
        return b if ids <= {j["job_id"] for j in b["jobs"]} else None
    block = wait_for("the plan lists the block's pending jobs", block_with_jobs, 30)
    assert not block["open"] and "waiting for block" in block["reason"]
    said = {j["job_id"]: j["reason"] for j in block["jobs"]}
    assert said[str(gang)].startswith("starts when block"), said
    assert said[str(tail)].startswith("starts when block"), said
    assert "runs past the window's close" in said[str(too_long)], said

    c.wait_job(gang, {"RUNNING", "COMPLETED"}, 150)
    c.wait_job(tail, {"RUNNING"}, 60)
    launched = [e for e in c.events() if e["kind"] == "launch_requested"]
    first = datetime.fromisoformat(launched[0]["at"]).timestamp()
    assert 0 <= first - start.timestamp() <= 45, (first - start.timestamp(), launched)
    fleets = proxy.fleet_calls()
    assert fleets and all(x.status == 200 and x.params.get(
        "ReservedCapacityOptions.CapacityReservationTarget.CapacityReservationId.1") == BLOCK
        for x in fleets), [x.params for x in fleets]
    c.slurm("scontrol", "update", f"JobId={tail}", "TimeLimit=10")

    def requeued() -> bool:
        j = c.job(tail)
        return j.get("Restarts") == "1" and j.get("JobState") == "PENDING"
    wait_for("the job still running at the close requeued", requeued,
             close - datetime.now(UTC).timestamp() + 30)
    assert datetime.now(UTC).timestamp() >= close - 5
    c.wait_job(gang, {"COMPLETED"}, 30)
    wait_for("the block's instances released before its end",
             lambda: not c.cluster_instances(), end.timestamp() - datetime.now(UTC).timestamp())
    assert datetime.now(UTC) < end
    wait_for("the block over", lambda: datetime.now(UTC) > end + timedelta(seconds=5), 120)
    c.events()  # a pass after the end: the proxy takes back whatever is left
    assert proxy.capacity.taken_back == [], "slurmscale released everything before EC2 did"
    assert not c.cluster_instances()
    assert c.job(too_long)["JobState"] == "PENDING" and c.job(too_long)["Restarts"] == "0"
    assert c.job(tail)["JobState"] == "PENDING", "requeued, never FAILED"
    kinds = [e["kind"] for e in c.events()]
    assert kinds.count("block_job_requeued") == 1 and "block_closed" in kinds
    for n in range(1, 5):
        assert "POWERED_DOWN" in c.node(f"cb-{n}")["State"], c.node(f"cb-{n}")
    report = json.loads(c.cli("report", "--since", "1h", "--format", "json").stdout)
    (paid,) = report["paid_capacity"]
    assert paid["kind"] == "capacity-block" and paid["paid_node_hours"] == round(4 * 180 / 3600, 2)
    assert 0 < paid["used_node_hours"] < paid["paid_node_hours"], paid
    print(f"block: paid {paid['paid_node_hours']} node-h, used {paid['used_node_hours']}, "
          f"utilisation {paid['utilization']}")
    print(f"pending reason before the block: {pending_reason}; first launch "
          f"{first - start.timestamp():.1f}s after the start")


BLOCK_B = "cr-0b1c2d3e4f5a60002"


def _two_blocks(make_cluster, margin: float, a_s: float, gap_s: float, b_s: float):  # type: ignore[no-untyped-def]
    """A block pool over BLOCK and BLOCK_B, Slurm's own scheduling clocks compressed with the
    scenario's (defaults: 30 s and 60 s): A from 40 s on for `a_s`, B `gap_s` after A's end
    for `b_s`. Returns the cluster, the proxy and (A's start, A's end, B's start, B's end)."""
    from datetime import UTC, datetime, timedelta

    c, proxy = _block_pool(
        make_cluster, [BLOCK, BLOCK_B], margin,
        slurm_conf_extra=["SchedulerParameters=bf_interval=5,sched_interval=5"])
    a0 = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=40)
    a1 = a0 + timedelta(seconds=a_s)
    b0 = a1 + timedelta(seconds=gap_s)
    b1 = b0 + timedelta(seconds=b_s)
    for bid, s0, e0 in ((BLOCK, a0, a1), (BLOCK_B, b0, b1)):
        proxy.capacity.add(Reservation(bid, "p5.48xlarge", total=4,
                                       reservation_type="capacity-block", start=s0, end=e0))
    return c, proxy, (a0, a1, b0, b1)


def _block_targets(proxy) -> list[str | None]:  # type: ignore[no-untyped-def]
    """The block each answered fleet named, in launch order."""
    return [x.params.get("ReservedCapacityOptions.CapacityReservationTarget."
                         "CapacityReservationId.1") for x in proxy.fleet_calls()
            if x.status == 200]


def test_two_blocks_with_a_gap_every_job_inside_one_window(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Two blocks and a gap between them, on a compressed clock (blocks of minutes, EC2's
    30-minute early terminations as LEAD seconds). Jobs submitted before, in and between the
    blocks: each starts and ends inside one window, none runs past a close; a job whose limit
    fits only the first window runs there, one that fits neither never starts; no reservation
    edit is refused; each block's fleets name that block, and slurmscale releases every
    instance before EC2's terminations begin."""
    from datetime import UTC, datetime, timedelta

    margin = 40
    # A: usable 160 s, a 2-minute limit fits, 3 do not; B: usable 90 s, 1 minute fits, 2 not
    c, proxy, (a0, a1, b0, b1) = _two_blocks(make_cluster, margin, 200, 20, 130)
    windows = [(a0.timestamp(), a1.timestamp() - margin), (b0.timestamp(), b1.timestamp() - margin)]
    c.start_daemon()
    part = ("-p", "gpu-cb", "--gres=gpu:8")
    before = {
        "gang": c.sbatch("-N", "2", "--time=1", *part, "--wrap", "sleep 15"),
        "first_only": c.sbatch("-N", "1", "--time=2", *part, "--wrap", "sleep 10"),
        "neither": c.sbatch("-N", "1", "--time=3", *part, "--wrap", "sleep 5"),
    }
    seen: dict[int, tuple[float, float]] = {}

    def note(job: int) -> bool:
        j = c.job(job)
        if j.get("JobState") == "COMPLETED":
            from slurmscale.policy.observe import slurm_time

            seen[job] = (slurm_time(j["StartTime"]) or 0.0, slurm_time(j["EndTime"]) or 0.0)
            return True
        return False
    wait_for("the jobs submitted before A done in A",
             lambda: note(before["gang"]) & note(before["first_only"]), 200)
    in_a = c.sbatch("-N", "1", "--time=1", *part, "--wrap", "sleep 5")
    wait_for(f"job {in_a} done", lambda: note(in_a), 90)
    wait_for("A closed", lambda: datetime.now(UTC).timestamp() > windows[0][1] + 2, 150)
    between = c.sbatch("-N", "2", "--time=1", *part, "--wrap", "sleep 10")
    too_long_for_b = c.sbatch("-N", "1", "--time=2", *part, "--wrap", "sleep 5")
    wait_for(f"job {between} done in B", lambda: note(between), 240)
    wait_for("B over", lambda: datetime.now(UTC) > b1 + timedelta(seconds=3), 200)
    c.events()  # (a pass after B's end: the proxy takes back whatever is left)
    for job, (s, e) in seen.items():
        assert any(w0 - 2 <= s and e <= w1 + 2 for w0, w1 in windows), (job, s, e, windows)
    assert seen[between][0] >= windows[1][0] - 2, "the job submitted in the gap ran in B"
    for job in (before["neither"], too_long_for_b):
        j = c.job(job)
        assert j["JobState"] == "PENDING" and j["Restarts"] == "0", j
    kinds = [e["kind"] for e in c.events()]
    assert "slurm_update_failed" not in kinds, [e for e in c.events()
                                                 if e["kind"] == "slurm_update_failed"]
    targets = _block_targets(proxy)
    assert BLOCK in targets and BLOCK_B in targets, targets
    assert proxy.capacity.taken_back == [], "slurmscale released everything before EC2 did"
    assert not c.cluster_instances()
    print(f"two blocks: jobs {sorted(seen)} each inside one window; fleets named {targets}")


def test_touching_blocks_are_two_windows_and_no_job_runs_across_the_boundary(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Block B starts the second block A ends (issue 45): A's instances end with A, B's are
    new ones. A job whose limit fits only A and B together never starts; one that fits A
    runs in A; one submitted after A's close runs in B, on a fleet that names B; EC2's
    terminations (LEAD before each end) take back nothing of a job's."""
    from datetime import UTC, datetime, timedelta

    from slurmscale.policy.observe import slurm_time

    margin = 40
    # A: usable 110 s, a 1-minute limit fits, 2 do not; B from A's end on
    c, proxy, (a0, a1, _b0, b1) = _two_blocks(make_cluster, margin, 150, 0, 150)
    c.start_daemon()
    part = ("-p", "gpu-cb", "--gres=gpu:8")
    # 3 minutes fit A and B together (260 s without the gap), neither alone
    across = c.sbatch("-N", "1", "--time=3", *part, "--wrap", "sleep 5")
    in_a = c.sbatch("-N", "2", "--time=1", *part, "--wrap", "sleep 10")
    c.wait_job(in_a, {"COMPLETED"}, 200)
    wait_for("A closed", lambda: datetime.now(UTC).timestamp() > a1.timestamp() - margin + 2,
             150)
    in_b = c.sbatch("-N", "1", "--time=1", *part, "--wrap", "sleep 5")
    c.wait_job(in_b, {"COMPLETED"}, 150)
    runs = {j: (slurm_time(c.job(j)["StartTime"]) or 0.0, slurm_time(c.job(j)["EndTime"]) or 0.0)
            for j in (in_a, in_b)}
    assert a0.timestamp() - 2 <= runs[in_a][0] and runs[in_a][1] <= a1.timestamp() - margin + 2
    assert runs[in_b][0] >= a1.timestamp() - 2, "the job submitted after A's close ran in B"
    j = c.job(across)
    assert j["JobState"] == "PENDING" and j["Restarts"] == "0", j
    wait_for("B over", lambda: datetime.now(UTC) > b1 + timedelta(seconds=3), 200)
    c.events()  # (a pass after B's end: the proxy takes back whatever is left)
    targets = _block_targets(proxy)
    assert targets and targets[0] == BLOCK and targets[-1] == BLOCK_B, targets
    assert proxy.capacity.taken_back == [], "nothing left for EC2's terminations"
    plan_reason = json.loads(c.cli("plan", "--json").stdout)["blocks"]
    print(f"touching blocks: job {across} (3-minute limit) never started; fleets named "
          f"{targets}; plan after: {[b['reason'] for b in plan_reason]}")


CR_I = "cr-0a1b2c3d4e5f60009"


def test_gangs_go_by_id_into_an_interruptible_reservation_and_a_reclaim_requeues_once(
        make_cluster) -> None:
    """No resource group, no second template version: the pool lists its reservation's id,
    and a gang that fits whole goes in with a reserved-capacity fleet naming it (the request
    botocore sent, as the proxy read it); the next gang, which does not fit, goes wholly to
    on-demand. The reservation is interruptible: its owner's reclaim warning (EventBridge's
    "EC2 Capacity Reservation Instance Interruption Warning") requeues the gang once, as a
    spot interruption would; nothing FAILED."""
    from slurmscale.cloud.eventbridge import EventKind, event_message
    from slurmscale.slurm.reasons import Why

    c, proxy = make_cluster(start_daemon=False, pools=[PoolSpec(
        "gpu-od", "od-", 8, capacity_type="on-demand",
        extra={"capacity_reservations": {"ids": [CR_I]}})])
    proxy.capacity.add(Reservation(CR_I, "p5.48xlarge", total=4, interruptible=True))
    c.start_daemon()
    gang = ("-N", "4", "--gres=gpu:8", "-p", "gpu-od", "--wrap")
    first = c.sbatch(*gang, "sleep 120")
    c.wait_job(first, {"RUNNING"}, 150)
    second = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-od", "--wrap", "sleep 1")
    c.wait_job(second, {"COMPLETED"}, 150)
    (into, elsewhere) = proxy.fleet_calls()[:2]
    rco = "ReservedCapacityOptions."
    assert into.params["TargetCapacitySpecification.DefaultTargetCapacityType"] == \
        "reserved-capacity"
    assert into.params[rco + "ReservationType.1"] == "interruptible-capacity-reservation"
    assert into.params[rco + "CapacityReservationTarget.CapacityReservationId.1"] == CR_I
    assert "OnDemandOptions.MinTargetCapacity" not in into.params
    assert elsewhere.params["TargetCapacitySpecification.DefaultTargetCapacityType"] == \
        "on-demand" and not any(k.startswith(rco) for k in elsewhere.params)
    inside = set(proxy.capacity.in_reservation())
    assert _job_instances(c, first) == inside and len(inside) == 4
    (paid,) = json.loads(c.cli("status", "--json").stdout)["paid_capacity"]
    assert paid["kind"] == "interruptible", paid

    victim = sorted(inside)[0]
    assert c.job(first)["JobState"] == "RUNNING"
    c.send_event(event_message(EventKind.RESERVATION_INTERRUPTION, victim,
                               "2026-12-01T12:00:00Z", **{"instance-action": "terminate"}))
    wait_for("the gang requeued once", lambda: c.job(first).get("Restarts") == "1", 60)
    # Slurm's own requeue ran (with its delay): the node was powered down only after the job
    # had finished completing there; before, Slurm 22.05 sometimes skipped it and started
    # the job again at once on nodes that had just revoked its credential (FAILED)
    ctld = c.root / "log" / "slurmctld.log"
    wait_for("slurmctld's requeue of the gang",
             lambda: f"Requeuing JobId={first}" in ctld.read_text(errors="replace"), 90)
    assert c.wait_job(first, {"COMPLETED"}, 400) == "COMPLETED"
    assert c.job(first)["Restarts"] == "1"
    kinds = [e["kind"] for e in c.events()]
    assert kinds.count("job_requeued") == 1 and "node_evacuated" in kinds
    reasons = [e["message"] for e in c.events() if e["kind"] == "node_evacuated"]
    assert any(Why.RECLAIMED.value in r and "1 job(s) requeued" in r for r in reasons), reasons


@pytest.mark.parametrize("margin", [10, 90])
def test_a_margin_under_ec2s_lead_loses_the_job_and_the_new_default_never_starts_it(
        make_cluster, margin: int) -> None:
    """EC2 begins terminating a block's instances before its end (30 minutes; here, on a
    compressed clock, 60 s). A job submitted 60 s into a 200 s block with a 2-minute limit:
    with a margin under that lead (10 s, as the old default SuspendTimeout + 300 s is under
    30 minutes) Slurm starts it, EC2 takes its instance back mid-run and the job is requeued;
    with the new default's form (the lead + 30 s) it never starts in this block."""
    from datetime import UTC, datetime, timedelta

    lead = 60
    c, proxy = _block_pool(
        make_cluster, [BLOCK], margin,
        slurm_conf_extra=["SchedulerParameters=bf_interval=5,sched_interval=5"])
    proxy.capacity.termination_lead_s = lead
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=40)
    end = start + timedelta(seconds=200)
    proxy.capacity.add(Reservation(BLOCK, "p5.48xlarge", total=4,
                                   reservation_type="capacity-block", start=start, end=end))
    c.start_daemon()
    wait_for("60 s into the block", lambda: datetime.now(UTC) > start + timedelta(seconds=60),
             150)
    job = c.sbatch("-N", "1", "--time=2", "-p", "gpu-cb", "--gres=gpu:8", "--wrap",
                   "sleep 110")
    if margin < lead:  # requeued after EC2's terminations began, before slurmscale's close
        def requeued() -> bool:
            j = c.job(job)
            return j.get("Restarts") == "1" and j.get("JobState") == "PENDING"
        wait_for("EC2's early terminations requeue the job", requeued,
                 (end - datetime.now(UTC)).total_seconds() - margin)
        assert (end - datetime.now(UTC)).total_seconds() < lead + 5
    wait_for("the block over", lambda: datetime.now(UTC) > end + timedelta(seconds=3), 260)
    c.events()  # (a pass after the end)
    j = c.job(job)
    if margin < lead:
        assert proxy.capacity.taken_back, "EC2 took an instance back mid-run"
        assert j["Restarts"] == "1" and j["JobState"] == "PENDING", j
    else:
        assert proxy.capacity.taken_back == []
        assert j["Restarts"] == "0" and j["JobState"] == "PENDING", j
        assert not [x for x in proxy.fleet_calls() if x.status == 200]


def test_an_extension_moves_the_close_and_the_expiration_warning_closes_at_once(
        make_cluster) -> None:
    """A block running a job is extended (the end EC2 reports moves, as after
    PurchaseCapacityBlockExtension): the reservation that closes the pool moves with it, in
    place. Then EC2's Expiration Warning arrives on the events queue while the window is,
    by slurmscale's reckoning, still open (a clock or a config out of step with EC2's): the
    block closes at once, the running job is requeued, never FAILED, and its node powered
    down, long before the close slurmscale had planned and before any EC2 termination."""
    from datetime import UTC, datetime, timedelta

    from slurmscale.cloud.eventbridge import EventKind
    from slurmscale.policy.observe import slurm_time
    from tests.support.eventbridge_messages import block_message

    margin = 40
    c, proxy = _block_pool(make_cluster, [BLOCK], margin)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=30)
    end = start + timedelta(seconds=600)
    block = proxy.capacity.add(Reservation(BLOCK, "p5.48xlarge", total=4,
                                           reservation_type="capacity-block", start=start,
                                           end=end))
    c.start_daemon()

    def close_at() -> float | None:
        """When Slurm's reservation closing the pool after the block starts."""
        for line in c.slurm("scontrol", "show", "res", "-o").splitlines():
            f = dict(w.split("=", 1) for w in line.split() if "=" in w)
            if f.get("ReservationName", "").startswith("slurmscale-block-gpu-cb-after"):
                return slurm_time(f["StartTime"])
        return None

    seen: list[float | None] = [None]

    def closes(want: float, what: str, timeout: float) -> None:
        """Wait for Slurm's close at `want`; a timeout says where it was instead."""
        def check() -> bool:
            seen[0] = close_at()
            return seen[0] == want
        try:
            wait_for(what, check, timeout)
        except TimeoutError as e:
            raise AssertionError(f"{e}: Slurm's close at {seen[0]}, wanted {want} (the block "
                                 f"ends {end.isoformat()})") from None

    closes(end.timestamp() - margin, "the close planned at the block's end less the margin", 60)
    job = c.sbatch("-N", "1", "--time=3", "-p", "gpu-cb", "--gres=gpu:8", "--wrap", "sleep 900")
    c.wait_job(job, {"RUNNING"}, 150)
    with proxy.capacity.lock:
        block.end = end = end + timedelta(seconds=300)
    closes(end.timestamp() - margin, "the close moved with the extension", 90)
    assert c.job(job)["JobState"] == "RUNNING"

    c.send_event(block_message(EventKind.BLOCK_EXPIRING, BLOCK,
                               datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                               end.strftime("%Y-%m-%dT%H:%M:%SZ")))
    warned = datetime.now(UTC)

    def requeued() -> bool:
        j = c.job(job)
        return j.get("Restarts") == "1" and j.get("JobState") == "PENDING"
    wait_for("the warning requeues the job at once", requeued, 60)
    wait_for("the node powered down", lambda: "POWERED_DOWN" in c.node("cb-1")["State"], 90)
    wait_for("the block's instance released", lambda: not c.cluster_instances(), 90)
    took = (datetime.now(UTC) - warned).total_seconds()
    assert took < 120
    assert proxy.capacity.taken_back == [], "slurmscale released everything before EC2 did"
    events = c.events()
    kinds = [e["kind"] for e in events]
    assert "block_expiring" in kinds and "block_closed" in kinds, kinds
    assert "slurm_update_failed" not in kinds
    moved = (end - timedelta(seconds=margin)).strftime("%Y-%m-%d %H:%M:%SZ")
    assert any(e["kind"] == "block_reservation" and f"from {moved}" in e["message"]
               for e in events), [e["message"] for e in events if e["kind"] == "block_reservation"]
    print(f"extension: the close moved to {moved}; warning to node released {took:.0f}s")


def _past_the_close_and_warned(c, job: int, close: float, end) -> None:  # type: ignore[no-untyped-def]
    """The running job's limit extended past the block's close; at the close, EC2's
    Expiration Warning for BLOCK, sent with the close as its time."""
    from datetime import UTC, datetime

    from slurmscale.cloud.eventbridge import EventKind
    from tests.support.eventbridge_messages import block_message

    c.slurm("scontrol", "update", f"JobId={job}", "TimeLimit=10")
    wait_for("the close", lambda: datetime.now(UTC).timestamp() >= close,
             close - datetime.now(UTC).timestamp() + 30)
    c.send_event(block_message(EventKind.BLOCK_EXPIRING, BLOCK,
                               datetime.fromtimestamp(close, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                               end.strftime("%Y-%m-%dT%H:%M:%SZ")))


def test_an_expiration_warning_on_time_closes_the_block_once_at_the_planned_close(
        make_cluster) -> None:  # type: ignore[no-untyped-def]
    """AWS's timing, on the scenarios' compressed clock (30 minutes are LEAD = 30 s, so the
    warning's 10 minutes before the terminations are 10 s): the Expiration Warning comes at
    the end less LEAD + 10 s, which the margin's default form makes the planned close. The
    block closes once, at that time: the job still running then is requeued once, never
    before the close Slurm planned against, and nothing is left to EC2's terminations."""
    from datetime import UTC, datetime, timedelta

    # the default margin's floor, termination_lead_s + 600 s (config.default_block_margin_s),
    # on the compressed clock: the warning's lead
    margin = LEAD + 10
    c, proxy = _block_pool(make_cluster, [BLOCK], margin)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=30)
    end = start + timedelta(seconds=150)
    close = end.timestamp() - margin
    proxy.capacity.add(Reservation(BLOCK, "p5.48xlarge", total=4,
                                   reservation_type="capacity-block", start=start, end=end))
    c.start_daemon()
    job = c.sbatch("-N", "1", "--time=1", "-p", "gpu-cb", "--gres=gpu:8", "--wrap", "sleep 300")
    c.wait_job(job, {"RUNNING"}, 150)
    _past_the_close_and_warned(c, job, close, end)

    def requeued() -> bool:
        j = c.job(job)
        return j.get("Restarts") == "1" and j.get("JobState") == "PENDING"
    wait_for("the job requeued at the close", requeued, 60)
    wait_for("the block's instance released", lambda: not c.cluster_instances(),
             end.timestamp() - LEAD - datetime.now(UTC).timestamp())
    events = c.events()
    kinds = [e["kind"] for e in events]
    assert kinds.count("block_job_requeued") == 1 and "block_expiring" in kinds, kinds
    assert kinds.count("block_closed") == 1, kinds
    assert "slurm_update_failed" not in kinds
    (at,) = [datetime.fromisoformat(e["at"]).timestamp() for e in events
             if e["kind"] == "block_job_requeued"]
    assert close - 1 <= at <= close + 10, (at - close, "the requeue at the planned close")
    assert proxy.capacity.taken_back == [], "nothing left for EC2's terminations"
    assert c.job(job)["Restarts"] == "1"
    print(f"on-time warning: requeued {at - close:+.1f}s from the planned close, once")


def test_a_closing_block_signals_its_gang_which_saves_and_is_requeued_before_ec2(
        make_cluster) -> None:  # type: ignore[no-untyped-def]
    """The pool's grace_signal at a block's close, which EC2's Expiration Warning marks: the
    2-node gang still running gets SIGUSR1 in its batch script and writes its checkpoint;
    the daemon is SIGKILLed right after the signal; the restarted daemon signals no second
    time and requeues the gang at EC2's terminations less the signal's margin; nothing is
    left to EC2's terminations; the rerun (moved to on-demand by hand: the block is over)
    resumes from the checkpoint. Restarts 1, never FAILED.

    On the compressed clock: the terminations LEAD = 30 s before the end, the close and the
    warning 40 s before those (AWS: 10 minutes), the signal's margin 20 s."""
    from datetime import UTC, datetime, timedelta

    from tests.integration.test_interruptions import CHECKPOINTING_JOB

    margin, signal_margin = LEAD + 40, 20
    c, proxy = _block_pool(make_cluster, [BLOCK], margin,
                           pool={"grace_signal": {"margin_s": signal_margin}},
                           others=(PoolSpec("gpu-od", "od-", 2, capacity_type="on-demand"),),
                           cred_expire=15)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=30)
    end = start + timedelta(seconds=190)
    close, requeue_at = end.timestamp() - margin, end.timestamp() - LEAD - signal_margin
    proxy.capacity.add(Reservation(BLOCK, "p5.48xlarge", total=4,
                                   reservation_type="capacity-block", start=start, end=end))
    c.start_daemon({"SLURMSCALE_TEST_MODE": "1", "SLURMSCALE_CRASH_AT": "grace:after_signal"})
    script = c.root / "checkpointing.sh"
    script.write_text(CHECKPOINTING_JOB.format(root=c.root))
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-cb", "--time=1", str(script))
    c.wait_job(job, {"RUNNING"}, 150)
    _past_the_close_and_warned(c, job, close, end)
    save = c.root / f"ckpt-{job}"
    wait_for("the daemon killed right after the signal", lambda: not c.procs.running("daemon"),
             30)
    wait_for("the job's checkpoint written on its signal", save.exists, 20)
    assert c.job(job)["JobState"] == "RUNNING" and c.job(job)["Restarts"] == "0"
    c.start_daemon()  # without the crash point
    status = json.loads(c.cli("status", "--json").stdout)
    assert {g["job_id"] for g in status["in_grace"]} == {str(job)}, status["in_grace"]
    wait_for("the job requeued once", lambda: c.job(job).get("Restarts") == "1",
             requeue_at - datetime.now(UTC).timestamp() + 20)
    wait_for("the block's instances released", lambda: not c.cluster_instances(),
             end.timestamp() - LEAD - datetime.now(UTC).timestamp())
    c.wait_job(job, {"PENDING"}, 30)
    c.slurm("scontrol", "update", f"JobId={job}", "Partition=gpu-od")
    state = c.wait_job(job, {"COMPLETED"}, 240)  # wait_job fails at once on FAILED
    assert state == "COMPLETED" and c.job(job)["Restarts"] == "1"
    resumed = (c.root / f"ckpt-{job}.resumed").read_text()
    assert resumed.startswith("resumed from step ") and resumed.strip().endswith("restart 1")
    # (every block instance released before EC2's terminations began: none for them to take)
    assert proxy.capacity.taken_back == []

    events = c.events()
    kinds = [e["kind"] for e in events]
    assert kinds.count("job_signalled") == 1, "signalled once, across the restart"
    assert kinds.count("job_requeued") == 1 and "block_job_requeued" not in kinds, kinds
    assert "job_left_in_grace" not in kinds and "slurm_update_failed" not in kinds
    (signalled,) = [datetime.fromisoformat(e["at"]).timestamp() for e in events
                    if e["kind"] == "job_signalled"]
    (requeued,) = [datetime.fromisoformat(e["at"]).timestamp() for e in events
                   if e["kind"] == "job_requeued"]
    assert close - 1 <= signalled <= close + 10, signalled - close
    assert requeue_at - 1 <= requeued < end.timestamp() - LEAD, requeued - requeue_at
    print(f"block grace: SIGUSR1 {signalled - close:+.1f}s from the close, written as "
          f"{save.read_text().strip()!r}; requeued {requeued - requeue_at:+.1f}s from its "
          f"planned time, {end.timestamp() - LEAD - requeued:.1f}s before EC2's "
          f"terminations; {resumed.strip()}")


def test_a_kill_while_a_block_closes_and_the_restart_finishes_the_close(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL the daemon in the middle of a block's close: after it requeued the job still
    running and before it powered the node down. The restarted daemon finishes the close from
    what Slurm and EC2 show: the job requeued once, never FAILED, never started again in the
    block; its node powered down and its instance released before EC2's terminations."""
    from datetime import UTC, datetime, timedelta

    margin = 60
    c, proxy = _block_pool(make_cluster, [BLOCK], margin)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=30)
    end = start + timedelta(seconds=240)
    proxy.capacity.add(Reservation(BLOCK, "p5.48xlarge", total=4,
                                   reservation_type="capacity-block", start=start, end=end))
    c.start_daemon({"SLURMSCALE_TEST_MODE": "1", "SLURMSCALE_CRASH_AT": "block:after_requeue"})
    job = c.sbatch("-N", "1", "--time=1", "-p", "gpu-cb", "--gres=gpu:8", "--wrap", "sleep 900")
    c.wait_job(job, {"RUNNING"}, 150)
    c.slurm("scontrol", "update", f"JobId={job}", "TimeLimit=20")  # now runs past the close
    close = end.timestamp() - margin
    wait_for("the daemon killed in the close", lambda: not c.procs.running("daemon"),
             close - datetime.now(UTC).timestamp() + 60)
    # requeued before the kill: Restarts 1 at once; PENDING once Slurm has finished
    # completing it on the node (KillWait and the epilog: seconds under load)
    assert c.job(job)["Restarts"] == "1", c.job(job)
    c.wait_job(job, {"PENDING"}, 60)
    c.start_daemon()  # restarted without the crash point
    wait_for("the node powered down", lambda: "POWERED_DOWN" in c.node("cb-1")["State"], 90)
    wait_for("the block's instance released", lambda: not c.cluster_instances(), 60)
    (released,) = [x.at for x in proxy.calls if x.action == "TerminateInstances"]
    assert released < end.timestamp() - LEAD, "released before EC2's terminations"
    assert proxy.capacity.taken_back == []
    j = c.job(job)
    assert j["Restarts"] == "1" and j["JobState"] == "PENDING", j
    kinds = [e["kind"] for e in c.events()]
    assert kinds.count("block_job_requeued") == 1 and "block_closed" in kinds, kinds
    print(f"kill in a block's close: the restart released the node "
          f"{end.timestamp() - LEAD - released:.0f}s before EC2's terminations; the job "
          "requeued once")
