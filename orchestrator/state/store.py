"""The job store: SQLite in WAL mode under the gpuctl home (``GPUCTL_HOME``, default ``~/.gpuctl``).

Every write that matters runs in one transaction, so killing the controller at any instant leaves
either the old or the new state. A job's state changes only as the controller's engine applies actions
(checked against the transitions table): :func:`orchestrator.state.state_rows.save_state` writes it and
its events in the caller's transaction. A store opened ``read_only``
never writes, nor locks out a writer. Opening, the schema version and the mapping of SQLite's errors
to gpuctl's are :mod:`orchestrator.state.database`'s.

A damaged row (a column gpuctl cannot read: :mod:`orchestrator.state.row_check`) never stops the
others: what lists many rows (:meth:`JobStore.list_jobs`, :meth:`JobStore.segments`,
:meth:`JobStore.events`) skips it, what reads one job's rows raises :class:`DamagedRow`, and both note
it once in :attr:`JobStore.damaged` (and the log) for the command to report.
"""

from __future__ import annotations

import json
import logging
import secrets
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.errors import InternalError, NotFoundError, UserError
from orchestrator.home import HOME_MODE, home_dir
from orchestrator.state import database
from orchestrator.state.job_dir import job_dir_path
from orchestrator.state.job_state import NodeLaunch
from orchestrator.state.records import EventRecord, JobRecord, SegmentRecord
from orchestrator.state.row_check import DamagedRow, Row
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.terminal import terminal_text

log = logging.getLogger(__name__)


