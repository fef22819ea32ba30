"""initial schema: requests, gangs, instances, events

Revision ID: 0001
Revises:
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "requests",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("hostlist", sa.Text, nullable=False),
        sa.Column("nodes", sa.Text, nullable=False),
        sa.Column("resume_file", sa.Text, nullable=True),
        sa.Column("received_at", TS, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("processed_at", TS, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
    )
    op.create_index("ix_requests_status", "requests", ["status"])
    op.create_table(
        "gangs",
        sa.Column("id", sa.String(96), primary_key=True),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("nodes", sa.Text, nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("job_ids", sa.Text, nullable=False),
        sa.Column("request_ids", sa.Text, nullable=False),
        sa.Column("coalesced", sa.Boolean, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("client_token", sa.String(64), nullable=False),
        sa.Column("launch_template_version", sa.String(16), nullable=False),
        sa.Column("fleet_id", sa.String(64), nullable=True),
        sa.Column("error_code", sa.String(128), nullable=True),
        sa.Column("error_message", sa.Text, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_index("ix_gangs_status", "gangs", ["status"])
    op.create_table(
        "instances",
        sa.Column("instance_id", sa.String(32), primary_key=True),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("gang_id", sa.String(96), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("lifecycle", sa.String(16), nullable=False),
        sa.Column("image_id", sa.String(64), nullable=False),
        sa.Column("launch_template_version", sa.String(16), nullable=False),
        sa.Column("private_ip", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("launched_at", TS, nullable=False),
        sa.Column("terminated_at", TS, nullable=True),
    )
    op.create_index("ix_instances_node", "instances", ["node"])
    op.create_index("ix_instances_gang_id", "instances", ["gang_id"])
    op.create_index("ix_instances_state", "instances", ["state"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", TS, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("node", sa.Text, nullable=True),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("gang_id", sa.String(96), nullable=True),
        sa.Column("message", sa.Text, nullable=False),
    )
    op.create_index("ix_events_at", "events", ["at"])
    op.create_index("ix_events_kind", "events", ["kind"])


def downgrade() -> None:
    for t in ("events", "instances", "gangs", "requests"):
        op.drop_table(t)
