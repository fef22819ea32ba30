"""ORM tables. Enums are plain strings (native DB enums cost a migration per new value)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, DateTime, Float, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class RequestRow(Base):
    """One hook call, moved here from the spool. `status`: pending -> done | failed."""

    __tablename__ = "requests"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    hostlist: Mapped[str] = mapped_column(Text)
    nodes: Mapped[str] = mapped_column(Text)  # JSON list
    resume_file: Mapped[str | None] = mapped_column(Text, nullable=True)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(16), default="pending", index=True)
    processed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True),
                                                          nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class GangRow(Base):
    """One CreateFleet decision: a job's whole node set, or a coalesced batch of single nodes.
    `status`: launching -> launched | failed."""

    __tablename__ = "gangs"
    id: Mapped[str] = mapped_column(String(96), primary_key=True)
    pool: Mapped[str] = mapped_column(String(64))
    nodes: Mapped[str] = mapped_column(Text)  # hostlist
    size: Mapped[int] = mapped_column(Integer)
    job_ids: Mapped[str] = mapped_column(Text, default="[]")  # JSON list
    request_ids: Mapped[str] = mapped_column(Text, default="[]")  # JSON list
    coalesced: Mapped[bool] = mapped_column(Boolean, default=False)
    status: Mapped[str] = mapped_column(String(16), index=True)
    client_token: Mapped[str] = mapped_column(String(64))
    launch_template_version: Mapped[str] = mapped_column(String(16))
    fleet_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error_code: Mapped[str | None] = mapped_column(String(128), nullable=True)
    error_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class InstanceRow(Base):
    """An EC2 instance slurmscale launched. `state`: running -> terminated."""

    __tablename__ = "instances"
    instance_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    node: Mapped[str] = mapped_column(String(128), index=True)
    pool: Mapped[str] = mapped_column(String(64))
    gang_id: Mapped[str] = mapped_column(String(96), index=True)
    instance_type: Mapped[str] = mapped_column(String(64))
    lifecycle: Mapped[str] = mapped_column(String(16))
    image_id: Mapped[str] = mapped_column(String(64), default="")
    launch_template_version: Mapped[str] = mapped_column(String(16))
    private_ip: Mapped[str] = mapped_column(String(64), default="")
    # the capacity reservation it runs in ("": none): paid for whether used or not
    capacity_reservation_id: Mapped[str] = mapped_column(String(64), default="",
                                                         server_default="")
    state: Mapped[str] = mapped_column(String(16), index=True)
    launched_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    terminated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True),
                                                           nullable=True)


class EventRow(Base):
    """The audit log: every decision and every failure, with its reason."""

    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    node: Mapped[str | None] = mapped_column(Text, nullable=True)
    request_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    gang_id: Mapped[str | None] = mapped_column(String(96), nullable=True)
    message: Mapped[str] = mapped_column(Text)


class PoolStateRow(Base):
    """The capacity policy's memory of one pool between passes (PoolMemory): its target and
    the clocks behind the sustained-demand and cooldown rules, as Unix seconds."""

    __tablename__ = "pool_state"
    pool: Mapped[str] = mapped_column(String(64), primary_key=True)
    target: Mapped[int] = mapped_column(Integer)
    above_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_step_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class HoldRow(Base):
    """One of slurmscale's reservations accumulating nodes for a pending gang.
    `state`: active -> releasing (Slurm refused the delete: its job runs in it) -> released.
    Times are Unix seconds, as the policy keeps them."""

    __tablename__ = "holds"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    pool: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str] = mapped_column(String(64), index=True)
    user_name: Mapped[str] = mapped_column(String(64))
    needed: Mapped[int] = mapped_column(Integer)
    nodes: Mapped[str] = mapped_column(Text)  # JSON list
    created_s: Mapped[float] = mapped_column(Float)
    spent_gpu_s: Mapped[float] = mapped_column(Float, default=0.0)
    accounted_s: Mapped[float] = mapped_column(Float)
    attached: Mapped[bool] = mapped_column(Boolean, default=False)
    state: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    exhausted: Mapped[bool] = mapped_column(Boolean, default=False)  # never hold for it again
    released_s: Mapped[float | None] = mapped_column(Float, nullable=True)


class PreemptionRow(Base):
    """A job requeued because its node's instance was interrupted (or about to be)."""

    __tablename__ = "preemptions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    job_id: Mapped[str] = mapped_column(String(64), index=True)
    node: Mapped[str] = mapped_column(String(128))
    instance_id: Mapped[str] = mapped_column(String(32))
    pool: Mapped[str] = mapped_column(String(64))
    instance_type: Mapped[str] = mapped_column(String(64))
    lifecycle: Mapped[str] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(64))  # the EC2 event's detail-type
    notice_time: Mapped[str] = mapped_column(String(64), default="")


