"""The store's tables, and the records of `rows.py` mapped onto them (SQLAlchemy 2,
imperative mapping). Imported by what opens the SQL store and by the migrations only: the
records themselves need no SQLAlchemy."""

from __future__ import annotations

import json
import math
from typing import Any

from sqlalchemy import Boolean, Column, DateTime, MetaData, Table, false
from sqlalchemy import Float as SqlFloat
from sqlalchemy import Integer as SqlInteger
from sqlalchemy import String as SqlString
from sqlalchemy import Text as SqlText
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import registry
from sqlalchemy.types import TypeDecorator

from slurmscale.store import rows

# No number slurmscale stores (seconds since 1970, GPU-seconds, counts) comes near this; a
# value beyond it is a record written by hand or by a broken disk, and one a reader would fail
# on later (`datetime.fromtimestamp(1e308)`): refused as the row is read.
MAX_ABS = 6e10  # about 1,900 years of seconds: every such time is a date Python can show


def _checked(value: object, column_type: str) -> float | int:
    """A stored number as read, or ValueError naming what it is instead: SQLite keeps any
    value in any column (`'abc'` in a FLOAT, `1e308`), and the store quarantines a row whose
    value this refuses (store/repo.py, `_rows`) instead of handing it to a pass."""
    where = f"in {'an' if column_type == 'INTEGER' else 'a'} {column_type} column"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{value!r} {where} is not a number")
    if not math.isfinite(value) or abs(value) > MAX_ABS:
        raise ValueError(f"{value!r} {where} is out of range")
    if column_type == "INTEGER" and isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{value!r} {where} is not a whole number")
        return int(value)
    return value


class Float(TypeDecorator[float]):
    """FLOAT, read back only when it is a number in range (`_checked`)."""

    impl = SqlFloat
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Dialect) -> float | None:
        return None if value is None else float(_checked(value, "FLOAT"))


class Integer(TypeDecorator[int]):
    """INTEGER, read back only when it is a whole number in range (`_checked`)."""

    impl = SqlInteger
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Dialect) -> int | None:
        return None if value is None else int(_checked(value, "INTEGER"))


def _text(value: Any, column_type: str) -> str:
    """A stored string as read, or ValueError: SQLite keeps bytes (a BLOB) in a text column
    too, and every reader that printed or validated it (`status --json`, the report's
    models) failed on them."""
    if not isinstance(value, str):
        raise ValueError(f"{str(value)[:40]} in a {column_type} column is not text")
    return value


class String(TypeDecorator[str]):
    """VARCHAR, read back only when it is text (`_text`)."""

    impl = SqlString
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else _text(value, "VARCHAR")


class Text(TypeDecorator[str]):
    """TEXT, read back only when it is text (`_text`)."""

    impl = SqlText
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else _text(value, "TEXT")


class NameList(TypeDecorator[str]):
    """TEXT holding a JSON list of names (a hold's nodes), read back only when it
    is one: a row whose list does not decode is quarantined as it is read, instead of failing
    every later reader (`reservations list` ended in a JSONDecodeError traceback)."""

    impl = SqlText
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None
        try:
            names = json.loads(_text(value, "TEXT"))
        except (TypeError, ValueError):
            names = None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"{str(value)[:60]!r} in a node list column is not a JSON list "
                             "of names")
        return str(value)


metadata = MetaData()
_mapper = registry(metadata=metadata)


