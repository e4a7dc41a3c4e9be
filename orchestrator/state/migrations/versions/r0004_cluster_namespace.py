"""jobs.cluster and jobs.namespace (where a Kubernetes job ran), and the indexes a cost report over a
large ledger reads by: segments by start and end, jobs by team and user.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("cluster", sa.Text, nullable=False, server_default=""))
    op.add_column("jobs", sa.Column("namespace", sa.Text, nullable=False, server_default=""))
    op.create_index("segments_started", "segments", ["started_at"])
    op.create_index("segments_ended", "segments", ["ended_at"])
    op.create_index("jobs_team", "jobs", ["team"])
    op.create_index("jobs_user", "jobs", ["user"])


def downgrade() -> None:
    for index, table in (("jobs_user", "jobs"), ("jobs_team", "jobs"), ("segments_ended", "segments"),
                         ("segments_started", "segments")):  # fmt: skip
        op.drop_index(index, table_name=table)
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("namespace")
        batch.drop_column("cluster")
