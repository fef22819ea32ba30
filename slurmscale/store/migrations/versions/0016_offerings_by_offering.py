"""offerings keyed by (pool, offering): the capacity backoff per instance type, AZ and
capacity type, "" the whole pool (the rows before are whole pools'); each instance's subnet
(its AZ: the offering a spot interruption takes back).

Revision ID: 0016
Revises: 0015
"""
import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

COLUMNS = "pool, until_s, repeats, last_code, updated_at"


def _table(name: str, by_offering: bool) -> None:
    op.create_table(
        name,
        sa.Column("pool", sa.String(64), primary_key=True),
        *([sa.Column("offering", sa.String(160), primary_key=True)] if by_offering else []),
        sa.Column("until_s", sa.Float, nullable=False),
        sa.Column("repeats", sa.Integer, nullable=False),
        sa.Column("last_code", sa.String(128), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def upgrade() -> None:
    op.add_column("instances", sa.Column("subnet_id", sa.String(64), nullable=False,
                                         server_default=""))
    # (a new primary key: the table is made anew, the same way on SQLite and PostgreSQL)
    _table("offerings_new", True)
    op.execute(f"INSERT INTO offerings_new (offering, {COLUMNS}) "
               f"SELECT '', {COLUMNS} FROM offerings")
    op.drop_table("offerings")
    op.rename_table("offerings_new", "offerings")


def downgrade() -> None:
    with op.batch_alter_table("instances") as b:
        b.drop_column("subnet_id")
    _table("offerings_old", False)
    op.execute(f"INSERT INTO offerings_old ({COLUMNS}) SELECT {COLUMNS} FROM offerings "
               "WHERE offering = ''")
    op.drop_table("offerings")
    op.rename_table("offerings_old", "offerings")
