"""gangs.fleet_id as TEXT: a gang launched in several fleets (`max_instances_per_fleet`)
records every fleet id, comma-separated, and three ids are already longer than the
VARCHAR(64) it was. SQLite never checked the length; PostgreSQL refused the write
(StringDataRightTruncation), failing the pass that launched the gang.

Revision ID: 0012
Revises: 0011
"""
import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gangs") as t:
        t.alter_column("fleet_id", type_=sa.Text, existing_type=sa.String(64),
                       existing_nullable=True)


def downgrade() -> None:
    with op.batch_alter_table("gangs") as t:
        t.alter_column("fleet_id", type_=sa.String(64), existing_type=sa.Text,
                       existing_nullable=True)
