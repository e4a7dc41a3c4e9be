"""The tables of the legacy schema 1: jobs, attempts, nodes, segments, events, market history and the
stored GPU use.

Revision ID: 0001
Revises:
Every table and index is created only where missing: a store from before schema versions is adopted
by running this revision over what it has.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels = None
depends_on = None

BIG = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    _jobs()
    _segments()
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Text, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("time", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("status", sa.Text),
        sqlite_autoincrement=True,
        if_not_exists=True,
    )
    op.create_table(
        "market_history",
        sa.Column("job_id", sa.Text, sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("observed_at", sa.Text, nullable=False),
        sa.Column("history_json", sa.Text, nullable=False),
        if_not_exists=True,
    )
    _gpu_usage()
    op.create_index("segments_job", "segments", ["job_id"], if_not_exists=True)
    op.create_index("events_job", "events", ["job_id"], if_not_exists=True)
    op.create_index("nodes_job", "nodes", ["job_id", "attempt"], if_not_exists=True)


def _jobs() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("user", sa.Text, nullable=False),
        sa.Column("team", sa.Text, nullable=False),
        sa.Column("backend", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("failure_reason", sa.Text),
        sa.Column("message", sa.Text, nullable=False, server_default=""),
        sa.Column("spec_json", sa.Text, nullable=False),
        sa.Column("options_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("submitted_at", sa.Text, nullable=False),
        sa.Column("deadline", sa.Text),
        sa.Column("updated_at", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("preemptions", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("restarts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("cancel_requested", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("summary_json", sa.Text, nullable=False, server_default="{}"),
        if_not_exists=True,
    )
    op.create_table(
        "attempts",
        sa.Column("job_id", sa.Text, sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("attempt", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("placement_json", sa.Text, nullable=False),
        sa.Column("started_at", sa.Text, nullable=False),
        sa.Column("ended_at", sa.Text),
        sa.Column("end_reason", sa.Text),
        if_not_exists=True,
    )
    op.create_table(
        "nodes",
        sa.Column("node_id", sa.Text, primary_key=True),
        sa.Column("job_id", sa.Text, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("launch_state", sa.Text, nullable=False),
        sa.Column("created_at", sa.Text, nullable=False),
        sa.Column("notice_at", sa.Text),
        sa.Column("ended_at", sa.Text),
        sa.Column("phase", sa.Text),
        if_not_exists=True,
    )


def _segments() -> None:
    op.create_table(
        "segments",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Text, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("gpu_type", sa.Text, nullable=False),
        sa.Column("instance_type", sa.Text, nullable=False),
        sa.Column("market", sa.Text, nullable=False),
        sa.Column("cloud", sa.Text, nullable=False),
        sa.Column("region", sa.Text, nullable=False),
        sa.Column("zone", sa.Text, nullable=False),
        sa.Column("nodes", sa.Integer, nullable=False),
        sa.Column("gpus_per_node", sa.Integer, nullable=False),
        sa.Column("started_at", sa.Text, nullable=False),
        sa.Column("ended_at", sa.Text),
        sa.Column("node_price_usd_per_hour", sa.Float, nullable=False),
        sa.Column("on_demand_node_price_usd_per_hour", sa.Float, nullable=False),
        sa.Column("price_source", sa.Text, nullable=False),
        sa.Column("end_reason", sa.Text),
        sqlite_autoincrement=True,
        if_not_exists=True,
    )


def _gpu_usage() -> None:
    op.create_table(
        "gpu_usage_windows",
        sa.Column("job_id", sa.Text, primary_key=True),
        sa.Column("source", sa.Text, primary_key=True),
        sa.Column("line_offset", BIG, primary_key=True, autoincrement=False),
        sa.Column("start", sa.Float, nullable=False),
        sa.Column("end", sa.Float, nullable=False),
        sa.Column("duration_s", sa.Float, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("samples", sa.Integer, nullable=False),
        sa.Column("util_mean_pct", sa.Float, nullable=False),
        sa.Column("util_p95_pct", sa.Float, nullable=False),
        sa.Column("util_max_pct", sa.Float, nullable=False),
        sa.Column("mem_used_max_bytes", BIG, nullable=False),
        sa.Column("mem_total_bytes", BIG, nullable=False),
        sa.Column("sm_activity_mean", sa.Float),
        sa.Column("idle_seconds", sa.Float, nullable=False),
        sa.Column("record_json", sa.Text, nullable=False),
        if_not_exists=True,
    )
    op.create_table(
        "gpu_usage_files",
        sa.Column("job_id", sa.Text, primary_key=True),
        sa.Column("source", sa.Text, primary_key=True),
        sa.Column("offset", BIG, nullable=False),
        if_not_exists=True,
    )


def downgrade() -> None:
    for table in ("gpu_usage_files", "gpu_usage_windows", "market_history", "events", "segments", "nodes",
                  "attempts", "jobs"):  # fmt: skip
        op.drop_table(table)
