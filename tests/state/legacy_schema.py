"""The job store's schema as gpuctl wrote it before Alembic (``PRAGMA user_version`` 1 to 3), kept to
build the legacy stores the migration tests adopt."""

from __future__ import annotations

import sqlite3
from pathlib import Path

APPLICATION_ID = 0x67707563

OUTBOX_SCHEMA = """
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, backend TEXT NOT NULL,
    target_json TEXT NOT NULL, notification_json TEXT NOT NULL, created_at TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0, next_at TEXT NOT NULL, last_error TEXT
);
CREATE INDEX IF NOT EXISTS notifications_due ON notifications(backend, next_at);
"""
"""Notifications waiting to be delivered (:mod:`orchestrator.notify.outbox`): in the job store, and in
the Kubernetes operator's own file."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, user TEXT NOT NULL, team TEXT NOT NULL,
    backend TEXT NOT NULL, status TEXT NOT NULL, failure_reason TEXT, message TEXT NOT NULL DEFAULT '',
    spec_json TEXT NOT NULL, options_json TEXT NOT NULL DEFAULT '{}',
    submitted_at TEXT NOT NULL, deadline TEXT, updated_at TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0, preemptions INTEGER NOT NULL DEFAULT 0,
    restarts INTEGER NOT NULL DEFAULT 0, cancel_requested INTEGER NOT NULL DEFAULT 0,
    summary_json TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS attempts (
    job_id TEXT NOT NULL REFERENCES jobs(id), attempt INTEGER NOT NULL,
    placement_json TEXT NOT NULL, started_at TEXT NOT NULL, ended_at TEXT, end_reason TEXT,
    PRIMARY KEY (job_id, attempt)
);
CREATE TABLE IF NOT EXISTS nodes (
    node_id TEXT PRIMARY KEY, job_id TEXT NOT NULL REFERENCES jobs(id), attempt INTEGER NOT NULL,
    launch_state TEXT NOT NULL, created_at TEXT NOT NULL, notice_at TEXT, ended_at TEXT, phase TEXT
);
CREATE TABLE IF NOT EXISTS segments (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL REFERENCES jobs(id),
    attempt INTEGER NOT NULL, gpu_type TEXT NOT NULL, instance_type TEXT NOT NULL, market TEXT NOT NULL,
    cloud TEXT NOT NULL, region TEXT NOT NULL, zone TEXT NOT NULL, nodes INTEGER NOT NULL,
    gpus_per_node INTEGER NOT NULL, started_at TEXT NOT NULL, ended_at TEXT,
    node_price_usd_per_hour REAL NOT NULL, on_demand_node_price_usd_per_hour REAL NOT NULL,
    price_source TEXT NOT NULL, end_reason TEXT
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL REFERENCES jobs(id),
    time TEXT NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL, status TEXT
);
CREATE TABLE IF NOT EXISTS market_history (
    job_id TEXT PRIMARY KEY REFERENCES jobs(id), observed_at TEXT NOT NULL, history_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS zone_watch (
    id INTEGER PRIMARY KEY AUTOINCREMENT, zone TEXT NOT NULL, begin REAL NOT NULL, end REAL NOT NULL,
    capacity INTEGER
);
CREATE INDEX IF NOT EXISTS zone_watch_zone ON zone_watch(zone, end);
CREATE TABLE IF NOT EXISTS job_market_logs (
    job_id TEXT PRIMARY KEY REFERENCES jobs(id), log_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS gpu_usage_windows (
    job_id TEXT NOT NULL, source TEXT NOT NULL, line_offset INTEGER NOT NULL,
    start REAL NOT NULL, end REAL NOT NULL, duration_s REAL NOT NULL, gpus INTEGER NOT NULL,
    model TEXT NOT NULL, samples INTEGER NOT NULL, util_mean_pct REAL NOT NULL,
    util_p95_pct REAL NOT NULL, util_max_pct REAL NOT NULL, mem_used_max_bytes INTEGER NOT NULL,
    mem_total_bytes INTEGER NOT NULL, sm_activity_mean REAL, idle_seconds REAL NOT NULL,
    record_json TEXT NOT NULL, PRIMARY KEY (job_id, source, line_offset)
);
CREATE TABLE IF NOT EXISTS gpu_usage_files (
    job_id TEXT NOT NULL, source TEXT NOT NULL, offset INTEGER NOT NULL, PRIMARY KEY (job_id, source)
);
CREATE INDEX IF NOT EXISTS segments_job ON segments(job_id);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
CREATE INDEX IF NOT EXISTS nodes_job ON nodes(job_id, attempt);
"""
"""Every statement is idempotent: :func:`database.upgrade` runs them all on a store of an older version."""
SCHEMA += OUTBOX_SCHEMA

LEGACY_TABLES = {
    1: (
        "jobs",
        "attempts",
        "nodes",
        "segments",
        "events",
        "market_history",
        "gpu_usage_windows",
        "gpu_usage_files",
    ),
    2: ("notifications",),
    3: ("zone_watch", "job_market_logs"),
}
"""The tables each legacy version added."""


def legacy_statements(version: int) -> list[str]:
    """The statements of :data:`SCHEMA` that a store of ``version`` (1 to 3) had run."""
    later = {t for v, tables in LEGACY_TABLES.items() if v > version for t in tables}
    kept = []
    for statement in (s.strip() for s in SCHEMA.split(";")):
        if statement and not any(f" {t} (" in statement or f" {t}(" in statement for t in later):
            kept.append(statement)
    return kept


def build_legacy_store(path: Path, version: int, app_id: bool = True) -> None:
    """A store as the gpuctl of schema ``version`` left it (0: from before versions, schema 1's tables)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        for statement in legacy_statements(max(version, 1)):
            conn.execute(statement)
        if app_id and version > 0:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {version}")
    finally:
        conn.close()
