"""EC2 events as an EventBridge rule delivers them to SQS (the shapes AWS documents): an EC2
instance's (slurmscale/cloud/eventbridge.event_message, which the simulator's cloud sends
too), an AWS Health scheduled change's and a Capacity Block's (the tests' alone)."""

from __future__ import annotations

import json

from slurmscale.cloud.eventbridge import EventKind, event_message


def ec2_event(kind: str, instance: str, **detail: str) -> str:
    return event_message(kind, instance, "2026-11-29T12:00:00Z", **detail)


def spot_warning(instance: str) -> str:
    return ec2_event(EventKind.SPOT_WARNING, instance, **{"instance-action": "terminate"})


def health_message(event_type_code: str, instance_ids: list[str], time: str,
                   start_time: str) -> str:
    """The message body EventBridge puts on the queue for an AWS Health scheduled change to
    EC2 instances (the shape AWS documents; what `parse_events` reads)."""
    return json.dumps({
        "version": "0", "id": "1d8d2d8e-2b0c-4a1e-9b7f-5b1f0c2d3e4f",
        "detail-type": "AWS Health Event", "source": "aws.health", "account": "123456789012",
        "time": time, "region": "us-east-1", "resources": list(instance_ids),
        "detail": {
            "eventArn": f"arn:aws:health:us-east-1::event/EC2/{event_type_code}/"
                        f"{event_type_code}_{instance_ids[0][2:]}",
            "service": "EC2", "eventTypeCode": event_type_code,
            "eventTypeCategory": "scheduledChange", "eventRegion": "us-east-1",
            "startTime": start_time,
            "eventDescription": [{"language": "en_US", "latestDescription":
                                  "EC2 has detected degradation of the underlying hardware "
                                  "hosting your instance; it is scheduled for retirement."}],
            "affectedEntities": [{"entityValue": i} for i in instance_ids]}})


def block_message(kind: EventKind, reservation_id: str, time: str, end_date: str) -> str:
    """The message body EventBridge puts on the queue for a Capacity Block event (the shape
    the EC2 user guide shows, "Monitor Capacity Blocks using EventBridge")."""
    return json.dumps({
        "customer_event_id": f"{reservation_id}-" + (
            "approaching-expiry" if kind is EventKind.BLOCK_EXPIRING else "delivered"),
        "detail-type": kind.value, "source": "aws.ec2", "account": "123456789012",
        "time": time, "resources": [
            f"arn:aws:ec2:us-east-1:123456789012:capacity-reservation/{reservation_id}"],
        "detail": {"capacity-reservation-id": reservation_id, "end-date": end_date}})
