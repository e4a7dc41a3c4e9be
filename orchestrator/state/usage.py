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
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, bindparam, case, func, literal_column, or_, select
from sqlalchemy.dialects import postgresql, sqlite

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
from orchestrator.state.prepared import Prepared
from orchestrator.state.round_rows import ROUND_CHUNK
from orchestrator.state.store import JobStore, StoreWrites
from orchestrator.state.tables import events, gpu_usage_files, gpu_usage_windows
from orchestrator.state.watch import IDLE_UTIL_PCT, GpuActivity

__all__ = ["EVENT_KIND", "NO_NVML_MESSAGE", "SUMMARY_GLOB", "GpuUsage", "UsageStore", "usage_from_files"]

log = logging.getLogger(__name__)

EVENT_KIND = "gpu_monitor"
_W = gpu_usage_windows.c
_USAGE_COLUMNS = ("source", "start", "duration_s", "gpus", "model", "samples", "util_mean_pct", "util_p95_pct",
                  "util_max_pct", "mem_used_max_bytes", "mem_total_bytes", "sm_activity_mean", "idle_seconds")  # fmt: skip


def _within(column: ColumnElement[Any], top: float) -> ColumnElement[bool]:
    """``column BETWEEN 0 AND top``, the bounds written into the statement (constants, not parameters)."""
    return column.between(literal_column("0"), literal_column(repr(top)))


_RANGES = and_(
    _within(_W.start, MAX_EPOCH), _within(_W.duration_s, MAX_SECONDS), _within(_W.gpus, MAX_GPUS),
    _within(_W.samples, MAX_COUNT), _within(_W.util_mean_pct, 100), _within(_W.util_p95_pct, 100),
    _within(_W.util_max_pct, 100), _within(_W.mem_used_max_bytes, MAX_BYTES),
    _within(_W.mem_total_bytes, MAX_BYTES), _within(_W.idle_seconds, MAX_GPU_SECONDS),
    or_(_W.sm_activity_mean.is_(None), _within(_W.sm_activity_mean, 1)),
)  # fmt: skip


class _Reads:
    """The statements that read stored windows, built once per engine kind. Only windows that hold
    what a valid window holds are read (the store checks windows before it keeps them; this leaves out
    rows kept by older versions that did not). SQLite keeps any value in any column: its model must also
    be text; PostgreSQL's typed columns hold nothing else."""

    def __init__(self, sqlite: bool) -> None:
        valid = and_(_RANGES, func.typeof(_W.model) == literal_column("'text'")) if sqlite else _RANGES
        job = _W.job_id == bindparam("id")
        self.idle = (
            select(_W.job_id, func.sum(_W.idle_seconds).label("idle")).where(valid).group_by(_W.job_id)
        )
        busy = case((_W.util_mean_pct >= literal_column(repr(IDLE_UTIL_PCT)), _W.end))
        self.activity = Prepared(
            select(func.max(_W.end).label("measured"), func.max(busy).label("busy")).where(job, valid)
        )
        self.newest = Prepared(
            select(func.max(_W.util_mean_pct).label("util")).where(job, _W.end == bindparam("end"), valid)
        )
        self.usage = select(*(gpu_usage_windows.c[name] for name in _USAGE_COLUMNS)).where(job, valid)
        of_jobs = _W.job_id.in_(bindparam("ids", expanding=True))
        last = (  # each job's newest window end and newest busy one
            select(_W.job_id, func.max(_W.end).label("measured"), func.max(busy).label("busy"))
            .where(of_jobs, valid)
            .group_by(_W.job_id)
            .subquery("last")
        )
        newest = (  # the utilization of each job's newest windows
            select(_W.job_id, func.max(_W.util_mean_pct).label("util"))
            .join(last, and_(last.c.job_id == _W.job_id, last.c.measured == _W.end))
            .where(of_jobs, valid)
            .group_by(_W.job_id)
            .subquery("newest")
        )
        self.every_activity = select(last.c.job_id, last.c.measured, last.c.busy, newest.c.util).select_from(
            last.outerjoin(newest, newest.c.job_id == last.c.job_id)
        )
        self.every_usage = (  # every job's, in the order of the primary key
            select(_W.job_id, *(gpu_usage_windows.c[name] for name in _USAGE_COLUMNS))
            .where(valid)
            .order_by(_W.job_id, _W.source, _W.line_offset)
        )


_READS = {True: _Reads(sqlite=True), False: _Reads(sqlite=False)}
_WINDOWS = (
    select(_W.record_json).where(_W.job_id == bindparam("id")).order_by(_W.start, _W.source, _W.line_offset)
)
_EVERY_WINDOW = select(_W.job_id, _W.record_json).order_by(_W.job_id, _W.start, _W.source, _W.line_offset)

_OFFSETS = Prepared(
    select(gpu_usage_files.c.source, gpu_usage_files.c.offset).where(
        gpu_usage_files.c.job_id == bindparam("id")
    )
)
_OFFSET = select(gpu_usage_files.c.offset).where(
    gpu_usage_files.c.job_id == bindparam("id"), gpu_usage_files.c.source == bindparam("source")
)
_COUNT = (
    select(func.count())
    .select_from(gpu_usage_windows)
    .where(_W.job_id == bindparam("id"), _W.source == bindparam("source"))
)
_SEEN = select(events.c.id).where(
    events.c.job_id == bindparam("id"),
    events.c.kind == bindparam("kind"),
    events.c.message == bindparam("message"),
)


