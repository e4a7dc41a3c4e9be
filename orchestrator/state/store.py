"""The job store: SQLite in WAL mode under the gpuctl home (``GPUCTL_HOME``, default ``~/.gpuctl``), or
the PostgreSQL database a database URL names (:mod:`orchestrator.state.database_url`).

Every write that matters runs in one transaction, so killing the controller at any instant leaves
either the old or the new state. A job's state changes only as the controller's engine applies actions
(checked against the transitions table): :func:`orchestrator.state.state_rows.save_state` writes it and
its events in the caller's transaction. A store opened ``read_only``
never writes, nor locks out a writer. Engines, the schema's revision and the mapping of database errors
to gpuctl's are :mod:`orchestrator.state.database`'s; the tables, :mod:`orchestrator.state.tables`'.
Statements are SQLAlchemy Core, built once at import (SQLAlchemy caches their compiled form).

A damaged row (a column gpuctl cannot read: :mod:`orchestrator.state.row_check`) never stops the
others: what lists many rows (:meth:`JobStore.list_jobs`, :meth:`JobStore.segments`,
:meth:`JobStore.events`) skips it, what reads one job's rows raises :class:`DamagedRow`, and both note
it once in :attr:`JobStore.damaged` (and the log) for the command to report.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, and_, bindparam, func, insert, or_, select, true, update
from sqlalchemy.sql import Executable

from orchestrator.errors import InternalError, NotFoundError, UserError
from orchestrator.home import HOME_MODE, home_dir
from orchestrator.state import database
from orchestrator.state.database_url import database_url, is_sqlite
from orchestrator.state.job_dir import job_dir_path
from orchestrator.state.job_state import NodeLaunch
from orchestrator.state.prepared import Prepared
from orchestrator.state.records import EventRecord, JobRecord, SegmentRecord
from orchestrator.state.row_check import DamagedRow, Row
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.tables import attempts, events, jobs, market_history, nodes, segments
from orchestrator.terminal import terminal_text

log = logging.getLogger(__name__)
T = TypeVar("T")


def _ts(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat()


def open_store(home: Path | None = None, read_only: bool = False) -> JobStore:
    """The job store of ``home`` (default: the gpuctl home), in the database its URL names."""
    return JobStore(home, read_only)


_SUBMITTED = str(JobStatus.PENDING)
"""Where a job starts; each change after that is the engine's (:mod:`orchestrator.state.state_rows`)."""
_JOB = Prepared(select(jobs).where(jobs.c.id == bindparam("id")))
_JOB_NAMED = Prepared(
    select(jobs)  # a prefix of the id, taken literally (no LIKE wildcards), or the name
    .where(or_(func.substr(jobs.c.id, 1, func.length(bindparam("named"))) == bindparam("named"),
               jobs.c.name == bindparam("named")))
    .order_by(jobs.c.submitted_at.desc(), jobs.c.id)
)  # fmt: skip
_JOBS = Prepared(select(jobs).order_by(jobs.c.submitted_at))
_OPTIONS = Prepared(
    select(jobs.c.id.label("job_id"), jobs.c.options_json).where(jobs.c.id == bindparam("id"))
)
_SUMMARY = Prepared(
    select(jobs.c.id.label("job_id"), jobs.c.summary_json).where(jobs.c.id == bindparam("id"))
)
_CANCEL_REQUESTED = Prepared(select(jobs.c.cancel_requested).where(jobs.c.id == bindparam("id")))
WITH_PLACEMENT = select(
    jobs, attempts.c.attempt.label("placement_attempt"), attempts.c.placement_json
).select_from(
    jobs.outerjoin(attempts, and_(attempts.c.job_id == jobs.c.id, attempts.c.attempt == jobs.c.attempts))
)
_JOB_ROWS = Prepared(WITH_PLACEMENT.where(jobs.c.id == bindparam("id")))
"""A job's ``jobs`` row and its current attempt's placement, in one query (a tick's first read)."""
_MARKET_HISTORY = Prepared(select(market_history).where(market_history.c.job_id == bindparam("id")))
_EVENTS = Prepared(
    select(events)
    .where(events.c.job_id == bindparam("id"), events.c.id > bindparam("after"))
    .order_by(events.c.id)
)
_ADD_EVENT = Prepared(insert(events))
_PLACEMENT = Prepared(
    select(attempts.c.job_id, attempts.c.attempt, attempts.c.placement_json).where(
        attempts.c.job_id == bindparam("id"), attempts.c.attempt == bindparam("attempt")
    )
)
_SEGMENTS = {
    (of_job, overlapping): Prepared(
        select(segments)
        .where(segments.c.job_id == bindparam("id") if of_job else true())
        .where(
            or_(segments.c.ended_at.is_(None), segments.c.ended_at >= bindparam("since"))
            if overlapping
            else true()
        )
        .order_by(segments.c.id)
    )
    for of_job in (False, True)
    for overlapping in (False, True)
}
"""The segments of one job or all (``of_job``), those that may overlap a time or all (``overlapping``)."""
_NODES = select(nodes).where(nodes.c.job_id == bindparam("id")).order_by(nodes.c.created_at, nodes.c.node_id)
_JOB_NODES = Prepared(_NODES)
_ATTEMPT_NODES = Prepared(_NODES.where(nodes.c.attempt == bindparam("attempt")))


