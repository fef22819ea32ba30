"""instance_periods: a warm pool instance's earlier runs and its stops (the instance row
keeps only its current or last run): what `report` counts as node hours and volume hours;
launch_phases.warm: a launch that was a warm pool's start (its time to run shown apart).

Revision ID: 0019
Revises: 0018
"""
import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "instance_periods",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("instance_id", sa.String(32), nullable=False),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("lifecycle", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_instance_periods_instance_id", "instance_periods", ["instance_id"])
    op.create_index("ix_instance_periods_since", "instance_periods", ["since"])
    op.add_column("launch_phases", sa.Column("warm", sa.Boolean, nullable=False,
                                             server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("launch_phases") as batch:
        batch.drop_column("warm")
    op.drop_index("ix_instance_periods_since", "instance_periods")
    op.drop_index("ix_instance_periods_instance_id", "instance_periods")
    op.drop_table("instance_periods")
