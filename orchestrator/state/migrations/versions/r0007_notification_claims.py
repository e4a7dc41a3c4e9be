"""notifications: a delivery's claim, so that one controller sends each try of a notification.

``claimed_by`` (the delivery worker, ``host:pid:random``) and ``claimed_until`` (ISO text, UTC, like
``next_at``): a worker sends a row only after it set these in one conditional update; a claim that
has passed (its worker died mid-send) may be taken by another.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("notifications", sa.Column("claimed_by", sa.Text))
    op.add_column("notifications", sa.Column("claimed_until", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("notifications") as batch:
        batch.drop_column("claimed_until")
        batch.drop_column("claimed_by")
