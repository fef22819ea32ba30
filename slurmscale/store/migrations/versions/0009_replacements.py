"""replacements: nodes whose instance was replaced because it was unhealthy or scheduled for
retirement (or left for an admin after too many), for the replace-loop guard and reports

Revision ID: 0009
Revises: 0008
"""
import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "replacements",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("detected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("instance_id", sa.String(32), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("cause", sa.String(32), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("jobs_requeued", sa.Integer, nullable=False),
        sa.Column("left", sa.Boolean, nullable=False),
    )
    op.create_index("ix_replacements_at", "replacements", ["at"])
    op.create_index("ix_replacements_node", "replacements", ["node"])


def downgrade() -> None:
    op.drop_table("replacements")
