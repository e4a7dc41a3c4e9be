"""What a controller round reads of its jobs at once: each job's :class:`~orchestrator.state.store.JobRows`
with its current attempt's nodes and its segments, three queries per :data:`ROUND_CHUNK` jobs instead
of three per job (on PostgreSQL each query is a round trip to the server)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import BindParameter, and_, bindparam, select

from orchestrator.state.row_check import DamagedRow
from orchestrator.state.store import WITH_PLACEMENT, JobRows, JobStore
from orchestrator.state.tables import jobs, nodes, segments

__all__ = ["ROUND_CHUNK", "round_rows"]

ROUND_CHUNK = 500
"""Job ids per statement (SQLite allows 32766 parameters; PostgreSQL 65535)."""
_IDS: BindParameter[Any] = bindparam("ids", expanding=True)
_JOBS = WITH_PLACEMENT.where(jobs.c.id.in_(_IDS))
_NODES = (
    select(nodes)
    .join(jobs, and_(jobs.c.id == nodes.c.job_id, jobs.c.attempts == nodes.c.attempt))
    .where(jobs.c.id.in_(_IDS))
    .order_by(nodes.c.job_id, nodes.c.created_at, nodes.c.node_id)
)
"""The current attempt's nodes of each job."""
_SEGMENTS = select(segments).where(segments.c.job_id.in_(_IDS)).order_by(segments.c.id)


def round_rows(store: JobStore, job_ids: Sequence[str]) -> dict[str, JobRows]:
    """:meth:`JobStore.job_rows` of each of ``job_ids`` with its current attempt's nodes and its
    segments (a controller round, read once it holds the jobs' leases). A job whose ``jobs`` row is
    damaged is left out (noted): its own tick reads it again and reports it; a damaged node or
    segment is raised by that job's :meth:`JobStore.nodes_in` or :meth:`JobStore.segments_in`, never
    here."""
    found: dict[str, JobRows] = {}
    ordered = sorted(set(job_ids))
    for start in range(0, len(ordered), ROUND_CHUNK):
        ids = {"ids": ordered[start : start + ROUND_CHUNK]}
        node_rows = _by_job(store._query(_NODES, ids))
        segment_rows = _by_job(store._query(_SEGMENTS, ids))
        for r in store._query(_JOBS, ids):
            try:
                rows = store.rows_of(r)
            except DamagedRow:
                continue
            job_id = rows.record.id
            found[job_id] = dataclasses.replace(
                rows, nodes=tuple(node_rows.get(job_id, ())), segments=tuple(segment_rows.get(job_id, ()))
            )
    return found


def _by_job(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    found: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        found.setdefault(str(r["job_id"]), []).append(r)
    return found
