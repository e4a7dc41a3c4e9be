"""The market log: what the controller saw of each zone's spot capacity, across jobs.

A controller watches the zones of every job it places, every tick. plan-ahead plans better when a
job starts with what the market did in the week before it (its daily cycle above all: see
:mod:`orchestrator.policies.daily`), so the driver keeps what it saw, per zone, as spans of one
capacity (``zone_watch``): :meth:`ZoneWatch.record` extends a zone's newest span when the capacity
is the same and the span ended at most :data:`MAX_GAP_S` ago, else begins a new one (at the old
one's end when it was contiguous, so a change leaves no hole; after a longer gap, nobody watched).
A zone's spans that ended more than :data:`KEEP_S` ago are dropped when it begins a new span (a zone
no job watches any more keeps its last week, a few rows). A controller looks at the same zones for
every job it ticks: a zone whose capacity it wrote less than :data:`REWRITE_S` ago, unchanged, is not
written again (its span's end is at most that much behind).

A job's own log is built from these spans once, at its first look at the market, and kept with the
job (``job_market_logs``): a restarted controller gives the job the same log, so it decides the same
way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from orchestrator.state.prepared import Prepared
from orchestrator.state.store import JobStore
from orchestrator.state.tables import job_market_logs, zone_watch

MAX_GAP_S = 1800.0
"""A zone not looked at for longer than this (30 minutes; a controller's pass is 1 to 60 s, an idle
one's up to a few minutes) was not watched in between."""
KEEP_S = 8 * 24 * 3600.0
"""Spans are kept eight days: a week before any job, and a day to spare."""
REWRITE_S = 5.0
"""An unchanged capacity is written again (its span extended) at most this often by one controller."""

_Z = zone_watch.c
_NEWEST = Prepared(
    select(_Z.id, _Z.end, _Z.capacity)
    .where(_Z.zone == bindparam("zone"))
    .order_by(_Z.end.desc(), _Z.id.desc())
    .limit(1)
)
_EXTEND = Prepared(update(zone_watch).where(_Z.id == bindparam("b_id")).values(end=bindparam("b_end")))
_BEGIN = Prepared(insert(zone_watch))
_FORGET = Prepared(delete(zone_watch).where(_Z.zone == bindparam("zone"), _Z.end < bindparam("before")))
_JOB_LOG = Prepared(select(job_market_logs.c.log_json).where(job_market_logs.c.job_id == bindparam("id")))


@dataclass(frozen=True)
class WatchedSpan:
    """From ``begin_s`` to ``end_s`` (Unix seconds) ``zone`` offered ``capacity`` spot nodes (None:
    no limit known)."""

    zone: str
    begin_s: float
    end_s: float
    capacity: int | None


class ZoneWatch:
    """The market log in the job store (local and SLURM controllers)."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._written: dict[str, tuple[int | None, float]] = {}
        """Zone -> the capacity this object last wrote for it, and when (Unix seconds)."""

    def record(self, capacities: Mapping[str, int | None], now: datetime) -> None:
        """What each zone offers at ``now``, in one transaction (a zone written by this object less
        than :data:`REWRITE_S` before, with the same capacity, is left as it is)."""
        t = now.timestamp()
        changed = {
            zone: capacity for zone, capacity in capacities.items()
            if (written := self._written.get(zone)) is None or written[0] != capacity
            or not 0 <= t - written[1] < REWRITE_S
        }  # fmt: skip
        if not changed:
            return
        with self.store.transaction() as conn:
            for zone, capacity in changed.items():
                found = _NEWEST.rows(conn, {"zone": zone})
                newest = found[0] if found else None
                contiguous = newest is not None and t - float(newest["end"]) <= MAX_GAP_S
                if newest is not None and contiguous and newest["capacity"] == capacity:
                    _EXTEND.run(conn, {"b_end": max(t, float(newest["end"])), "b_id": newest["id"]})
                    continue
                begin = min(float(newest["end"]), t) if newest is not None and contiguous else t
                _BEGIN.run(conn, {"zone": zone, "begin": begin, "end": t, "capacity": capacity})
                _FORGET.run(conn, {"zone": zone, "before": t - KEEP_S})  # by the (zone, end) index
        self._written.update((zone, (capacity, t)) for zone, capacity in changed.items())

    def spans(self, zones: Sequence[str], since: datetime, until: datetime) -> list[WatchedSpan]:
        """The spans of ``zones`` that overlap [since, until), oldest first."""
        if not zones:
            return []
        rows = self.store._query(
            select(_Z.zone, _Z.begin, _Z.end, _Z.capacity)
            .where(_Z.zone.in_(list(zones)), _Z.end >= since.timestamp(), _Z.begin < until.timestamp())
            .order_by(_Z.begin, _Z.id)
        )
        return [WatchedSpan(r["zone"], float(r["begin"]), float(r["end"]), r["capacity"]) for r in rows]

    def job_log(self, job_id: str) -> dict[str, Any] | None:
        """The market log kept with the job (see :meth:`set_job_log`), or None before its first look."""
        rows = self.store._query(_JOB_LOG, {"id": job_id})
        return dict(json.loads(rows[0]["log_json"])) if rows else None

    def set_job_log(self, job_id: str, log: Mapping[str, Any]) -> None:
        """Keep the job's log (once: a second call leaves the first)."""
        dialect = sqlite if self.store.sqlite else postgresql
        with self.store.transaction() as conn:
            conn.execute(
                dialect.insert(job_market_logs)
                .values(job_id=job_id, log_json=json.dumps(log))
                .on_conflict_do_nothing()
            )


__all__ = ["KEEP_S", "MAX_GAP_S", "WatchedSpan", "ZoneWatch"]
