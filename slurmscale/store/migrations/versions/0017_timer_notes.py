"""timers.note: what a pass needs to finish a wait after a take-over (an evacuation's
instance, reason and bound), so that a standby powers an evacuated node down when the leader
would have.

Revision ID: 0017
Revises: 0016
"""
import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("timers", sa.Column("note", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("timers") as b:  # (SQLite drops a column by a copy)
        b.drop_column("note")
