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