class ReplacementRow(Base):
    """A node whose instance slurmscale replaced because it was unhealthy (or about to be
    retired): jobs requeued, instance terminated, node returned. `detected_at`: when first
    seen unhealthy; `at`: when the replacement was carried out. `left`: not replaced but left
    drained for an admin (replaced too often)."""

    __tablename__ = "replacements"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    detected_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    node: Mapped[str] = mapped_column(String(128), index=True)
    pool: Mapped[str] = mapped_column(String(64))
    instance_id: Mapped[str] = mapped_column(String(32))
    instance_type: Mapped[str] = mapped_column(String(64))
    gpus: Mapped[int] = mapped_column(Integer)
    cause: Mapped[str] = mapped_column(String(32))
    detail: Mapped[str] = mapped_column(Text, default="")
    jobs_requeued: Mapped[int] = mapped_column(Integer, default=0)
    left: Mapped[bool] = mapped_column(Boolean, default=False)


class OfferingRow(Base):
    """A pool's capacity after an insufficient-capacity error: unavailable until `until_s`
    (Unix seconds); `repeats` errors in a row double the TTL; a launch that works resets it.
    One row per pool: its CreateFleet already offers EC2 every instance type x subnet it may
    use, so a capacity error there means none of them had room."""

    __tablename__ = "offerings"
    pool: Mapped[str] = mapped_column(String(64), primary_key=True)
    until_s: Mapped[float] = mapped_column(Float)
    repeats: Mapped[int] = mapped_column(Integer)
    last_code: Mapped[str] = mapped_column(String(128))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class CapacityReservationRow(Base):
    """A pool's capacity reservation or Capacity Block as the daemon last read it from EC2.
    `kind`: default (an ODCR) or capacity-block."""

    __tablename__ = "capacity_reservations"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    pool: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(32))
    instance_type: Mapped[str] = mapped_column(String(64))
    availability_zone: Mapped[str] = mapped_column(String(64))
    total: Mapped[int] = mapped_column(Integer)
    available: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(32))
    start_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    end_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    read_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class JobRow(Base):
    """A job slurmscale saw start: its queue wait (started - submitted) and, once it is gone
    from the queue, its run (ended). The first start only: requeues are preemption rows."""

    __tablename__ = "jobs"
    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    pool: Mapped[str] = mapped_column(String(64))
    user_name: Mapped[str] = mapped_column(String(64))
    num_nodes: Mapped[int] = mapped_column(Integer)
    gpus_per_node: Mapped[int] = mapped_column(Integer)
    submitted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class SampleRow(Base):
    """One pool's capacity and demand at one moment (once a minute)."""

    __tablename__ = "samples"
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    pool: Mapped[str] = mapped_column(String(64), primary_key=True)
    nodes_up: Mapped[int] = mapped_column(Integer)
    nodes_busy: Mapped[int] = mapped_column(Integer)
    nodes_booting: Mapped[int] = mapped_column(Integer)
    nodes_held: Mapped[int] = mapped_column(Integer)
    pending_gpus: Mapped[int] = mapped_column(Integer)
    pending_gpu_hours: Mapped[float] = mapped_column(Float)
    pending_gangs: Mapped[int] = mapped_column(Integer)
