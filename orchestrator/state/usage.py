"""Measured GPU use: the monitors' window summaries, stored in the job store, and their aggregate.

Each node's monitor appends JSON lines to ``$GPUCTL_HOME/jobs/JOB/monitor-summary*.jsonl`` (format in
docs/monitor.md). :meth:`UsageStore.ingest` reads what is new in those files (it remembers a byte
offset per file, and leaves a partial last line for next time) and stores the windows and the file's
new offset in one transaction, keyed by (job, file, line offset): a controller that crashes and reads
again stores nothing twice. An ``unavailable`` line (the monitor found no NVML) becomes one
``gpu_monitor`` event per job.

The aggregate is :mod:`orchestrator.state.gpu_usage`'s (the Kubernetes operator uses the same).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.contract import BadRecord, summary_record, window_summary
from orchestrator.contract.fields import MAX_COUNT, MAX_EPOCH, MAX_SECONDS, warn_once
from orchestrator.contract.windows import MAX_BYTES, MAX_GPU_SECONDS, MAX_GPUS
from orchestrator.monitor.summary import read_job_windows
from orchestrator.state.gpu_usage import (
    NO_NVML_MESSAGE,
    UNAVAILABLE_KIND,
    WINDOW_KIND,
    GpuUsage,
    UsageWindow,
    aggregate,
    from_summary,
    summary_line_record,
    unavailable_message,
)
from orchestrator.state.job_dir import SUMMARY_GLOB, job_dir_path
from orchestrator.state.store import JobStore, StoreWrites
from orchestrator.state.watch import IDLE_UTIL_PCT, GpuActivity

__all__ = ["EVENT_KIND", "NO_NVML_MESSAGE", "SUMMARY_GLOB", "GpuUsage", "UsageStore", "usage_from_files"]

log = logging.getLogger(__name__)

EVENT_KIND = "gpu_monitor"
_VALID = (
    f"start BETWEEN 0 AND {MAX_EPOCH} AND duration_s BETWEEN 0 AND {MAX_SECONDS}"
    f" AND gpus BETWEEN 0 AND {MAX_GPUS} AND samples BETWEEN 0 AND {MAX_COUNT}"
    " AND util_mean_pct BETWEEN 0 AND 100 AND util_p95_pct BETWEEN 0 AND 100 AND util_max_pct BETWEEN 0 AND 100"
    f" AND mem_used_max_bytes BETWEEN 0 AND {MAX_BYTES} AND mem_total_bytes BETWEEN 0 AND {MAX_BYTES}"
    f" AND idle_seconds BETWEEN 0 AND {MAX_GPU_SECONDS} AND typeof(model) = 'text'"
    " AND (sm_activity_mean IS NULL OR sm_activity_mean BETWEEN 0 AND 1)"
)
"""Stored windows that hold what a valid window holds (the store checks windows before it keeps them;
this leaves out rows kept by older versions that did not)."""


def usage_from_files(job_dir: Path) -> GpuUsage | None:
    """The aggregate straight from a job folder's summary files (when nothing is stored)."""
    files = sorted(job_dir.glob(SUMMARY_GLOB))
    return aggregate([from_summary(file.name, w) for file in files for w in read_job_windows([file])])


def _complete_lines(data: bytes, base: int) -> list[tuple[int, dict[str, Any] | None]]:
    """(offset, record) of each complete line of ``data`` (read from byte ``base``); None for a bad line."""
    lines: list[tuple[int, dict[str, Any] | None]] = []
    position = 0
    while True:
        end = data.find(b"\n", position)
        if end < 0:
            return lines
        if data[position:end].strip():
            lines.append((base + position, summary_line_record(data[position:end])))
        position = end + 1


def _source(job_id: str, file: Path) -> str:
    return f"job {job_id}: GPU monitor summary file {file.name}"


