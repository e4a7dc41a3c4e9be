"""segments.seq: a segment's index in its job, the key of segments that jobs run elsewhere write (a
GPUJob's operator: (job id, seq) is unique, so writing the same segment again updates it in place).

The controller's own segments leave it NULL (NULLs never collide in a unique index, on either engine).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("segments", sa.Column("seq", sa.Integer, nullable=True))
    op.create_index("segments_job_seq", "segments", ["job_id", "seq"], unique=True)


def downgrade() -> None:
    op.drop_index("segments_job_seq", table_name="segments")
    with op.batch_alter_table("segments") as batch:
        batch.drop_column("seq")
