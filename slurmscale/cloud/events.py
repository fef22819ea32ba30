"""EC2 events as EventBridge delivers them to an SQS queue: parsed at the boundary with
pydantic, so a malformed or foreign message is a clear error the daemon records and drops,
never an exception in the loop."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from slurmscale.validation import first_problem


class EventKind(StrEnum):
    SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
    REBALANCE = "EC2 Instance Rebalance Recommendation"
    STATE_CHANGE = "EC2 Instance State-change Notification"


class _Detail(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    instance_id: Annotated[str, Field(alias="instance-id", pattern=r"^i-[0-9a-f]{8,32}$")]
    instance_action: Annotated[str | None, Field(alias="instance-action")] = None
    state: str | None = None


class _Envelope(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    source: str
    detail_type: Annotated[str, Field(alias="detail-type")]
    time: str = ""
    detail: _Detail


class EventError(ValueError):
    """The message is not an EC2 event slurmscale understands; the text says why."""


class Ec2Event(BaseModel):
    kind: EventKind
    instance_id: str
    time: str
    action: str | None = None  # spot warnings: terminate | stop | hibernate
    state: str | None = None  # state changes: pending | running | shutting-down | ...


def parse_event(body: str) -> Ec2Event:
    try:
        data: Any = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise EventError(f"not JSON: {e.msg if hasattr(e, 'msg') else e}") from None
    if not isinstance(data, dict):
        raise EventError(f"expected a JSON object, got {type(data).__name__}")
    try:
        env = _Envelope.model_validate(data)
    except ValidationError as e:
        raise EventError(first_problem(e)) from None
    if env.source != "aws.ec2":
        raise EventError(f"source {env.source!r} is not aws.ec2")
    try:
        kind = EventKind(env.detail_type)
    except ValueError:
        raise EventError(f"detail-type {env.detail_type!r} is not one slurmscale acts on") from None
    return Ec2Event(kind=kind, instance_id=env.detail.instance_id, time=env.time,
                    action=env.detail.instance_action, state=env.detail.state)


def event_message(detail_type: str, instance_id: str, time: str, **detail: str) -> str:
    """The message body EventBridge puts on the queue for an EC2 event about `instance_id`
    (the shape AWS documents; what `parse_event` reads): `detail_type` an `EventKind` or any
    other. The simulator's cloud sends these."""
    return json.dumps({
        "version": "0", "id": f"7bf73129-1428-4cd3-a780-{instance_id[-12:]:0>12}",
        "detail-type": str(detail_type), "source": "aws.ec2", "account": "123456789012",
        "time": time, "region": "us-east-1",
        "resources": [f"arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}"],
        "detail": {"instance-id": instance_id, **detail}})
