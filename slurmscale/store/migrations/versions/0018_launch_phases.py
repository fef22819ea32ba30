"""launch_phases: when each step of an instance's way from Slurm's resume call to its node's
first job ended (time to run, per launch: `report`, metrics, `status`).

Revision ID: 0018
Revises: 0017
"""
import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

STEPS = ("requested_s", "answered_s", "ec2_launch_s", "os_s", "bootstrap_s", "tagged_s",
         "checked_s", "slurmd_s", "registered_s", "submitted_s", "started_s")


def upgrade() -> None:
    op.create_table(
        "launch_phases",
        sa.Column("instance_id", sa.String(32), primary_key=True),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("job_nodes", sa.Integer, nullable=False),
        *(sa.Column(c, sa.Float, nullable=True) for c in STEPS),
    )
    op.create_index("ix_launch_phases_answered_s", "launch_phases", ["answered_s"])


def downgrade() -> None:
    op.drop_index("ix_launch_phases_answered_s", "launch_phases")
    op.drop_table("launch_phases")
