"""timers: since when a decision has been waiting (a node unhealthy, a node without an
instance), kept so a standby that takes over acts when the leader would have.

Revision ID: 0015
Revises: 0014
"""
import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "timers",
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("subject", sa.String(128), primary_key=True),
        sa.Column("since_s", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("timers")
