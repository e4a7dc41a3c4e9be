"""The cost report's read of the ledger: every segment (of a window) in one query, its rows read as
plain tuples.

Each value is checked as :class:`~orchestrator.state.row_check.Row` checks it (text is text, a whole
number is 0 or more, a price a finite number 0 or more, a time ISO 8601 with its zone). On SQLite,
whose columns hold a value of any type, :func:`_segment` checks each row in Python. On PostgreSQL,
whose columns hold only values of their type (NULL only where allowed), the server checks the
ranges of the numbers as it reads the rows (the ``clean`` column after them), and only the times are
read and checked here. A row that fails a check goes through the store's own reading of a segment
row, which names the first damaged column: it is skipped and noted in :attr:`JobStore.damaged`,
exactly as :meth:`JobStore.segments` does. The segments and their order are those of
:meth:`JobStore.segments` (``strict`` off).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from math import isfinite
from typing import Any, cast

from sqlalchemy import ColumnElement, Connection, and_, bindparam, or_, select

from orchestrator.state.prepared import Prepared
from orchestrator.state.records import SegmentRecord
from orchestrator.state.row_check import DamagedRow, Row
from orchestrator.state.store import JobStore, _segment_record
from orchestrator.state.tables import segments

SEGMENT_COLUMNS = SegmentRecord._fields
"""The segment columns read, in the order of :class:`SegmentRecord`'s fields."""
_NUMBER = (int, float)
_new = tuple.__new__
_read_time = datetime.fromisoformat


class _Tuples(Prepared):
    """A statement whose rows are read as the driver's tuples (no dict per row)."""

    def rows(self, conn: Connection, params: Mapping[str, Any] | None = None) -> list[Any]:
        driver, sql, args = self._args(conn, params or {})
        cursor = driver.execute(sql, args)
        try:
            return cast(list[Any], cursor.fetchall())
        finally:
            cursor.close()


_WHOLE = ("id", "attempt", "nodes", "gpus_per_node")
_PRICES = ("node_price_usd_per_hour", "on_demand_node_price_usd_per_hour")
_LARGEST_FLOAT = 1.7976931348623157e308  # NaN and infinity are not <= it, on either engine


def _in_range() -> ColumnElement[bool]:
    """A row's whole numbers 0 or more and its prices finite numbers 0 or more (NULL: not)."""
    c = segments.c
    return and_(*(c[n] >= 0 for n in _WHOLE), *(c[n].between(0, _LARGEST_FLOAT) for n in _PRICES))


def _statements(clean: ColumnElement[bool] | None) -> tuple[_Tuples, _Tuples]:
    """Every segment, and those that may overlap ``since``: each row's columns, then ``clean`` (if any)."""
    flag = () if clean is None else (clean.label("clean"),)
    every = select(*(segments.c[name] for name in SEGMENT_COLUMNS), *flag).order_by(segments.c.id)
    since = every.where(or_(segments.c.ended_at.is_(None), segments.c.ended_at >= bindparam("since")))
    return _Tuples(every), _Tuples(since)


_READS = {"sqlite": _statements(None), "postgresql": _statements(_in_range())}
"""By engine (see the module's doc; on SQLite, ``typeof`` of each value in SQL costs more than
:func:`_segment`'s checks in Python)."""
_CLEAN = len(SEGMENT_COLUMNS)  # the position of a row's ``clean`` flag


def read_segments(
    store: JobStore, since: datetime | None = None, of_jobs: Sequence[str] | None = None
) -> list[SegmentRecord]:
    """Every segment that may overlap ``since``..now (all of them without ``since``), in the order of
    :meth:`JobStore.segments`; a damaged row is skipped and noted in ``store.damaged``. ``of_jobs``:
    only these jobs' rows are read, their damaged rows noted job by job in that order (as reading
    each job's segments in turn would)."""
    every, overlapping = _READS[store.engine.dialect.name]
    flagged = store.engine.dialect.name == "postgresql"  # rows end with the server's ``clean``
    if since is None:
        rows = store.connections.read(every)
    else:
        rows = store.connections.read(overlapping, {"since": since.astimezone(UTC).isoformat()})
    wanted = None if of_jobs is None else {job_id: i for i, job_id in enumerate(of_jobs)}
    found: list[SegmentRecord] = []
    damaged: list[tuple[int, DamagedRow]] = []
    for row in cast(Sequence[tuple[Any, ...]], rows):
        if wanted is not None and row[1] not in wanted:
            continue
        if flagged:
            record = _clean_record(row) if row[_CLEAN] else None
            if record is not None:
                found.append(record)
                continue
            row = row[:_CLEAN]  # a number out of range, or a time that does not read: checked here
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


def _clean_record(row: tuple[Any, ...]) -> SegmentRecord | None:
    """The record of a row whose values the database checked (``clean``: each of its type, in its
    range); None when a time is not ISO 8601 with its zone (:func:`_segment` then reads the row)."""
    try:
        started = _read_time(row[11])
        ended = None if row[12] is None else _read_time(row[12])
    except (TypeError, ValueError):
        return None
    if started.tzinfo is None or (ended is not None and ended.tzinfo is None):
        return None
    return _new(SegmentRecord, (*row[:11], started, ended, *row[13:_CLEAN]))  # the flag after them: left


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
    return _new(SegmentRecord, (
        id_, job_id, attempt, gpu_type, instance_type, market, cloud, region, zone, nodes, gpus_per_node,
        started, ended, float(price), float(on_demand), price_source, end_reason,
    ))  # fmt: skip
