"""Faults AWS really produces, injected at the EC2 boundary in AWS's shapes: throttling on
CreateFleet is retried with backoff and is never a capacity error."""

from __future__ import annotations

import pytest

from tests.support.ec2_proxy import Fault

pytestmark = pytest.mark.slurm


def test_throttled_create_fleet_is_retried_and_launches(make_cluster) -> None:  # type: ignore[no-untyped-def]
    c, proxy = make_cluster(aws_max_attempts=4)
    proxy.faults.append(Fault("CreateFleet", "api_error", code="RequestLimitExceeded",
                              message="Request limit exceeded.", status=503, times=2))
    job = c.sbatch("-N", "2", "--gres=gpu:8", "-p", "gpu-spot", "--wrap", "sleep 1")
    c.wait_job(job, {"COMPLETED"}, 180)
    calls = proxy.fleet_calls()
    assert [x.status for x in calls] == [503, 503, 200]
    assert len({x.params.get("ClientToken") for x in calls}) == 1, "one request, retried"
    kinds = [e["kind"] for e in c.events()]
    assert "launch_failed" not in kinds and kinds.count("launched") == 1


def test_no_spot_capacity_falls_back_to_on_demand_until_the_ttl_ends(make_cluster) -> None:  # type: ignore[no-untyped-def]
    from slurmscale.hostlists import expand
    from slurmscale.localcluster.options import PoolSpec
    from slurmscale.localcluster.procs import wait_for

    c, proxy = make_cluster(
        pools=[PoolSpec("gpu-spot", "spot-", 4, fallback_pool="gpu-od"),
               PoolSpec("gpu-od", "od-", 2, capacity_type="on-demand")],
        capacity={"unavailable_ttl_s": 45, "max_unavailable_ttl_s": 90},
        cred_expire=15)  # the requeued job is eligible again well inside the TTL
    proxy.faults.append(Fault("CreateFleet", "none", code="InsufficientInstanceCapacity",
                              capacity_type="spot"))

    def spot_fleets() -> int:
        return sum(1 for x in proxy.fleet_calls()
                   if x.params.get("TargetCapacitySpecification.DefaultTargetCapacityType")
                   == "spot")

    both = ("-p", "gpu-spot,gpu-od", "--gres=gpu:8", "-N", "1")
    first = c.sbatch(*both, "--wrap", "sleep 1")
    wait_for("spot marked unavailable",
             lambda: any(e["kind"] == "capacity_unavailable" for e in c.events()), 90)
    # a second job inside the TTL does not try spot again
    second = c.sbatch(*both, "--wrap", "sleep 1")
    for job in (first, second):  # the first was requeued when its spot launch failed
        c.wait_job(job, {"COMPLETED"}, 180)
        assert all(n.startswith("od-") for n in expand(c.job(job)["NodeList"])), c.job(job)
    assert spot_fleets() == 1, "spot was not retried inside the TTL"
    # after the TTL, spot is tried again (and now works)
    wait_for("spot nodes returned",
             lambda: any(e["kind"] == "capacity_retry" for e in c.events()), 120)
    third = c.sbatch(*both, "--wrap", "sleep 1")
    c.wait_job(third, {"COMPLETED"}, 180)
    assert spot_fleets() == 2
    assert all(n.startswith("spot-") for n in expand(c.job(third)["NodeList"]))
