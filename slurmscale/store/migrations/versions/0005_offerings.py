"""offerings: pools whose capacity is unavailable after an insufficient-capacity error

Revision ID: 0005
Revises: 0004
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "offerings",
        sa.Column("pool", sa.String(64), primary_key=True),
        sa.Column("until_s", sa.Float, nullable=False),
        sa.Column("repeats", sa.Integer, nullable=False),
        sa.Column("last_code", sa.String(128), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("offerings")
