"""Cost records written as the job store's rows, for the tests that read the ledger back."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sqlalchemy import insert

from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.store import JobStore
from orchestrator.state.tables import jobs as jobs_table
from orchestrator.state.tables import segments as segments_table


def job_row(j: JobRecord) -> dict[str, object]:
    found = {f.name: getattr(j, f.name) for f in dataclasses.fields(j)}
    return {**found, "status": str(j.status), "submitted_at": j.submitted_at.isoformat(),
            "updated_at": j.updated_at.isoformat()}  # fmt: skip


def segment_row(s: SegmentRecord, keep_id: bool = False) -> dict[str, object]:
    """``s`` as a row; ``keep_id``: with its id (and its position ``seq``), else the store numbers it."""
    found = {name: value for name, value in s._asdict().items() if keep_id or name != "id"}
    kept = {"seq": s.id} if keep_id else {}
    return {**found, **kept, "started_at": s.started_at.isoformat(),
            "ended_at": s.ended_at and s.ended_at.isoformat()}  # fmt: skip


def write_records(
    store: JobStore, jobs: Sequence[JobRecord], segments: Sequence[SegmentRecord], keep_ids: bool = False
) -> None:
    """The records as the job store's rows, in one transaction."""
    with store.transaction() as conn:
        if jobs:
            conn.execute(insert(jobs_table), [job_row(j) for j in jobs])
        if segments:
            conn.execute(insert(segments_table), [segment_row(s, keep_ids) for s in segments])
