"""preemptions.cause: why a job lost its run (interrupted, reclaimed, vanished, unhealthy), a
column the decisions read instead of a prefix of `kind`; existing rows get it from `kind`

Revision ID: 0010
Revises: 0009
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# what `kind` held for each cause before the column (store/rows.py, PreemptionCause)
RECLAIM_KIND = "EC2 Capacity Reservation Instance Interruption Warning"


def upgrade() -> None:
    with op.batch_alter_table("preemptions") as t:
        t.add_column(sa.Column("cause", sa.String(16), nullable=False,
                               server_default="interrupted"))
    p = sa.table("preemptions", sa.column("kind", sa.String), sa.column("cause", sa.String))
    op.execute(p.update().where(p.c.kind.like("unhealthy:%")).values(cause="unhealthy"))
    op.execute(p.update().where(p.c.kind.like("vanished:%")).values(cause="vanished"))
    op.execute(p.update().where(p.c.kind == RECLAIM_KIND).values(cause="reclaimed"))


def downgrade() -> None:
    with op.batch_alter_table("preemptions") as t:
        t.drop_column("cause")
