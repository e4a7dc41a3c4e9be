"""job_leases: which controller ticks each job, when several controllers share one database.

One row per job a controller has looked at: ``holder`` (``host:pid:random``, one per controller
process), ``expires_at`` (seconds since the epoch by the *database's* clock) and ``generation``
(raised each time the job changes hands: a controller's writes are fenced by it).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_leases",
        sa.Column("job_id", sa.Text, primary_key=True),
        sa.Column("holder", sa.Text, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
    )
    op.create_index("job_leases_holder", "job_leases", ["holder"])


def downgrade() -> None:
    op.drop_index("job_leases_holder", table_name="job_leases")
    op.drop_table("job_leases")