@dataclass(frozen=True)
class JobRows:
    """What a controller tick reads of a job at once (:meth:`JobStore.job_rows`): its ``jobs`` row as a
    record, whether a cancel was requested, and the raw options and current placement, checked as they
    are used (:meth:`JobStore.options_in`, :meth:`JobStore.placement_in`)."""

    record: JobRecord
    cancel_requested: bool
    options: Mapping[str, Any]
    placement: Mapping[str, Any] | None
    """The ``attempts`` row's columns of the job's current attempt (None: no such row)."""
    nodes: Sequence[Mapping[str, Any]] | None = None
    """The current attempt's ``nodes`` rows, when read with the row (a controller round:
    :func:`~orchestrator.state.round_rows.round_rows`), checked as they are used
    (:meth:`JobStore.nodes_in`); None: read them when needed."""
    segments: Sequence[Mapping[str, Any]] | None = None
    """The job's ``segments`` rows, when read with the row (:meth:`JobStore.segments_in`)."""


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

    def __init__(self, home: Path | None = None, read_only: bool = False, url: str | None = None) -> None:
        self.home = home or home_dir()
        self.read_only = read_only
        self.url = url or database_url(self.home)
        """The database (:func:`~orchestrator.state.database_url.database_url`); may hold a password."""
        self.sqlite = is_sqlite(self.url)
        self.path: database.Where = database.where(self.url)
        """Where the store is, as messages name it: the SQLite file, or the URL with its password masked."""
        database.prepare(self.home, self.url, read_only)
        self.engine = database.engine_for(self.url, read_only)
        self.connections = database.Connections(self.engine, self.url, self.path)
        self.damaged: dict[str, DamagedRow] = {}
        """The damaged rows met so far, by row (:meth:`note_damage`)."""

    def note_damage(self, damage: DamagedRow) -> DamagedRow:
        """Keep ``damage`` for the command to report; logged the first time each row is met."""
        if damage.key not in self.damaged:
            log.warning("%s", damage.what)
        self.damaged[damage.key] = damage
        return damage

    def _row(self, table: str, row: Mapping[str, Any], job_column: str = "job_id") -> Row:
        return Row(self.path, table, row, job_column)

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One write transaction; a database error in it (or its COMMIT) rolls it all back and is
        raised as the gpuctl error that says what happened (:func:`database.store_error`)."""
        if self.read_only:
            raise InternalError(f"a write to the job store {self.path}, opened read-only")
        with self.connections.transaction() as conn:
            yield conn

    def statement(self, run: Callable[[Connection], T]) -> T:
        """``run`` a write that is one statement, its own transaction (:meth:`database.Connections.statement`)."""
        if self.read_only:
            raise InternalError(f"a write to the job store {self.path}, opened read-only")
        return self.connections.statement(run)

    def pinned(self) -> AbstractContextManager[None]:
        """Until the block ends, this thread's reads and writes share one connection (a tick)."""
        return self.connections.pinned()

    def _query(
        self, statement: Executable | Prepared, params: Mapping[str, Any] | None = None
    ) -> list[Mapping[str, Any]]:
        """The rows of one statement, read outside any transaction."""
        return self.connections.read(statement, params)

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
        cluster: str = "",
        namespace: str = "",
    ) -> JobRecord:
        job_id = f"{name}-{secrets.token_hex(3)}"
        with self.transaction() as conn:
            conn.execute(insert(jobs), {
                "id": job_id, "name": name, "user": user, "team": team, "backend": backend,
                "status": _SUBMITTED, "spec_json": spec_json, "options_json": json.dumps(options or {}),
                "submitted_at": _ts(now), "deadline": _ts(deadline), "updated_at": _ts(now),
                "cluster": cluster, "namespace": namespace,
            })  # fmt: skip
            self._event(conn, job_id, now, "transition", "submitted", JobStatus.PENDING)
        return self.job(job_id)

    def job(self, job_id: str) -> JobRecord:
        """The job of id ``job_id``, else the one job whose id starts with it or whose name it is
        (:class:`NotFoundError` for none, :func:`ambiguous_job` for several)."""
        rows = self._query(_JOB, {"id": job_id})
        if not rows:
            rows = self._query(_JOB_NAMED, {"named": job_id})
            if not rows:
                raise NotFoundError(f"no job '{job_id}'", "see `gpuctl list`")
            if len(rows) > 1:
                raise ambiguous_job(job_id, rows)
        try:
            return _job_record(self._row("jobs", rows[0], "id"))
        except DamagedRow as damage:
            raise self.note_damage(damage) from None

    def job_rows(self, job_id: str) -> JobRows | None:
        """The job of exactly this id with its options, cancel request and current placement, read in
        one query (None: no job has this id; :class:`DamagedRow` when its ``jobs`` row is damaged)."""
        rows = self._query(_JOB_ROWS, {"id": job_id})
        return self.rows_of(rows[0]) if rows else None

    def rows_of(self, r: Mapping[str, Any]) -> JobRows:
        """The :class:`JobRows` of one row of :data:`WITH_PLACEMENT` (:class:`DamagedRow` when damaged)."""
        try:
            record = _job_record(self._row("jobs", r, "id"))
        except DamagedRow as damage:
            raise self.note_damage(damage) from None
        placement = None
        if r["placement_attempt"] is not None:
            placement = {
                "job_id": r["id"],
                "attempt": r["placement_attempt"],
                "placement_json": r["placement_json"],
            }
        options = {"job_id": r["id"], "options_json": r["options_json"]}
        return JobRows(record, bool(r["cancel_requested"]), options, placement)

    def options_in(self, rows: JobRows) -> dict[str, Any]:
        """The job's options that ``rows`` holds (:meth:`job_options`, without a query)."""
        return self._json_of("jobs", "options_json", rows.options) or {}

    def placement_in(self, rows: JobRows) -> dict[str, Any] | None:
        """The current attempt's placement that ``rows`` holds (:meth:`attempt_placement`, without a query)."""
        return self._json_of("attempts", "placement_json", rows.placement)

    def list_jobs(self, include_terminal: bool = True) -> list[JobRecord]:
        """Every job that reads (a damaged row is skipped and noted: :meth:`scan_jobs`)."""
        jobs, _ = self.scan_jobs()
        return [j for j in jobs if include_terminal or not j.status.terminal]

    def scan_jobs(self) -> tuple[list[JobRecord], list[DamagedRow]]:
        """Every job, in submission order, and the rows that could not be read (noted, not raised)."""
        jobs: list[JobRecord] = []
        damaged: list[DamagedRow] = []
        for r in self._query(_JOBS):
            try:
                jobs.append(_job_record(self._row("jobs", r, "id")))
            except DamagedRow as damage:
                damaged.append(self.note_damage(damage))
        return jobs, damaged

    def _json_column(
        self, table: str, column: str, statement: Prepared, params: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """The JSON object in ``column`` of the one row ``statement`` selects (None: no row)."""
        rows = self._query(statement, params)
        return self._json_of(table, column, rows[0] if rows else None)

    def _json_of(self, table: str, column: str, row: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        try:
            return Row(self.path, table, row, "job_id").json_object(column)
        except DamagedRow as damage:
            raise self.note_damage(damage) from None

    def job_options(self, job_id: str) -> dict[str, Any]:
        return self._json_column("jobs", "options_json", _OPTIONS, {"id": job_id}) or {}

    def cancel_requested(self, job_id: str) -> bool:
        rows = self._query(_CANCEL_REQUESTED, {"id": job_id})
        return bool(rows and rows[0]["cancel_requested"])

    def request_cancel(self, job_id: str, now: datetime) -> None:
        with self.transaction() as conn:
            conn.execute(
                update(jobs).where(jobs.c.id == job_id).values(cancel_requested=1, updated_at=_ts(now))
            )
            self._event(conn, job_id, now, "cancel_requested", "cancel requested by the user", None)

    def set_summary(self, job_id: str, summary: dict[str, Any]) -> None:
        with self.transaction() as conn:
            conn.execute(update(jobs).where(jobs.c.id == job_id).values(summary_json=json.dumps(summary)))

    def summary(self, job_id: str) -> dict[str, Any]:
        return self._json_column("jobs", "summary_json", _SUMMARY, {"id": job_id}) or {}

    def market_history(self, job_id: str) -> tuple[datetime, dict[str, Any]] | None:
        """The spot availability a controller of an earlier schema kept in its own table for this job, and
        when it last looked (read once, when the job's state has no zone history yet)."""
        rows = self._query(_MARKET_HISTORY, {"id": job_id})
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
        conn: Connection,
        job_id: str,
        now: datetime,
        kind: str,
        message: str,
        status: str | None,
    ) -> None:
        _ADD_EVENT.run(
            conn, {"job_id": job_id, "time": _ts(now), "kind": kind, "message": message, "status": status}
        )

    def events(self, job_id: str, after_id: int = 0) -> list[EventRecord]:
        """The job's events in order; a damaged one is skipped (and noted)."""
        rows = self._query(_EVENTS, {"id": job_id, "after": after_id})
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
        return self._json_column("attempts", "placement_json", _PLACEMENT, {"id": job_id, "attempt": attempt})

    def nodes(self, job_id: str, attempt: int | None = None) -> list[NodeRecord]:
        if attempt is None:
            rows = self._query(_JOB_NODES, {"id": job_id})
        else:
            rows = self._query(_ATTEMPT_NODES, {"id": job_id, "attempt": attempt})
        return self._node_records(rows)

    def nodes_in(self, rows: JobRows) -> list[NodeRecord]:
        """The current attempt's nodes that ``rows`` holds (:meth:`nodes` of its attempt, without a
        query when :func:`~orchestrator.state.round_rows.round_rows` read them)."""
        if rows.nodes is None:
            return self.nodes(rows.record.id, rows.record.attempts)
        return self._node_records(rows.nodes)

    def _node_records(self, rows: Sequence[Mapping[str, Any]]) -> list[NodeRecord]:
        try:
            return [_node_record(self._row("nodes", r)) for r in rows]
        except DamagedRow as damage:  # the controller must not act on part of an attempt's nodes
            raise self.note_damage(damage) from None

    def segments(
        self, job_id: str | None = None, since: datetime | None = None, strict: bool = False
    ) -> list[SegmentRecord]:
        """Segments (of one job, or all) that may overlap ``since``..now. A damaged one is noted and
        skipped; ``strict`` (the controller, which must not act on part of a job's ledger): raised."""
        statement = _SEGMENTS[(job_id is not None, since is not None)]
        params = {"id": job_id} if job_id is not None else {}
        if since is not None:
            params["since"] = since.astimezone(UTC).isoformat()
        return self._segment_records(self._query(statement, params), strict)

    def segments_in(self, rows: JobRows) -> list[SegmentRecord]:
        """The job's segments that ``rows`` holds (:meth:`segments` of the job, ``strict``, without a
        query when :func:`~orchestrator.state.round_rows.round_rows` read them)."""
        if rows.segments is None:
            return self.segments(rows.record.id, strict=True)
        return self._segment_records(rows.segments, strict=True)

    def _segment_records(self, rows: Sequence[Mapping[str, Any]], strict: bool) -> list[SegmentRecord]:
        found: list[SegmentRecord] = []
        for r in rows:
            try:
                found.append(_segment_record(self._row("segments", r)))
            except DamagedRow as damage:
                self.note_damage(damage)
                if strict:
                    raise damage from None
        return found


SHOWN_MATCHES = 10
"""How many of the jobs a name or prefix matches :func:`ambiguous_job` lists (the newest)."""


def ambiguous_job(named: str, rows: Sequence[Mapping[str, Any]]) -> UserError:
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
        restarts=r.integer("restarts"), cluster=r.text("cluster"), namespace=r.text("namespace"),
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
    def event(conn: Connection, job_id: str, now: datetime, kind: str, message: str) -> None:
        _ADD_EVENT.run(conn, {"job_id": job_id, "time": _ts(now), "kind": kind, "message": message,
                                  "status": None})  # fmt: skip
