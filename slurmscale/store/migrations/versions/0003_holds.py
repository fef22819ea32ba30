"""holds: reservations accumulating nodes for pending gangs

Revision ID: 0003
Revises: 0002
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "holds",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("user_name", sa.String(64), nullable=False),
        sa.Column("needed", sa.Integer, nullable=False),
        sa.Column("nodes", sa.Text, nullable=False),
        sa.Column("created_s", sa.Float, nullable=False),
        sa.Column("spent_gpu_s", sa.Float, nullable=False),
        sa.Column("accounted_s", sa.Float, nullable=False),
        sa.Column("attached", sa.Boolean, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("exhausted", sa.Boolean, nullable=False),
        sa.Column("released_s", sa.Float, nullable=True),
    )
    op.create_index("ix_holds_job_id", "holds", ["job_id"])
    op.create_index("ix_holds_state", "holds", ["state"])


def downgrade() -> None:
    op.drop_table("holds")
