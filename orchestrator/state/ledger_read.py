"""The cost report's read of the ledger: every segment (of a window) in one query, its rows read as
plain tuples and checked column by column in one pass.

Each value is checked as :class:`~orchestrator.state.row_check.Row` checks it (text is text, a whole
number is 0 or more, a price a finite number 0 or more, a time ISO 8601 with its zone). A row that
fails a check goes through the store's own reading of a segment row, which names the first damaged
column: it is skipped and noted in :attr:`JobStore.damaged`, exactly as :meth:`JobStore.segments`
does. The segments and their order are those of :meth:`JobStore.segments` (``strict`` off).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from math import isfinite
from typing import Any, cast

from sqlalchemy import Connection, bindparam, or_, select

from orchestrator.state.prepared import Prepared
from orchestrator.state.records import SegmentRecord
from orchestrator.state.row_check import DamagedRow, Row
from orchestrator.state.store import JobStore, _segment_record
from orchestrator.state.tables import segments

SEGMENT_COLUMNS = tuple(f.name for f in fields(SegmentRecord))
"""The segment columns read, in the order of :class:`SegmentRecord`'s fields."""
_NUMBER = (int, float)
_new = object.__new__


class _Tuples(Prepared):
    """A statement whose rows are read as the driver's tuples (no dict per row)."""

    def rows(self, conn: Connection, params: Mapping[str, Any] | None = None) -> list[Any]:
        driver, sql, args = self._args(conn, params or {})
        cursor = driver.execute(sql, args)
        try:
            return cast(list[Any], cursor.fetchall())
        finally:
            cursor.close()


_EVERY = select(*(segments.c[name] for name in SEGMENT_COLUMNS)).order_by(segments.c.id)
_SEGMENTS = _Tuples(_EVERY)
_SEGMENTS_SINCE = _Tuples(
    _EVERY.where(or_(segments.c.ended_at.is_(None), segments.c.ended_at >= bindparam("since")))
)


def read_segments(
    store: JobStore, since: datetime | None = None, of_jobs: Sequence[str] | None = None
) -> list[SegmentRecord]:
    """Every segment that may overlap ``since``..now (all of them without ``since``), in the order of
    :meth:`JobStore.segments`; a damaged row is skipped and noted in ``store.damaged``. ``of_jobs``:
    only these jobs' rows are read, their damaged rows noted job by job in that order (as reading
    each job's segments in turn would)."""
    if since is None:
        rows = store.connections.read(_SEGMENTS)
    else:
        rows = store.connections.read(_SEGMENTS_SINCE, {"since": since.astimezone(UTC).isoformat()})
    wanted = None if of_jobs is None else {job_id: i for i, job_id in enumerate(of_jobs)}
    found: list[SegmentRecord] = []
    damaged: list[tuple[int, DamagedRow]] = []
    for row in cast(Sequence[tuple[Any, ...]], rows):
        if wanted is not None and row[1] not in wanted:
            continue
        record = _segment(row)
        if record is None:
            record, damage = _checked(store, row)
            if damage is not None:
                damaged.append((0 if wanted is None else wanted[row[1]], damage))
        if record is not None:
            found.append(record)
    for _, damage in sorted(damaged, key=lambda d: d[0]):  # stable: by id within a job
        store.note_damage(damage)
    return found


def _checked(store: JobStore, row: tuple[Any, ...]) -> tuple[SegmentRecord | None, DamagedRow | None]:
    """A row that failed a check, read through the store's checks: its record, or what is damaged."""
    try:
        return _segment_record(
            Row(store.path, "segments", dict(zip(SEGMENT_COLUMNS, row, strict=True)))
        ), None
    except DamagedRow as damage:
        return None, damage


def _segment(row: tuple[Any, ...]) -> SegmentRecord | None:
    """The record of a row whose every column reads (None: one does not; :func:`_checked` says which)."""
    (id_, job_id, attempt, gpu_type, instance_type, market, cloud, region, zone, nodes, gpus_per_node,
     started_at, ended_at, price, on_demand, price_source, end_reason) = row  # fmt: skip
    try:  # a time is text in ISO 8601 with its zone (fromisoformat: TypeError for anything but text)
        started = datetime.fromisoformat(started_at)
        ended = None if ended_at is None else datetime.fromisoformat(ended_at)
    except (TypeError, ValueError):
        return None
    if (
        started.tzinfo is None
        or (ended is not None and ended.tzinfo is None)
        or not (isinstance(job_id, str) and isinstance(gpu_type, str) and isinstance(instance_type, str)
                and isinstance(market, str) and isinstance(cloud, str) and isinstance(region, str)
                and isinstance(zone, str) and isinstance(price_source, str)
                and (end_reason is None or isinstance(end_reason, str)))
        or not (isinstance(id_, int) and id_ >= 0 and isinstance(attempt, int) and attempt >= 0
                and isinstance(nodes, int) and nodes >= 0 and isinstance(gpus_per_node, int)
                and gpus_per_node >= 0)
        or not (isinstance(price, _NUMBER) and isfinite(price) and price >= 0)
        or not (isinstance(on_demand, _NUMBER) and isfinite(on_demand) and on_demand >= 0)
    ):  # fmt: skip
        return None
    record: SegmentRecord = _new(SegmentRecord)  # its fields set as its __init__ would, without a
    record.__dict__.update(zip(SEGMENT_COLUMNS, (  # frozen dataclass's object.__setattr__ per field
        id_, job_id, attempt, gpu_type, instance_type, market, cloud, region, zone, nodes, gpus_per_node,
        started, ended, float(price), float(on_demand), price_source, end_reason,
    ), strict=True))  # fmt: skip
    return record