requests = Table(
    "requests", metadata,
    Column("id", String(64), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("hostlist", Text, nullable=False),
    Column("nodes", Text, nullable=False),
    Column("resume_file", Text, nullable=True),
    Column("received_at", DateTime(timezone=True), nullable=False),
    Column("status", String(16), default="pending", index=True, nullable=False),
    Column("processed_at", DateTime(timezone=True), nullable=True),
    Column("error", Text, nullable=True),
)
_mapper.map_imperatively(rows.RequestRow, requests)


gangs = Table(
    "gangs", metadata,
    Column("id", String(96), primary_key=True),
    Column("pool", String(64), nullable=False),
    Column("nodes", Text, nullable=False),
    Column("size", Integer, nullable=False),
    Column("job_ids", Text, default="[]", nullable=False),
    Column("request_ids", Text, default="[]", nullable=False),
    Column("coalesced", Boolean, default=False, nullable=False),
    Column("status", String(16), index=True, nullable=False),
    Column("client_token", String(64), nullable=False),
    Column("launch_template_version", String(16), nullable=False),
    # every fleet of a gang, comma-separated: a gang launched in several fleets
    # (max_instances_per_fleet) writes more than one 30-character id
    Column("fleet_id", Text, nullable=True),
    Column("error_code", String(128), nullable=True),
    Column("error_message", Text, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
_mapper.map_imperatively(rows.GangRow, gangs)


instances = Table(
    "instances", metadata,
    Column("instance_id", String(32), primary_key=True),
    Column("node", String(128), index=True, nullable=False),
    Column("pool", String(64), nullable=False),
    Column("gang_id", String(96), index=True, nullable=False),
    Column("instance_type", String(64), nullable=False),
    Column("lifecycle", String(16), nullable=False),
    Column("image_id", String(64), default="", nullable=False),
    Column("launch_template_version", String(16), nullable=False),
    Column("private_ip", String(64), default="", nullable=False),
    Column("capacity_reservation_id", String(64), default="", server_default="", nullable=False),
    Column("subnet_id", String(64), default="", server_default="", nullable=False),
    Column("state", String(16), index=True, nullable=False),
    Column("launched_at", DateTime(timezone=True), nullable=False),
    Column("terminated_at", DateTime(timezone=True), nullable=True),
)
_mapper.map_imperatively(rows.InstanceRow, instances)


# a warm pool instance's earlier runs and its stops (rows.InstancePeriodRow)
instance_periods = Table(
    "instance_periods", metadata,
    Column("id", SqlInteger, primary_key=True, autoincrement=True),
    Column("instance_id", String(32), index=True, nullable=False),
    Column("pool", String(64), nullable=False),
    Column("instance_type", String(64), nullable=False),
    Column("lifecycle", String(16), nullable=False),
    Column("state", String(16), nullable=False),
    Column("since", DateTime(timezone=True), index=True, nullable=False),
    Column("until", DateTime(timezone=True), nullable=True),
)
_mapper.map_imperatively(rows.InstancePeriodRow, instance_periods)


events = Table(
    "events", metadata,
    Column("id", SqlInteger, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), index=True, nullable=False),
    Column("kind", String(32), index=True, nullable=False),
    Column("node", Text, nullable=True),
    Column("request_id", String(64), nullable=True),
    Column("gang_id", String(96), nullable=True),
    Column("message", Text, nullable=False),
)
_mapper.map_imperatively(rows.EventRow, events)


pool_state = Table(
    "pool_state", metadata,
    Column("pool", String(64), primary_key=True),
    Column("target", Integer, nullable=False),
    Column("above_since", Float, nullable=True),
    Column("last_step_at", Float, nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
_mapper.map_imperatively(rows.PoolStateRow, pool_state)


holds = Table(
    "holds", metadata,
    Column("name", String(128), primary_key=True),
    Column("pool", String(64), nullable=False),
    Column("job_id", String(64), index=True, nullable=False),
    Column("user_name", String(64), nullable=False),
    Column("needed", Integer, nullable=False),
    Column("nodes", NameList, nullable=False),
    Column("created_s", Float, nullable=False),
    Column("spent_gpu_s", Float, default=0.0, nullable=False),
    Column("accounted_s", Float, nullable=False),
    Column("attached", Boolean, default=False, nullable=False),
    Column("state", String(16), index=True, nullable=False),
    Column("reason", Text, default="", nullable=False),
    Column("exhausted", Boolean, default=False, nullable=False),
    Column("released_s", Float, nullable=True),
)
_mapper.map_imperatively(rows.HoldRow, holds)


preemptions = Table(
    "preemptions", metadata,
    Column("id", SqlInteger, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), index=True, nullable=False),
    Column("job_id", String(64), index=True, nullable=False),
    Column("node", String(128), nullable=False),
    Column("instance_id", String(32), nullable=False),
    Column("pool", String(64), nullable=False),
    Column("instance_type", String(64), nullable=False),
    Column("lifecycle", String(16), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("notice_time", String(64), default="", nullable=False),
    Column("cause", String(16), default="interrupted", server_default="interrupted",
           nullable=False),
)
_mapper.map_imperatively(rows.PreemptionRow, preemptions)


graces = Table(
    "graces", metadata,
    Column("id", SqlInteger, primary_key=True, autoincrement=True),
    Column("job_id", String(64), index=True, nullable=False),
    Column("node", String(128), nullable=False),
    Column("instance_id", String(32), nullable=False),
    Column("pool", String(64), nullable=False),
    Column("signal", String(16), nullable=False),
    Column("signalled_at", DateTime(timezone=True), nullable=False),
    Column("requeue_at", DateTime(timezone=True), nullable=False),
    Column("state", String(16), index=True, nullable=False),
    Column("cause", String(16), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("notice_time", String(64), default="", nullable=False),
    Column("ended_at", DateTime(timezone=True), nullable=True),
)
_mapper.map_imperatively(rows.GraceRow, graces)


replacements = Table(
    "replacements", metadata,
    Column("id", SqlInteger, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), index=True, nullable=False),
    Column("detected_at", DateTime(timezone=True), nullable=False),
    Column("node", String(128), index=True, nullable=False),
    Column("pool", String(64), nullable=False),
    Column("instance_id", String(32), nullable=False),
    Column("instance_type", String(64), nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("cause", String(32), nullable=False),
    Column("detail", Text, default="", nullable=False),
    Column("jobs_requeued", Integer, default=0, nullable=False),
    Column("left", Boolean, default=False, nullable=False),
)
_mapper.map_imperatively(rows.ReplacementRow, replacements)


# one instance's time to run, step by step (rows.LaunchPhasesRow)
launch_phases = Table(
    "launch_phases", metadata,
    Column("instance_id", String(32), primary_key=True),
    Column("node", String(128), nullable=False),
    Column("pool", String(64), nullable=False),
    Column("job_nodes", Integer, nullable=False),
    Column("requested_s", Float, nullable=True),
    Column("answered_s", Float, index=True, nullable=True),
    *(Column(c, Float, nullable=True) for c in (
        "ec2_launch_s", "os_s", "bootstrap_s", "tagged_s", "checked_s", "slurmd_s",
        "registered_s", "submitted_s", "started_s")),
    Column("warm", Boolean, default=False, server_default=false(), nullable=False),
)
_mapper.map_imperatively(rows.LaunchPhasesRow, launch_phases)


offerings = Table(
    "offerings", metadata,
    Column("pool", String(64), primary_key=True),
    Column("offering", String(160), primary_key=True, default=""),
    Column("until_s", Float, nullable=False),
    Column("repeats", Integer, nullable=False),
    Column("last_code", String(128), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
_mapper.map_imperatively(rows.OfferingRow, offerings)


capacity_reservations = Table(
    "capacity_reservations", metadata,
    Column("id", String(64), primary_key=True),
    Column("pool", String(64), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("instance_type", String(64), nullable=False),
    Column("availability_zone", String(64), nullable=False),
    Column("total", Integer, nullable=False),
    Column("available", Integer, nullable=False),
    Column("state", String(32), nullable=False),
    Column("start_at", DateTime(timezone=True), nullable=True),
    Column("end_at", DateTime(timezone=True), nullable=True),
    Column("read_at", DateTime(timezone=True), nullable=False),
)
_mapper.map_imperatively(rows.CapacityReservationRow, capacity_reservations)


jobs = Table(
    "jobs", metadata,
    Column("job_id", String(64), primary_key=True),
    Column("pool", String(64), nullable=False),
    Column("user_name", String(64), nullable=False),
    Column("num_nodes", Integer, nullable=False),
    Column("gpus_per_node", Integer, nullable=False),
    Column("submitted_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True), index=True, nullable=False),
    Column("ended_at", DateTime(timezone=True), index=True, nullable=True),
    Column("time_limit_s", Integer, nullable=True),
)
_mapper.map_imperatively(rows.JobRow, jobs)


samples = Table(
    "samples", metadata,
    Column("at", DateTime(timezone=True), primary_key=True),
    Column("pool", String(64), primary_key=True),
    Column("nodes_up", Integer, nullable=False),
    Column("nodes_busy", Integer, nullable=False),
    Column("nodes_booting", Integer, nullable=False),
    Column("nodes_held", Integer, nullable=False),
    Column("pending_gpus", Integer, nullable=False),
    Column("pending_gpu_hours", Float, nullable=False),
    Column("pending_gangs", Integer, nullable=False),
)
_mapper.map_imperatively(rows.SampleRow, samples)



# Who leads each cluster, and since which take-over (`epoch`, one more each time a daemon
# takes the lease): every write a leader makes is conditioned on its epoch still being the
# latest (store/repo.py, `Store.lead`), so a leader that lost its lease writes nothing more.
leadership = Table(
    "leadership", metadata,
    Column("cluster", String(64), primary_key=True),
    Column("epoch", Integer, nullable=False),
    Column("holder", String(256), nullable=False),
    Column("since", DateTime(timezone=True), nullable=False),
)


# The timers a decision waits on, so that a standby taking over acts when the leader would
# have (not a grace later): `kind` names whose (each pass's KIND), `subject` the node,
# `since_s` when the wait began (Unix seconds), `note` what the pass needs to finish the
# wait (its own JSON: an evacuation's instance, reason and bound; none for most kinds).
timers = Table(
    "timers", metadata,
    Column("kind", String(32), primary_key=True),
    Column("subject", String(128), primary_key=True),
    Column("since_s", Float, nullable=False),
    Column("note", Text, nullable=True),
)