def _ts(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat()


def open_store(home: Path | None = None, read_only: bool = False) -> JobStore:
    return JobStore(home, read_only)


@dataclass(frozen=True)
class NodeRecord:
    node_id: str
    job_id: str
    attempt: int
    launch_state: str
    """``intent`` (written before the backend was asked), ``launched``, or ``ended``."""
    created_at: datetime
    notice_at: datetime | None
    ended_at: datetime | None
    phase: str | None


class JobStore:
    """All persistent job state. One instance per process; connections are per thread.

    ``read_only``: never write, never take the write lock (``gpuctl list``, ``status``, ``events``,
    ``cost report``); works on a read-only home. Creating or upgrading the file still needs a writer.
    """

    def __init__(self, home: Path | None = None, read_only: bool = False) -> None:
        self.home = home or home_dir()
        self.read_only = read_only
        self.path = self.home / "gpuctl.db"
        database.prepare(self.home, self.path, read_only)
        self._connections = database.ThreadConnections(self.path, read_only)
        self.damaged: dict[str, DamagedRow] = {}
        """The damaged rows met so far, by row (:meth:`note_damage`)."""

    def note_damage(self, damage: DamagedRow) -> DamagedRow:
        """Keep ``damage`` for the command to report; logged the first time each row is met."""
        if damage.key not in self.damaged:
            log.warning("%s", damage.what)
        self.damaged[damage.key] = damage
        return damage

    def _row(self, table: str, row: sqlite3.Row, job_column: str = "job_id") -> Row:
        return Row(self.path, table, row, job_column)

    def _connect(self) -> sqlite3.Connection:
        """This thread's connection (:class:`database.ThreadConnections`)."""
        return self._connections.get()

    def _drop_connection(self) -> None:
        """After an error, the next use opens a fresh connection."""
        self._connections.drop()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; a SQLite error in it (or its COMMIT) rolls it all back and is raised
        as the gpuctl error that says what happened (:func:`database.store_error`)."""
        if self.read_only:
            raise InternalError(f"a write to the job store {self.path}, opened read-only")
        with database.write_transaction(self._connect(), self.path, self._drop_connection) as conn:
            yield conn

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        conn = self._connect()
        try:
            return list(conn.execute(sql, args))
        except sqlite3.Error as exc:
            self._drop_connection()
            raise database.store_error(exc, self.path) from exc

    def job_dir(self, job_id: str) -> Path:
        """The job's folder (created 0700 by a writer: its files may hold the job's secrets)."""
        path = job_dir_path(self.home, job_id)
        if not self.read_only and not path.is_dir():
            path.parent.mkdir(mode=HOME_MODE, exist_ok=True)
            path.mkdir(mode=HOME_MODE, exist_ok=True)
        return path

    # --- jobs -------------------------------------------------------------------------------
    def create_job(
        self,
        *,
        name: str,
        user: str,
        team: str,
        backend: str,
        spec_json: str,
        deadline: datetime | None,
        now: datetime,
        options: dict[str, Any] | None = None,
    ) -> JobRecord:
        job_id = f"{name}-{secrets.token_hex(3)}"
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO jobs (id, name, user, team, backend, status, spec_json, options_json,"
                " submitted_at, deadline, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    job_id, name, user, team, backend, JobStatus.PENDING, spec_json,
                    json.dumps(options or {}), _ts(now), _ts(deadline), _ts(now),
                ),
            )  # fmt: skip
            self._event(conn, job_id, now, "transition", "submitted", JobStatus.PENDING)
        return self.job(job_id)

    def job(self, job_id: str) -> JobRecord:
        """The job of id ``job_id``, else the one job whose id starts with it or whose name it is
        (:class:`NotFoundError` for none, :func:`ambiguous_job` for several)."""
        rows = self._query("SELECT * FROM jobs WHERE id = ?", (job_id,))
        if not rows:
            rows = self._query(  # a prefix of the id, taken literally (no LIKE wildcards), or the name
                "SELECT * FROM jobs WHERE substr(id, 1, length(?1)) = ?1 OR name = ?1"
                " ORDER BY submitted_at DESC, id",
                (job_id,),
            )
            if not rows:
                raise NotFoundError(f"no job '{job_id}'", "see `gpuctl list`")
            if len(rows) > 1:
                raise ambiguous_job(job_id, rows)
        try:
            return _job_record(self._row("jobs", rows[0], "id"))
        except DamagedRow as damage:
            raise self.note_damage(damage) from None

    def list_jobs(self, include_terminal: bool = True) -> list[JobRecord]:
        """Every job that reads (a damaged row is skipped and noted: :meth:`scan_jobs`)."""
        jobs, _ = self.scan_jobs()
        return [j for j in jobs if include_terminal or not j.status.terminal]

    def scan_jobs(self) -> tuple[list[JobRecord], list[DamagedRow]]:
        """Every job, in submission order, and the rows that could not be read (noted, not raised)."""
        jobs: list[JobRecord] = []
        damaged: list[DamagedRow] = []
        for r in self._query("SELECT * FROM jobs ORDER BY submitted_at"):
            try:
                jobs.append(_job_record(self._row("jobs", r, "id")))
            except DamagedRow as damage:
                damaged.append(self.note_damage(damage))
        return jobs, damaged

    def _json_column(self, table: str, column: str, sql: str, args: Sequence[Any]) -> dict[str, Any] | None:
        """The JSON object in ``column`` of the one row ``sql`` selects (None: no row)."""
        rows = self._query(sql, args)
        if not rows:
            return None
        try:
            return Row(self.path, table, rows[0], "job_id").json_object(column)
        except DamagedRow as damage:
            raise self.note_damage(damage) from None

    def job_options(self, job_id: str) -> dict[str, Any]:
        sql = "SELECT id AS job_id, options_json FROM jobs WHERE id = ?"
        return self._json_column("jobs", "options_json", sql, (job_id,)) or {}

    def cancel_requested(self, job_id: str) -> bool:
        rows = self._query("SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,))
        return bool(rows and rows[0]["cancel_requested"])

    def request_cancel(self, job_id: str, now: datetime) -> None:
        with self.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET cancel_requested = 1, updated_at = ? WHERE id = ?", (_ts(now), job_id)
            )
            self._event(conn, job_id, now, "cancel_requested", "cancel requested by the user", None)

    def set_summary(self, job_id: str, summary: dict[str, Any]) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE jobs SET summary_json = ? WHERE id = ?", (json.dumps(summary), job_id))

    def summary(self, job_id: str) -> dict[str, Any]:
        sql = "SELECT id AS job_id, summary_json FROM jobs WHERE id = ?"
        return self._json_column("jobs", "summary_json", sql, (job_id,)) or {}

    def market_history(self, job_id: str) -> tuple[datetime, dict[str, Any]] | None:
        """The spot availability a controller of an earlier schema kept in its own table for this job, and
        when it last looked (read once, when the job's state has no zone history yet)."""
        rows = self._query("SELECT * FROM market_history WHERE job_id = ?", (job_id,))
        if not rows:
            return None
        row = self._row("market_history", rows[0])
        try:
            return row.time("observed_at"), row.json_object("history_json")
        except DamagedRow as damage:
            raise self.note_damage(damage) from None

    # --- events ---------------------------------------------------------------------------------
    def add_event(self, job_id: str, now: datetime, kind: str, message: str) -> None:
        with self.transaction() as conn:
            self._event(conn, job_id, now, kind, message, None)

    def _event(
        self,
        conn: sqlite3.Connection,
        job_id: str,
        now: datetime,
        kind: str,
        message: str,
        status: str | None,
    ) -> None:
        conn.execute(
            "INSERT INTO events (job_id, time, kind, message, status) VALUES (?,?,?,?,?)",
            (job_id, _ts(now), kind, message, status),
        )

    def events(self, job_id: str, after_id: int = 0) -> list[EventRecord]:
        """The job's events in order; a damaged one is skipped (and noted)."""
        rows = self._query("SELECT * FROM events WHERE job_id = ? AND id > ? ORDER BY id", (job_id, after_id))
        found: list[EventRecord] = []
        for r in rows:
            row = self._row("events", r)
            try:
                found.append(EventRecord(
                    id=r["id"], job_id=job_id, time=row.time("time"), kind=row.text("kind"),
                    message=row.text("message"), status=row.opt_enum("status", JobStatus),
                ))  # fmt: skip
            except DamagedRow as damage:
                self.note_damage(damage)
        return found

    # --- attempts, nodes, segments ----------------------------------------------------------------
    def attempt_placement(self, job_id: str, attempt: int) -> dict[str, Any] | None:
        sql = "SELECT job_id, attempt, placement_json FROM attempts WHERE job_id = ? AND attempt = ?"
        return self._json_column("attempts", "placement_json", sql, (job_id, attempt))

    def nodes(self, job_id: str, attempt: int | None = None) -> list[NodeRecord]:
        if attempt is None:
            rows = self._query("SELECT * FROM nodes WHERE job_id = ? ORDER BY created_at, node_id", (job_id,))
        else:
            rows = self._query(
                "SELECT * FROM nodes WHERE job_id = ? AND attempt = ? ORDER BY created_at, node_id",
                (job_id, attempt),
            )
        try:
            return [_node_record(self._row("nodes", r)) for r in rows]
        except DamagedRow as damage:  # the controller must not act on part of an attempt's nodes
            raise self.note_damage(damage) from None

    def segments(
        self, job_id: str | None = None, since: datetime | None = None, strict: bool = False
    ) -> list[SegmentRecord]:
        """Segments (of one job, or all) that may overlap ``since``..now. A damaged one is noted and
        skipped; ``strict`` (the controller, which must not act on part of a job's ledger): raised."""
        sql, args = "SELECT * FROM segments WHERE 1=1", list[str]()
        if job_id is not None:
            sql += " AND job_id = ?"
            args.append(job_id)
        if since is not None:
            sql += " AND (ended_at IS NULL OR ended_at >= ?)"
            args.append(since.astimezone(UTC).isoformat())
        found: list[SegmentRecord] = []
        for r in self._query(sql + " ORDER BY id", args):
            try:
                found.append(_segment_record(self._row("segments", r)))
            except DamagedRow as damage:
                self.note_damage(damage)
                if strict:
                    raise damage from None
        return found


SHOWN_MATCHES = 10
"""How many of the jobs a name or prefix matches :func:`ambiguous_job` lists (the newest)."""


def ambiguous_job(named: str, rows: Sequence[sqlite3.Row]) -> UserError:
    """Several jobs match ``named`` (``rows``, newest first): they are listed (id, state, submitted,
    one per line, as stored: a damaged value is shown as it is, escaped), with how to pick one."""
    lines = [
        f"  {terminal_text(str(r['id']))}  {terminal_text(str(r['status']))}  submitted "
        f"{terminal_text(str(r['submitted_at']))[:19].replace('T', ' ')}"
        for r in rows[:SHOWN_MATCHES]
    ]
    if len(rows) > SHOWN_MATCHES:
        lines.append(f"  ... and {len(rows) - SHOWN_MATCHES} older (`gpuctl list` shows every job)")
    newest = terminal_text(str(rows[0]["id"]))
    return UserError(
        f"{len(rows)} jobs match '{named}' (newest first):\n" + "\n".join(lines),
        f"name one by its full id (or a longer prefix of it), e.g. `{newest}` for the newest",
    )


def _job_record(r: Row) -> JobRecord:
    return JobRecord(
        id=r.text("id"), name=r.text("name"), user=r.text("user"), team=r.text("team"),
        backend=r.text("backend"), status=r.enum("status", JobStatus),
        failure_reason=r.opt_enum("failure_reason", FailureReason), message=r.text("message"),
        spec_json=r.text("spec_json"), submitted_at=r.time("submitted_at"), deadline=r.opt_time("deadline"),
        updated_at=r.time("updated_at"), attempts=r.integer("attempts"), preemptions=r.integer("preemptions"),
        restarts=r.integer("restarts"),
    )  # fmt: skip


def _segment_record(r: Row) -> SegmentRecord:
    return SegmentRecord(
        id=r.integer("id"), job_id=r.text("job_id"), attempt=r.integer("attempt"), gpu_type=r.text("gpu_type"),
        instance_type=r.text("instance_type"), market=r.text("market"), cloud=r.text("cloud"),
        region=r.text("region"), zone=r.text("zone"), nodes=r.integer("nodes"),
        gpus_per_node=r.integer("gpus_per_node"), started_at=r.time("started_at"), ended_at=r.opt_time("ended_at"),
        node_price_usd_per_hour=r.number("node_price_usd_per_hour"),
        on_demand_node_price_usd_per_hour=r.number("on_demand_node_price_usd_per_hour"),
        price_source=r.text("price_source"), end_reason=r.opt_text("end_reason"),
    )  # fmt: skip


def _node_record(r: Row) -> NodeRecord:
    return NodeRecord(
        node_id=r.text("node_id"), job_id=r.text("job_id"), attempt=r.integer("attempt"),
        launch_state=r.enum("launch_state", NodeLaunch), created_at=r.time("created_at"), notice_at=r.opt_time("notice_at"),
        ended_at=r.opt_time("ended_at"), phase=r.opt_text("phase"),
    )  # fmt: skip


class StoreWrites:
    """Writes beside a job's state inside one :meth:`JobStore.transaction` (a job's state itself is
    written only by :func:`orchestrator.state.state_rows.save_state`, from what the engine applied)."""

    @staticmethod
    def event(conn: sqlite3.Connection, job_id: str, now: datetime, kind: str, message: str) -> None:
        conn.execute(
            "INSERT INTO events (job_id, time, kind, message) VALUES (?,?,?,?)",
            (job_id, _ts(now), kind, message),
        )
