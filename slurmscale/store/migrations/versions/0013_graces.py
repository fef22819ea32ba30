"""graces: jobs on a node EC2 is taking back, signalled and given until `requeue_at` to save
their work (a pool's `grace_signal`); kept so a restarted daemon requeues on time and signals
once.

Revision ID: 0013
Revises: 0012
"""
import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "graces",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("instance_id", sa.String(32), nullable=False),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("signal", sa.String(16), nullable=False),
        sa.Column("signalled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("requeue_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("cause", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("notice_time", sa.String(64), nullable=False, server_default=""),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_graces_job_id", "graces", ["job_id"])
    op.create_index("ix_graces_state", "graces", ["state"])


def downgrade() -> None:
    op.drop_table("graces")
