"""jobs.time_limit_s: each recorded job's time limit, what `reservations.limit_use: auto`
learns the share of their limits jobs really run from (policy/limit_use.py); an index on
jobs.ended_at for that read (the jobs that ended in the window). Rows recorded before have
no limit and are not counted.

Revision ID: 0011
Revises: 0010
"""
import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as t:
        t.add_column(sa.Column("time_limit_s", sa.Integer, nullable=True))
    op.create_index("ix_jobs_ended_at", "jobs", ["ended_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_ended_at", table_name="jobs")
    with op.batch_alter_table("jobs") as t:
        t.drop_column("time_limit_s")
