"""The cost report's bulk read of the segments (orchestrator/state/ledger_read.py): a row whose
values are out of range (checked by the database on PostgreSQL) or whose time does not read is
skipped and noted exactly as :meth:`JobStore.segments` skips and notes it, on both engines."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import insert

from orchestrator.state.ledger_read import read_segments
from orchestrator.state.store import JobStore
from orchestrator.state.tables import segments
from tests.costs.factory import fleet
from tests.costs.ledger_rows import segment_row, write_records

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

DAMAGED_ON_EACH_ENGINE: list[dict[str, object]] = [
    {"node_price_usd_per_hour": float("inf")},
    {"on_demand_node_price_usd_per_hour": float("inf")},
    {"node_price_usd_per_hour": -0.5},
    {"on_demand_node_price_usd_per_hour": -1.0},
    {"attempt": -1},
    {"nodes": -2},
    {"gpus_per_node": -8},
    {"started_at": "2026-03-02T10:00:00"},  # no zone
    {"ended_at": "2026-03-02T11:00:00"},
    {"started_at": "the day before"},
    {"ended_at": ""},
]


def _home(tmp_path: Path, damaged: list[dict[str, object]]) -> Path:
    """The factory's fleet, and one damaged copy of its first segment per entry of ``damaged``."""
    home = tmp_path / "home"
    job_records, segment_records, _ = fleet()
    store = JobStore(home)
    write_records(store, job_records, segment_records)
    with store.transaction() as conn:
        for change in damaged:
            conn.execute(insert(segments), {**segment_row(segment_records[0]), **change})
    return home


def test_a_damaged_value_of_any_column_is_skipped_and_noted_as_the_store_does(tmp_path: Path) -> None:
    home = _home(tmp_path, DAMAGED_ON_EACH_ENGINE)
    row_by_row, bulk = JobStore(home, read_only=True), JobStore(home, read_only=True)
    expected = row_by_row.segments()
    assert read_segments(bulk) == expected
    assert list(bulk.damaged) == list(row_by_row.damaged)
    assert len(bulk.damaged) == len(DAMAGED_ON_EACH_ENGINE)


def test_a_price_that_is_not_a_number_is_skipped_and_noted(tmp_path: Path, each_engine: str) -> None:
    if each_engine.startswith("sqlite"):
        pytest.skip("SQLite stores NaN as NULL, which the column refuses")
    home = _home(tmp_path, [{"node_price_usd_per_hour": float("nan")},
                            {"on_demand_node_price_usd_per_hour": float("nan")}])  # fmt: skip
    row_by_row, bulk = JobStore(home, read_only=True), JobStore(home, read_only=True)
    assert read_segments(bulk) == row_by_row.segments()
    assert list(bulk.damaged) == list(row_by_row.damaged) and len(bulk.damaged) == 2
