"""The market log: zone_watch spans and each job's own log (legacy schema 3).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "zone_watch",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("zone", sa.Text, nullable=False),
        sa.Column("begin", sa.Float, nullable=False),
        sa.Column("end", sa.Float, nullable=False),
        sa.Column("capacity", sa.Integer),
        sqlite_autoincrement=True,
        if_not_exists=True,
    )
    op.create_index("zone_watch_zone", "zone_watch", ["zone", "end"], if_not_exists=True)
    op.create_table(
        "job_market_logs",
        sa.Column("job_id", sa.Text, sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("log_json", sa.Text, nullable=False),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table("job_market_logs")
    op.drop_table("zone_watch")
