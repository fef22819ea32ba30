"""instances.capacity_reservation_id: the capacity reservation an instance runs in (empty:
none); an idle node on reserved capacity is paid for whether used or not, so scale-down keeps
it, and reports count reserved node-hours

Revision ID: 0007
Revises: 0006
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("instances") as b:
        b.add_column(sa.Column("capacity_reservation_id", sa.String(64), nullable=False,
                               server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("instances") as b:
        b.drop_column("capacity_reservation_id")