class UsageStore:
    """The stored windows of the job store's jobs."""

    def __init__(self, store: JobStore) -> None:
        self.store = store  # its schema holds the tables gpu_usage_windows and gpu_usage_files

    def offsets(self, job_id: str) -> dict[str, int]:
        rows = self.store._query("SELECT source, offset FROM gpu_usage_files WHERE job_id = ?", (job_id,))
        return {r["source"]: int(r["offset"]) for r in rows}

    def ingest(self, job_id: str, now: datetime | None = None) -> int:
        """Store the complete lines added to the job's summary files since last time; returns how many
        windows were new. Never raises for a bad file: it is logged and skipped."""
        job_dir = job_dir_path(self.store.home, job_id)
        if not job_dir.is_dir():
            return 0
        stored = 0
        offsets = self.offsets(job_id)
        for file in sorted(job_dir.glob(SUMMARY_GLOB)):
            try:
                stored += self._ingest_file(job_id, file, offsets.get(file.name, 0), now or datetime.now(UTC))
            except (OSError, KeyError, TypeError, ValueError) as exc:
                log.warning("job %s: cannot read GPU monitor summaries %s: %s", job_id, file, exc)
        return stored

    def _ingest_file(self, job_id: str, file: Path, offset: int, now: datetime) -> int:
        with file.open("rb") as handle:
            handle.seek(offset)
            data = handle.read()
        complete = data.rfind(b"\n") + 1  # a partial last line waits for the next call
        if complete == 0:
            return 0
        windows = []
        notices = []
        for line_offset, record in _complete_lines(data[:complete], offset):
            if record is None:
                warn_once(_source(job_id, file), "not a JSON object")
            elif record.get("kind") == WINDOW_KIND:
                try:
                    windows.append((line_offset, window_summary(record)))
                except BadRecord as bad:
                    warn_once(_source(job_id, file), str(bad))
            elif record.get("kind") == UNAVAILABLE_KIND:
                notices.append(record)
        with self.store.transaction() as conn:
            row = conn.execute(
                "SELECT offset FROM gpu_usage_files WHERE job_id = ? AND source = ?", (job_id, file.name)
            ).fetchone()
            if (int(row["offset"]) if row else 0) != offset:
                return 0  # another reader got there first; the next call starts from its offset
            before = conn.total_changes
            conn.executemany(
                "INSERT OR IGNORE INTO gpu_usage_windows (job_id, source, line_offset, start, end, duration_s,"
                " gpus, model, samples, util_mean_pct, util_p95_pct, util_max_pct, mem_used_max_bytes,"
                " mem_total_bytes, sm_activity_mean, idle_seconds, record_json)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [
                    (job_id, file.name, at, w.start, w.start + w.duration_s, w.duration_s, w.gpus, w.model,
                     w.samples, w.util_mean_pct, w.util_p95_pct, w.util_max_pct, w.mem_used_max_bytes,
                     w.mem_total_bytes, w.sm_activity_mean, w.idle_seconds,
                     json.dumps(w.fields, allow_nan=False))
                    for at, w in windows
                ],
            )  # fmt: skip
            added = conn.total_changes - before
            for record in notices:
                self._record_unavailable(conn, job_id, record, now)
            conn.execute(
                "INSERT INTO gpu_usage_files (job_id, source, offset) VALUES (?,?,?)"
                " ON CONFLICT (job_id, source) DO UPDATE SET offset = excluded.offset",
                (job_id, file.name, offset + complete),
            )
        return added

    @staticmethod
    def _record_unavailable(
        conn: sqlite3.Connection, job_id: str, record: dict[str, Any], now: datetime
    ) -> None:
        message = unavailable_message(record)
        seen = conn.execute(
            "SELECT 1 FROM events WHERE job_id = ? AND kind = ? AND message = ?",
            (job_id, EVENT_KIND, message),
        ).fetchone()
        if seen is None:
            StoreWrites.event(conn, job_id, now, EVENT_KIND, message)

    def windows(self, job_id: str) -> list[dict[str, Any]]:
        """The stored window summaries of a job, oldest first (as the monitor wrote them)."""
        rows = self.store._query(
            "SELECT record_json FROM gpu_usage_windows WHERE job_id = ? ORDER BY start, source", (job_id,)
        )
        windows = []
        for row in rows:  # a row kept by a version that did not check windows may be anything
            record = summary_record(str(row["record_json"]))
            try:
                windows.append(dict(window_summary(record or {}).fields))
            except BadRecord:
                continue
        return windows

    def idle_gpu_hours(self) -> dict[str, float]:
        """Idle GPU-hours of every job with stored windows."""
        rows = self.store._query(
            f"SELECT job_id, SUM(idle_seconds) AS idle FROM gpu_usage_windows WHERE {_VALID} GROUP BY job_id"
        )
        return {r["job_id"]: float(r["idle"]) / 3600.0 for r in rows}

    def activity(self, job_id: str) -> GpuActivity | None:
        """When the job's GPUs were last measured and last busy (for the idle watchdog); None before a
        window."""
        rows = self.store._query(
            "SELECT MAX(end) AS measured, MAX(CASE WHEN util_mean_pct >= ? THEN end END) AS busy"
            f" FROM gpu_usage_windows WHERE job_id = ? AND {_VALID}",
            (IDLE_UTIL_PCT, job_id),
        )
        if not rows or rows[0]["measured"] is None:
            return None
        measured, busy = float(rows[0]["measured"]), rows[0]["busy"]
        newest = self.store._query(
            f"SELECT MAX(util_mean_pct) AS util FROM gpu_usage_windows WHERE job_id = ? AND end = ? AND {_VALID}",
            (job_id, measured),
        )
        return GpuActivity(
            measured_until=datetime.fromtimestamp(measured, UTC),
            busy_until=datetime.fromtimestamp(float(busy), UTC) if busy is not None else None,
            util_pct=float(newest[0]["util"] or 0.0),
        )

    def usage(self, job_id: str) -> GpuUsage | None:
        """The aggregate of the stored windows; None when nothing was measured."""
        rows = self.store._query(
            "SELECT source, start, duration_s, gpus, model, samples, util_mean_pct, util_p95_pct, util_max_pct,"
            " mem_used_max_bytes, mem_total_bytes, sm_activity_mean, idle_seconds"
            f" FROM gpu_usage_windows WHERE job_id = ? AND {_VALID}",
            (job_id,),
        )
        return aggregate([UsageWindow(**dict(r)) for r in rows])
