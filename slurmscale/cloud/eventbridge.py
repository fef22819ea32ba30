"""EC2 events as EventBridge delivers them to an SQS queue: parsed at the boundary with
pydantic, so a malformed or foreign message is a clear error the daemon records and drops,
never an exception in the loop. Besides EC2's own events (source aws.ec2), AWS Health's
scheduled changes for EC2 instances (source aws.health, category scheduledChange: retirement,
maintenance, reboots) arrive on the same queue; one of those may name several instances."""

from __future__ import annotations

import json
import re
from datetime import datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Annotated, Any, TypeVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from slurmscale import timeframe
from slurmscale.model import ScheduledEvent
from slurmscale.validation import first_problem


class EventKind(StrEnum):
    SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
    # an interruptible capacity reservation reclaimed by its owner: its instances terminate
    # two minutes later (EC2 user guide, "Monitor interruptible Capacity Reservations")
    RESERVATION_INTERRUPTION = "EC2 Capacity Reservation Instance Interruption Warning"
    REBALANCE = "EC2 Instance Rebalance Recommendation"
    STATE_CHANGE = "EC2 Instance State-change Notification"
    SCHEDULED = "AWS Health Event"  # a scheduledChange for EC2 instances
    # EC2 user guide, "Monitor Capacity Blocks using EventBridge": a block ready to use, and
    # the warning 40 minutes before its end (its instances begin terminating 10 minutes on)
    BLOCK_DELIVERED = "Capacity Block Delivered"
    BLOCK_EXPIRING = "Capacity Block Expiration Warning"


# (the guide's pages show both names for each block event)
BLOCK_KINDS = {"Capacity Block Delivered": EventKind.BLOCK_DELIVERED,
               "Capacity Block Reservation Delivered": EventKind.BLOCK_DELIVERED,
               "Capacity Block Expiration Warning": EventKind.BLOCK_EXPIRING,
               "Capacity Block Reservation Expiration Warning": EventKind.BLOCK_EXPIRING}


class _BlockDetail(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    reservation_id: Annotated[str, Field(alias="capacity-reservation-id",
                                         pattern=r"^cr-[0-9a-f]{8,17}$")]
    end_date: Annotated[str, Field(alias="end-date")] = ""


class _BlockEnvelope(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    source: str
    time: str = ""
    detail: _BlockDetail


class _Detail(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    instance_id: Annotated[str, Field(alias="instance-id", pattern=r"^i-[0-9a-f]{8,32}$")]
    instance_action: Annotated[str | None, Field(alias="instance-action")] = None
    state: str | None = None


class _Envelope(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    source: str
    # (AWS's pages show both spellings for the reservation events)
    detail_type: Annotated[str, Field(validation_alias=AliasChoices("detail-type",
                                                                    "detail_type"))]
    time: str = ""
    detail: _Detail


class _HealthDetail(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    service: str
    event_type_code: Annotated[str, Field(alias="eventTypeCode")]
    event_type_category: Annotated[str, Field(alias="eventTypeCategory")]
    start_time: Annotated[str, Field(alias="startTime")] = ""
    affected_entities: Annotated[list[dict[str, Any]], Field(alias="affectedEntities")] = []


class _HealthEnvelope(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    detail_type: Annotated[str, Field(alias="detail-type")]
    time: str = ""
    resources: list[str] = []
    detail: _HealthDetail


E = TypeVar("E", _Envelope, _BlockEnvelope)

_INSTANCE = re.compile(r"(?:^|/)(i-[0-9a-f]{8,32})$")


class EventError(ValueError):
    """The message is not an EC2 event slurmscale understands; the text says why."""


class Ec2Event(BaseModel):
    kind: EventKind
    instance_id: str = ""  # (block events name a reservation, not an instance)
    time: str
    action: str | None = None  # spot warnings: terminate | stop | hibernate
    state: str | None = None  # state changes: pending | running | shutting-down | ...
    scheduled: ScheduledEvent | None = None  # AWS Health scheduled changes
    reservation_id: str = ""  # block events: the Capacity Block
    end: float | None = None  # block events: its end date, as the event gives it


def parse_event(body: str) -> Ec2Event:
    """The one event in a message about one instance (an EC2 event); see `parse_events`."""
    return parse_events(body)[0]


def parse_events(body: str) -> list[Ec2Event]:
    """The events a queue message carries: one for an EC2 event, one per instance an AWS
    Health scheduled change names."""
    try:
        data: Any = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise EventError(f"not JSON: {e.msg if hasattr(e, 'msg') else e}") from None
    if not isinstance(data, dict):
        raise EventError(f"expected a JSON object, got {type(data).__name__}")
    if data.get("source") == "aws.health":
        return _health_events(data)
    block = BLOCK_KINDS.get(str(data.get("detail-type", data.get("detail_type", ""))))
    if block is not None:
        return [_block_event(data, block)]
    env = _from_ec2(_Envelope, data)
    try:
        kind = EventKind(env.detail_type)
    except ValueError:
        raise EventError(f"detail-type {env.detail_type!r} is not one slurmscale acts on") from None
    return [Ec2Event(kind=kind, instance_id=env.detail.instance_id, time=env.time,
                     action=env.detail.instance_action, state=env.detail.state)]


def _from_ec2(model: type[E], data: dict[str, Any]) -> E:
    """The message as `model`, from EC2 itself (source aws.ec2), or EventError."""
    try:
        env = model.model_validate(data)
    except ValidationError as e:
        raise EventError(first_problem(e)) from None
    if env.source != "aws.ec2":
        raise EventError(f"source {env.source!r} is not aws.ec2")
    return env


def _block_event(data: dict[str, Any], kind: EventKind) -> Ec2Event:
    env = _from_ec2(_BlockEnvelope, data)
    end = aws_time(env.detail.end_date)
    if env.detail.end_date and end is None:
        raise EventError(f"end-date {env.detail.end_date!r} is not a date")
    return Ec2Event(kind=kind, time=env.time, reservation_id=env.detail.reservation_id,
                    end=end)


def _health_events(data: dict[str, Any]) -> list[Ec2Event]:
    try:
        env = _HealthEnvelope.model_validate(data)
    except ValidationError as e:
        raise EventError(first_problem(e)) from None
    d = env.detail
    if env.detail_type != EventKind.SCHEDULED or d.service != "EC2" \
            or d.event_type_category != "scheduledChange":
        raise EventError(f"AWS Health {env.detail_type!r} {d.service} {d.event_type_category} "
                         "is not an EC2 scheduled change")
    names = [str(e.get("entityValue", "")) for e in d.affected_entities] or env.resources
    ids = sorted({m.group(1) for n in names if (m := _INSTANCE.search(n))})
    if not ids:
        raise EventError(f"{d.event_type_code}: names no EC2 instance")
    ev = ScheduledEvent(d.event_type_code, aws_time(d.start_time), "AWS Health")
    return [Ec2Event(kind=EventKind.SCHEDULED, instance_id=i, time=env.time, scheduled=ev)
            for i in ids]


def aws_time(text: str) -> float | None:
    """A time an AWS event gives (AWS Health's startTime: RFC 1123, "Sat, 05 Jun 2016
    15:10:09 GMT", in its examples; ISO 8601 elsewhere, as EventBridge's `time` and a block's
    end-date) as the daemon's steady time: AWS's times are true times (timeframe.py). None
    when absent or neither."""
    if not text:
        return None
    try:
        t = parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        try:
            t = datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return timeframe.FRAME.from_true(t)


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
