"""A gpuctl home with several jobs and their segments, written through the real store and engine
(the way a controller writes them), for the tests that move or compare whole databases."""

from __future__ import annotations

import dataclasses
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.catalog.offers import MarketKind
from orchestrator.controller.actions import CloseSegment, CountPreemption, StartAttempt, Transition
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import open_store
from orchestrator.testing.states import SPOT, drive, running_job, submit, through
from tests.state.legacy_schema import LEGACY_TABLES, build_legacy_store

T0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
ON_DEMAND = dataclasses.replace(SPOT, market=MarketKind.ON_DEMAND, node_price_usd_per_hour=3.0)
"""The same V100, on demand at 3 USD an hour."""


def hours(n: float) -> datetime:
    return T0 + timedelta(hours=n)


def build_ledger_home(home: Path) -> dict[str, str]:
    """Five jobs of two teams: succeeded after a preemption (3 segments), failed, cancelled while
    pending, succeeded on demand, and one preempted and waiting. Every segment is closed, so reports
    made at any later time give the same totals. Returns the job ids by name."""
    store = open_store(home)
    ids: dict[str, str] = {}

    ids["resilient"] = job = running_job(
        store, hours(0), nodes=2, name="resilient", user="ana", team="vision"
    )
    drive(store, job, hours(1), CountPreemption(), CloseSegment("preempted"),
          Transition(JobStatus.PREEMPTED, "reclaimed"))  # fmt: skip
    drive(store, job, hours(1.5), *through(JobStatus.RECOVERING, JobStatus.LAUNCHING),
          StartAttempt(SPOT, 1), Transition(JobStatus.RUNNING, "running"))  # fmt: skip
    drive(store, job, hours(4), CloseSegment("finished"), Transition(JobStatus.SUCCEEDED, "finished"))

    ids["broken"] = job = running_job(store, hours(2), name="broken", user="bo", team="nlp")
    drive(store, job, hours(2.25), CloseSegment("failed"),
          Transition(JobStatus.FAILED, "exit 1", reason=FailureReason.USER_CODE_ERROR))  # fmt: skip

    ids["never"] = job = submit(store, hours(3), name="never", user="bo", team="nlp")
    drive(store, job, hours(3), Transition(JobStatus.CANCELLED, "cancelled"))

    ids["steady"] = job = running_job(
        store, hours(1), placement=ON_DEMAND, nodes=4, name="steady", team="nlp"
    )
    drive(store, job, hours(7.5), CloseSegment("finished"), Transition(JobStatus.SUCCEEDED, "finished"))

    ids["waiting"] = job = running_job(store, hours(5), name="waiting", user="ana", team="vision")
    drive(store, job, hours(6), CountPreemption(), CloseSegment("preempted"),
          Transition(JobStatus.PREEMPTED, "reclaimed"))  # fmt: skip
    return ids


def as_schema_3(written: Path, target: Path) -> None:
    """``target``: a store of schema version 3 (the release before Alembic) holding every row of the
    store ``written`` (its columns that schema 3 had)."""
    build_legacy_store(target, 3)
    conn = sqlite3.connect(target, isolation_level=None)
    try:
        conn.execute("ATTACH DATABASE ? AS written", (str(written),))
        conn.execute("BEGIN")
        for tables in LEGACY_TABLES.values():
            for table in tables:
                columns = ", ".join(
                    f'"{row[1]}"' for row in conn.execute(f'PRAGMA main.table_info("{table}")')
                )
                conn.execute(
                    f'INSERT INTO main."{table}" ({columns}) SELECT {columns} FROM written."{table}"'
                )
        conn.execute("COMMIT")
    finally:
        conn.close()
