"""EC2 events as an EventBridge rule delivers them to SQS (the shapes AWS documents)."""

from __future__ import annotations

import json


def ec2_event(kind: str, instance: str, **detail: str) -> str:
    return json.dumps({
        "version": "0", "id": f"7bf73129-1428-4cd3-a780-{instance[-12:]:0>12}",
        "detail-type": kind, "source": "aws.ec2", "account": "123456789012",
        "time": "2026-11-29T12:00:00Z", "region": "us-east-1",
        "resources": [f"arn:aws:ec2:us-east-1:123456789012:instance/{instance}"],
        "detail": {"instance-id": instance, **detail}})


def spot_warning(instance: str) -> str:
    return ec2_event("EC2 Spot Instance Interruption Warning", instance,
                     **{"instance-action": "terminate"})
