"""pool_state: the capacity policy's memory per pool

Revision ID: 0002
Revises: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pool_state",
        sa.Column("pool", sa.String(64), primary_key=True),
        sa.Column("target", sa.Integer, nullable=False),
        sa.Column("above_since", sa.Float, nullable=True),
        sa.Column("last_step_at", sa.Float, nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pool_state")
