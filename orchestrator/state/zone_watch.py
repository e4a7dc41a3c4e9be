"""The market log: what the controller saw of each zone's spot capacity, across jobs.

A controller watches the zones of every job it places, every tick. plan-ahead plans better when a
job starts with what the market did in the week before it (its daily cycle above all: see
:mod:`orchestrator.policies.daily`), so the driver keeps what it saw, per zone, as spans of one
capacity (``zone_watch``): :meth:`ZoneWatch.record` extends a zone's newest span when the capacity
is the same and the span ended at most :data:`MAX_GAP_S` ago, else begins a new one (at the old
one's end when it was contiguous, so a change leaves no hole; after a longer gap, nobody watched).
A zone's spans that ended more than :data:`KEEP_S` ago are dropped when it is recorded again (a zone
no job watches any more keeps its last week, a few rows).

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

from orchestrator.state.store import JobStore

MAX_GAP_S = 1800.0
"""A zone not looked at for longer than this (30 minutes; a controller's pass is 1 to 60 s, an idle
one's up to a few minutes) was not watched in between."""
KEEP_S = 8 * 24 * 3600.0
"""Spans are kept eight days: a week before any job, and a day to spare."""


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

    def record(self, capacities: Mapping[str, int | None], now: datetime) -> None:
        """What each zone offers at ``now``, in one transaction."""
        t = now.timestamp()
        with self.store.transaction() as conn:
            for zone, capacity in capacities.items():
                newest = conn.execute(
                    "SELECT id, end, capacity FROM zone_watch WHERE zone = ? ORDER BY end DESC, id DESC LIMIT 1",
                    (zone,),
                ).fetchone()
                contiguous = newest is not None and t - float(newest["end"]) <= MAX_GAP_S
                if contiguous and newest["capacity"] == capacity:
                    conn.execute(
                        "UPDATE zone_watch SET end = ? WHERE id = ?", (max(t, newest["end"]), newest["id"])
                    )
                    continue
                begin = min(float(newest["end"]), t) if contiguous else t
                conn.execute(
                    "INSERT INTO zone_watch (zone, begin, end, capacity) VALUES (?, ?, ?, ?)",
                    (zone, begin, t, capacity),
                )
            for zone in capacities:  # by the (zone, end) index: no scan of the whole log at every tick
                conn.execute("DELETE FROM zone_watch WHERE zone = ? AND end < ?", (zone, t - KEEP_S))

    def spans(self, zones: Sequence[str], since: datetime, until: datetime) -> list[WatchedSpan]:
        """The spans of ``zones`` that overlap [since, until), oldest first."""
        if not zones:
            return []
        marks = ",".join("?" for _ in zones)
        rows = self.store._query(
            f"SELECT zone, begin, end, capacity FROM zone_watch WHERE zone IN ({marks}) "
            "AND end >= ? AND begin < ? ORDER BY begin, id",
            (*zones, since.timestamp(), until.timestamp()),
        )
        return [WatchedSpan(r["zone"], float(r["begin"]), float(r["end"]), r["capacity"]) for r in rows]

    def job_log(self, job_id: str) -> dict[str, Any] | None:
        """The market log kept with the job (see :meth:`set_job_log`), or None before its first look."""
        rows = self.store._query("SELECT log_json FROM job_market_logs WHERE job_id = ?", (job_id,))
        return dict(json.loads(rows[0]["log_json"])) if rows else None

    def set_job_log(self, job_id: str, log: Mapping[str, Any]) -> None:
        """Keep the job's log (once: a second call leaves the first)."""
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO job_market_logs (job_id, log_json) VALUES (?, ?)",
                (job_id, json.dumps(log)),
            )


__all__ = ["KEEP_S", "MAX_GAP_S", "WatchedSpan", "ZoneWatch"]
