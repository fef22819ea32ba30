"""capacity_reservations: the pools' capacity reservations and Capacity Blocks as the daemon
last read them from EC2 (state, free count, window), so `status`, `plan`, `report` and the
metrics show paid capacity without calling EC2 themselves

Revision ID: 0008
Revises: 0007
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "capacity_reservations",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("availability_zone", sa.String(64), nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("available", sa.Integer, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("start_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("end_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("capacity_reservations")