def _activity(measured: float, busy: float | None, util: float | None) -> GpuActivity:
    return GpuActivity(
        measured_until=datetime.fromtimestamp(float(measured), UTC),
        busy_until=datetime.fromtimestamp(float(busy), UTC) if busy is not None else None,
        util_pct=float(util or 0.0),
    )


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
        rows = self.store._query(_OFFSETS, {"id": job_id})
        return {r["source"]: int(r["offset"]) for r in rows}

    def ingest(self, job_id: str, now: datetime | None = None) -> int:
        """Store the complete lines added to the job's summary files since last time; returns how many
        windows were new. Never raises for a bad file: it is logged and skipped."""
        job_dir = job_dir_path(self.store.home, job_id)
        if not job_dir.is_dir():
            return 0
        stored = 0
        files = sorted(job_dir.glob(SUMMARY_GLOB))
        offsets = self.offsets(job_id) if files else {}
        for file in files:
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
        key = {"id": job_id, "source": file.name}
        dialect = postgresql if not self.store.sqlite else sqlite
        with self.store.transaction() as conn:
            if (conn.execute(_OFFSET, key).scalar() or 0) != offset:
                return 0  # another reader got there first; the next call starts from its offset
            before = int(conn.execute(_COUNT, key).scalar_one())
            if windows:
                conn.execute(dialect.insert(gpu_usage_windows).on_conflict_do_nothing(), [
                    {"job_id": job_id, "source": file.name, "line_offset": at, "start": w.start,
                     "end": w.start + w.duration_s, "duration_s": w.duration_s, "gpus": w.gpus, "model": w.model,
                     "samples": w.samples, "util_mean_pct": w.util_mean_pct, "util_p95_pct": w.util_p95_pct,
                     "util_max_pct": w.util_max_pct, "mem_used_max_bytes": w.mem_used_max_bytes,
                     "mem_total_bytes": w.mem_total_bytes, "sm_activity_mean": w.sm_activity_mean,
                     "idle_seconds": w.idle_seconds, "record_json": json.dumps(w.fields, allow_nan=False)}
                    for at, w in windows
                ])  # fmt: skip
            added = int(conn.execute(_COUNT, key).scalar_one()) - before
            for record in notices:
                self._record_unavailable(conn, job_id, record, now)
            upsert = dialect.insert(gpu_usage_files).values(
                job_id=job_id, source=file.name, offset=offset + complete
            )
            conn.execute(upsert.on_conflict_do_update(
                index_elements=[gpu_usage_files.c.job_id, gpu_usage_files.c.source],
                set_={"offset": upsert.excluded.offset},
            ))  # fmt: skip
        return added

    @staticmethod
    def _record_unavailable(conn: Connection, job_id: str, record: dict[str, Any], now: datetime) -> None:
        message = unavailable_message(record)
        seen = conn.execute(_SEEN, {"id": job_id, "kind": EVENT_KIND, "message": message}).first()
        if seen is None:
            StoreWrites.event(conn, job_id, now, EVENT_KIND, message)

    def windows(self, job_id: str) -> list[dict[str, Any]]:
        """The stored window summaries of a job, oldest first (as the monitor wrote them)."""
        rows = self.store._query(_WINDOWS, {"id": job_id})
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
        rows = self.store._query(_READS[self.store.sqlite].idle)
        return {r["job_id"]: float(r["idle"]) / 3600.0 for r in rows}

    def activity(self, job_id: str) -> GpuActivity | None:
        """When the job's GPUs were last measured and last busy (for the idle watchdog); None before a
        window."""
        reads = _READS[self.store.sqlite]
        rows = self.store._query(reads.activity, {"id": job_id})
        if not rows or rows[0]["measured"] is None:
            return None
        measured, busy = float(rows[0]["measured"]), rows[0]["busy"]
        newest = self.store._query(reads.newest, {"id": job_id, "end": measured})
        return _activity(measured, busy, newest[0]["util"])

    def every_activity(self, job_ids: Sequence[str]) -> dict[str, GpuActivity]:
        """:meth:`activity` of each of ``job_ids`` that has a window, in one query per
        :data:`~orchestrator.state.round_rows.ROUND_CHUNK` jobs (a controller round)."""
        ordered = sorted(set(job_ids))
        found: dict[str, GpuActivity] = {}
        for start in range(0, len(ordered), ROUND_CHUNK):
            ids = {"ids": ordered[start : start + ROUND_CHUNK]}
            for row in self.store._query(_READS[self.store.sqlite].every_activity, ids):
                found[str(row["job_id"])] = _activity(row["measured"], row["busy"], row["util"])
        return found

    def usage(self, job_id: str) -> GpuUsage | None:
        """The aggregate of the stored windows; None when nothing was measured."""
        rows = self.store._query(_READS[self.store.sqlite].usage, {"id": job_id})
        return aggregate([UsageWindow(**dict(r)) for r in rows])

    def every_usage(self) -> dict[str, GpuUsage]:
        """:meth:`usage` of every job with stored windows, in one query (a report over many jobs)."""
        by_job: dict[str, list[UsageWindow]] = {}
        for r in self.store._query(_READS[self.store.sqlite].every_usage):
            row = dict(r)
            by_job.setdefault(str(row.pop("job_id")), []).append(UsageWindow(**row))
        found = {job_id: aggregate(windows) for job_id, windows in by_job.items()}
        return {job_id: usage for job_id, usage in found.items() if usage is not None}

    def every_window(self) -> dict[str, list[dict[str, Any]]]:
        """:meth:`windows` of every job with stored windows, in one query (a report over many jobs)."""
        found: dict[str, list[dict[str, Any]]] = {}
        for row in self.store._query(_EVERY_WINDOW):
            record = summary_record(str(row["record_json"]))
            try:
                window = dict(window_summary(record or {}).fields)
            except BadRecord:
                continue
            found.setdefault(str(row["job_id"]), []).append(window)
        return found
