"""The notifications outbox (legacy schema 2).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("backend", sa.Text, nullable=False),
        sa.Column("target_json", sa.Text, nullable=False),
        sa.Column("notification_json", sa.Text, nullable=False),
        sa.Column("created_at", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("next_at", sa.Text, nullable=False),
        sa.Column("last_error", sa.Text),
        sqlite_autoincrement=True,
        if_not_exists=True,
    )
    op.create_index("notifications_due", "notifications", ["backend", "next_at"], if_not_exists=True)


def downgrade() -> None:
    op.drop_table("notifications")
