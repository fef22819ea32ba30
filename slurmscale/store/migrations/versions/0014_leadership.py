"""leadership: each cluster's lease epoch, one more at every take-over; a leader's writes are
made only while its epoch is the latest (the store's fence, store/repo.py `Store.lead`).

Revision ID: 0014
Revises: 0013
"""
import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leadership",
        sa.Column("cluster", sa.String(64), primary_key=True),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("holder", sa.String(256), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leadership")
