"""preemptions: jobs requeued because their instance was interrupted

Revision ID: 0004
Revises: 0003
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "preemptions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("instance_id", sa.String(32), nullable=False),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("lifecycle", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("notice_time", sa.String(64), nullable=False),
    )
    op.create_index("ix_preemptions_at", "preemptions", ["at"])
    op.create_index("ix_preemptions_job_id", "preemptions", ["job_id"])


def downgrade() -> None:
    op.drop_table("preemptions")
