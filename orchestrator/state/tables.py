"""The job store's tables, as SQLAlchemy Core :class:`~sqlalchemy.Table` objects (one schema, two
engines: SQLite and PostgreSQL).

The schema itself is created and changed only by the Alembic revisions in
:mod:`orchestrator.state.migrations`; these objects describe the head revision, so the store's
statements are built (and quoted: ``user``, ``offset``, ``end`` are reserved words in PostgreSQL)
by SQLAlchemy. Times are ISO 8601 text on both engines (``2025-01-31T12:00:00+00:00``, always UTC):
text sorts as time, and both engines read back exactly what was written.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, ForeignKey, Index, Integer, MetaData, Table, Text, text

BIG = BigInteger().with_variant(Integer(), "sqlite")
"""Bytes and file offsets: 64-bit on PostgreSQL (SQLite's INTEGER is 64-bit already)."""

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("id", Text, primary_key=True),
    Column("name", Text, nullable=False),
    Column("user", Text, nullable=False),
    Column("team", Text, nullable=False),
    Column("backend", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("failure_reason", Text),
    Column("message", Text, nullable=False, server_default=""),
    Column("spec_json", Text, nullable=False),
    Column("options_json", Text, nullable=False, server_default="{}"),
    Column("submitted_at", Text, nullable=False),
    Column("deadline", Text),
    Column("updated_at", Text, nullable=False),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("preemptions", Integer, nullable=False, server_default=text("0")),
    Column("restarts", Integer, nullable=False, server_default=text("0")),
    Column("cancel_requested", Integer, nullable=False, server_default=text("0")),
    Column("summary_json", Text, nullable=False, server_default="{}"),
    Column("cluster", Text, nullable=False, server_default=""),
    Column("namespace", Text, nullable=False, server_default=""),
    Index("jobs_team", "team"),
    Index("jobs_user", "user"),
)

attempts = Table(
    "attempts",
    metadata,
    Column("job_id", Text, ForeignKey("jobs.id"), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("placement_json", Text, nullable=False),
    Column("started_at", Text, nullable=False),
    Column("ended_at", Text),
    Column("end_reason", Text),
)

nodes = Table(
    "nodes",
    metadata,
    Column("node_id", Text, primary_key=True),
    Column("job_id", Text, ForeignKey("jobs.id"), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("launch_state", Text, nullable=False),
    Column("created_at", Text, nullable=False),
    Column("notice_at", Text),
    Column("ended_at", Text),
    Column("phase", Text),
    Index("nodes_job", "job_id", "attempt"),
)

segments = Table(
    "segments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Text, ForeignKey("jobs.id"), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("gpu_type", Text, nullable=False),
    Column("instance_type", Text, nullable=False),
    Column("market", Text, nullable=False),
    Column("cloud", Text, nullable=False),
    Column("region", Text, nullable=False),
    Column("zone", Text, nullable=False),
    Column("nodes", Integer, nullable=False),
    Column("gpus_per_node", Integer, nullable=False),
    Column("started_at", Text, nullable=False),
    Column("ended_at", Text),
    Column("node_price_usd_per_hour", Float, nullable=False),
    Column("on_demand_node_price_usd_per_hour", Float, nullable=False),
    Column("price_source", Text, nullable=False),
    Column("end_reason", Text),
    Column("seq", Integer),
    Index("segments_job", "job_id"),
    Index("segments_job_seq", "job_id", "seq", unique=True),
    Index("segments_started", "started_at"),
    Index("segments_ended", "ended_at"),
    sqlite_autoincrement=True,
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Text, ForeignKey("jobs.id"), nullable=False),
    Column("time", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("message", Text, nullable=False),
    Column("status", Text),
    Index("events_job", "job_id"),
    sqlite_autoincrement=True,
)

market_history = Table(
    "market_history",
    metadata,
    Column("job_id", Text, ForeignKey("jobs.id"), primary_key=True),
    Column("observed_at", Text, nullable=False),
    Column("history_json", Text, nullable=False),
)

zone_watch = Table(
    "zone_watch",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("zone", Text, nullable=False),
    Column("begin", Float, nullable=False),
    Column("end", Float, nullable=False),
    Column("capacity", Integer),
    Index("zone_watch_zone", "zone", "end"),
    sqlite_autoincrement=True,
)

job_market_logs = Table(
    "job_market_logs",
    metadata,
    Column("job_id", Text, ForeignKey("jobs.id"), primary_key=True),
    Column("log_json", Text, nullable=False),
)

gpu_usage_windows = Table(
    "gpu_usage_windows",
    metadata,
    Column("job_id", Text, primary_key=True),
    Column("source", Text, primary_key=True),
    Column("line_offset", BIG, primary_key=True, autoincrement=False),
    Column("start", Float, nullable=False),
    Column("end", Float, nullable=False),
    Column("duration_s", Float, nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("model", Text, nullable=False),
    Column("samples", Integer, nullable=False),
    Column("util_mean_pct", Float, nullable=False),
    Column("util_p95_pct", Float, nullable=False),
    Column("util_max_pct", Float, nullable=False),
    Column("mem_used_max_bytes", BIG, nullable=False),
    Column("mem_total_bytes", BIG, nullable=False),
    Column("sm_activity_mean", Float),
    Column("idle_seconds", Float, nullable=False),
    Column("record_json", Text, nullable=False),
)

gpu_usage_files = Table(
    "gpu_usage_files",
    metadata,
    Column("job_id", Text, primary_key=True),
    Column("source", Text, primary_key=True),
    Column("offset", BIG, nullable=False),
)

notifications = Table(
    "notifications",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Text, nullable=False),
    Column("backend", Text, nullable=False),
    Column("target_json", Text, nullable=False),
    Column("notification_json", Text, nullable=False),
    Column("created_at", Text, nullable=False),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("next_at", Text, nullable=False),
    Column("last_error", Text),
    Column("claimed_by", Text),
    Column("claimed_until", Text),
    Index("notifications_due", "backend", "next_at"),
    sqlite_autoincrement=True,
)
"""The notification outbox (:mod:`orchestrator.notify.outbox`); ``claimed_by`` / ``claimed_until``: the
delivery worker sending the row's current try, until when (ISO text, UTC, like ``next_at``)."""


job_leases = Table(
    "job_leases",
    metadata,
    Column("job_id", Text, primary_key=True),
    Column("holder", Text, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("generation", Integer, nullable=False),
    Index("job_leases_holder", "holder"),
)
"""Which controller ticks each job (:mod:`orchestrator.state.leases`); ``expires_at``: seconds since
the epoch by the database's clock."""
