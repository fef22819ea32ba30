"""jobs: when each job was submitted, first started and ended (queue waits, gang
time-to-start, busy GPU-hours for reports); samples: each pool's capacity and demand once a
minute (the report's capacity-vs-demand plot)

Revision ID: 0006
Revises: 0005
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("user_name", sa.String(64), nullable=False),
        sa.Column("num_nodes", sa.Integer, nullable=False),
        sa.Column("gpus_per_node", sa.Integer, nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "samples",
        sa.Column("at", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("pool", sa.String(64), primary_key=True),
        sa.Column("nodes_up", sa.Integer, nullable=False),
        sa.Column("nodes_busy", sa.Integer, nullable=False),
        sa.Column("nodes_booting", sa.Integer, nullable=False),
        sa.Column("nodes_held", sa.Integer, nullable=False),
        sa.Column("pending_gpus", sa.Integer, nullable=False),
        sa.Column("pending_gpu_hours", sa.Float, nullable=False),
        sa.Column("pending_gangs", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("samples")
    op.drop_table("jobs")
