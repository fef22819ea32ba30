"""EC2 events as an EventBridge rule delivers them to SQS (the shapes AWS documents)."""

from __future__ import annotations

from slurmscale.cloud.eventbridge import EventKind, event_message


def ec2_event(kind: str, instance: str, **detail: str) -> str:
    return event_message(kind, instance, "2026-11-29T12:00:00Z", **detail)


def spot_warning(instance: str) -> str:
    return ec2_event(EventKind.SPOT_WARNING, instance, **{"instance-action": "terminate"})
