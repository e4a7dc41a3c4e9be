"""The ledger rows of jobs that run elsewhere: what a GPUJob's operator writes to the shared database.

A job that no gpuctl controller runs (a GPUJob, run by the Kubernetes operator) keeps its live state
where it runs; the ledger database gets its record: one ``jobs`` row (its id is the GPUJob's uid, with
its name, user, team, backend, cluster, namespace, state, failure reason and spec) and its segments,
each keyed by (job id, index in the job: ``segments.seq``). :func:`record_external_job` writes both in
one transaction, as upserts on both engines (SQLite and PostgreSQL: ``INSERT ... ON CONFLICT``), so a
write repeated or replayed after a crash changes nothing, and a write never removes a segment:

* a segment is updated in place until it is closed; a closed segment is final (the ledger is
  append-only: an older write arriving late cannot reopen or re-price it);
* the job row is updated only by a write at least as new as the one stored (``updated_at``).

The cost report and the budgets read these rows with every other job's (:class:`~orchestrator.state.store.JobStore`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Table
from sqlalchemy.dialects import postgresql, sqlite

from orchestrator.state import database
from orchestrator.state.database_url import DEFAULT_FILE, database_url, sqlite_url
from orchestrator.state.job_state import SegmentState
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.tables import jobs, segments


@dataclass(frozen=True)
class ExternalJob:
    """A job run elsewhere, as the ledger records it."""

    id: str
    name: str
    user: str
    team: str
    backend: str
    cluster: str
    namespace: str
    status: JobStatus
    failure_reason: FailureReason | None
    message: str
    spec_json: str
    submitted_at: datetime
    updated_at: datetime
    deadline: datetime | None = None
    attempts: int = 0
    preemptions: int = 0
    restarts: int = 0


def configured_database_url(home: Path) -> str | None:
    """The database URL a user set (``GPUCTL_DATABASE_URL`` or ``database.url`` in the home's
    config), None when gpuctl uses its embedded default (the home's own SQLite file)."""
    url = database_url(home)
    return None if url == sqlite_url(home / DEFAULT_FILE) else url


_upgraded: set[str] = set()
_upgraded_lock = threading.Lock()


def _ready(url: str) -> None:
    """The database at ``url`` at this gpuctl's schema (checked, and upgraded if needed, once per process)."""
    with _upgraded_lock:
        if url in _upgraded:
            return
        database.upgrade_schema(url)
        _upgraded.add(url)


def record_external_job(url: str, job: ExternalJob, job_segments: Sequence[SegmentState]) -> None:
    """Write ``job`` and its segments (``job_segments``, in order: the i-th is keyed (job id, i)) to
    the ledger database at ``url``, in one transaction. Idempotent; a database error is raised as the
    gpuctl error that says what happened (a server that cannot be reached: a
    :class:`~orchestrator.errors.TemporaryError`), and nothing is written then."""
    _ready(url)
    engine = database.engine_for(url)
    connections = database.Connections(engine, url, database.where(url))
    with connections.transaction() as conn:
        _upsert_job(conn, job)
        for index, segment in enumerate(job_segments):
            _upsert_segment(conn, job.id, index, segment)


def _ts(moment: datetime | None) -> str | None:
    """Times as the job store writes them (ISO 8601 in UTC: text sorts as time)."""
    return None if moment is None else moment.astimezone(UTC).isoformat()


def _insert(conn: Connection, table: Table) -> postgresql.Insert | sqlite.Insert:
    """``INSERT`` of the connection's dialect, which has ``ON CONFLICT`` (SQLite and PostgreSQL alike)."""
    return postgresql.insert(table) if conn.dialect.name == "postgresql" else sqlite.insert(table)


def _upsert_job(conn: Connection, job: ExternalJob) -> None:
    row: dict[str, Any] = {
        "id": job.id, "name": job.name, "user": job.user, "team": job.team, "backend": job.backend,
        "cluster": job.cluster, "namespace": job.namespace, "status": str(job.status),
        "failure_reason": None if job.failure_reason is None else str(job.failure_reason),
        "message": job.message, "spec_json": job.spec_json, "submitted_at": _ts(job.submitted_at),
        "updated_at": _ts(job.updated_at), "deadline": _ts(job.deadline), "attempts": job.attempts,
        "preemptions": job.preemptions, "restarts": job.restarts,
    }  # fmt: skip
    statement = _insert(conn, jobs).values(row)
    excluded = statement.excluded
    changed = {k: excluded[k] for k in row if k not in ("id", "submitted_at")}
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=[jobs.c.id], set_=changed, where=jobs.c.updated_at <= excluded.updated_at
        )
    )


def _segment_row(job_id: str, index: int, segment: SegmentState) -> Mapping[str, Any]:
    p = segment.placement
    return {
        "job_id": job_id, "seq": index, "attempt": segment.attempt, "gpu_type": p.gpu_type,
        "instance_type": p.instance_type, "market": str(p.market), "cloud": p.cloud, "region": p.region,
        "zone": p.zone, "nodes": segment.nodes, "gpus_per_node": p.gpus_per_node,
        "started_at": _ts(segment.started_at), "ended_at": _ts(segment.ended_at),
        "node_price_usd_per_hour": p.node_price_usd_per_hour,
        "on_demand_node_price_usd_per_hour": p.on_demand_node_price_usd_per_hour,
        "price_source": p.price_source, "end_reason": segment.end_reason,
    }  # fmt: skip


def _upsert_segment(conn: Connection, job_id: str, index: int, segment: SegmentState) -> None:
    row = _segment_row(job_id, index, segment)
    statement = _insert(conn, segments).values(dict(row))
    excluded = statement.excluded
    changed = {k: excluded[k] for k in row if k not in ("job_id", "seq")}
    conn.execute(  # a closed segment is final: only an open one is updated
        statement.on_conflict_do_update(
            index_elements=[segments.c.job_id, segments.c.seq],
            set_=changed,
            where=segments.c.ended_at.is_(None),
        )
    )
