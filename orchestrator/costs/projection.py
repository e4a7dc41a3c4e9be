"""What running jobs will still cost: the forecast's cost to finish at the current market, per job.

The cost report adds it to the row of each running job's open segment (its current GPU type, market,
user and team) as the projected spend; finished jobs project what they cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from orchestrator.state.forecast import forecast
from orchestrator.state.records import JobRecord
from orchestrator.state.row_check import DamagedRow
from orchestrator.state.state_rows import load_state
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore


def costs_to_finish(
    store: JobStore, now: datetime, jobs: Sequence[JobRecord] | None = None
) -> dict[str, float]:
    """Job id -> USD to finish at the current market, for every running job with a forecast
    (``jobs``: the stored jobs, when the caller listed them)."""
    found: dict[str, float] = {}
    for job in store.list_jobs() if jobs is None else jobs:
        if job.status is not JobStatus.RUNNING:
            continue
        try:
            state = load_state(store, job.id)
        except DamagedRow:  # noted in the store, which the report's command shows
            continue
        predicted = forecast(state, now)
        if predicted is not None:
            found[job.id] = predicted.cost_to_finish_usd
    return found
