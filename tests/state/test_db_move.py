"""Moving a SQLite job store into PostgreSQL: everything copied in one transaction, counts and totals
checked, nothing written on any difference, the target's id sequences moved past the copied ids."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from orchestrator.errors import PermanentError, UserError
from orchestrator.state import db_move
from orchestrator.state.database import HEAD_REVISION, upgrade_schema
from orchestrator.state.db_move import LedgerTotals, ledger_totals, move_store, snapshot, sqlite_reader
from orchestrator.state.tables import events, jobs, segments
from orchestrator.testing.postgres import PostgresServer
from tests.state.ledger_home import as_schema_3, build_ledger_home

NOW = datetime(2026, 6, 1, tzinfo=UTC)

pytestmark = pytest.mark.slow


@pytest.fixture
def home(tmp_path: Path) -> Path:
    build_ledger_home(tmp_path / "home")
    return tmp_path / "home"


def _totals(url: str) -> LedgerTotals:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with snapshot(engine) as conn:
            return ledger_totals(conn, NOW)
    finally:
        engine.dispose()


def _sqlite_totals(path: Path) -> LedgerTotals:
    engine = sqlite_reader(path)
    try:
        with snapshot(engine) as conn:
            return ledger_totals(conn, NOW)
    finally:
        engine.dispose()


def _move(source: Path, target: str) -> db_move.MoveResult:
    return move_store(source, target, NOW, upgrade_schema, target)


def test_every_row_and_total_arrives(home: Path, postgres_server: PostgresServer) -> None:
    target = postgres_server.new_database()
    before = _sqlite_totals(home / "gpuctl.db")
    result = _move(home / "gpuctl.db", target)
    assert result.revision == HEAD_REVISION
    assert result.source == before == result.target == _totals(target)
    assert before.rows["jobs"] == 5 and before.rows["segments"] == 5 and before.rows["events"] > 10
    assert before.segment_cost_usd == pytest.approx(2 * 1 * 1 + 1 * 2.5 * 1 + 0.25 * 1 + 4 * 6.5 * 3 + 1 * 1)
    assert before.jobs_by_status == {"SUCCEEDED": 2, "FAILED": 1, "CANCELLED": 1, "PREEMPTED": 1}


def test_a_schema_3_store_moves_whole(home: Path, tmp_path: Path, postgres_server: PostgresServer) -> None:
    legacy = tmp_path / "legacy.db"
    as_schema_3(home / "gpuctl.db", legacy)
    target = postgres_server.new_database()
    result = _move(legacy, target)
    assert result.target == _sqlite_totals(home / "gpuctl.db")
    with sqlite3.connect(legacy) as conn:  # the source is read, never upgraded
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3


def test_new_rows_get_new_ids_after_the_move(home: Path, postgres_server: PostgresServer) -> None:
    target = postgres_server.new_database()
    result = _move(home / "gpuctl.db", target)
    engine = sa.create_engine(target)
    try:
        with engine.begin() as conn:
            job_id = conn.execute(sa.select(jobs.c.id).limit(1)).scalar_one()
            new_event = conn.execute(
                events.insert().values(
                    job_id=job_id, time="2026-06-01T00:00:00+00:00", kind="note", message="m"
                )
            ).inserted_primary_key
            top = conn.execute(sa.select(sa.func.max(segments.c.id))).scalar_one()
    finally:
        engine.dispose()
    assert new_event is not None and new_event[0] > result.source.rows["events"]
    assert top == result.source.rows["segments"]


def test_a_target_holding_rows_is_refused_and_left_alone(home: Path, postgres_server: PostgresServer) -> None:
    target = postgres_server.new_database()
    _move(home / "gpuctl.db", target)
    before = _totals(target)
    with pytest.raises(UserError, match="not empty") as caught:
        _move(home / "gpuctl.db", target)
    assert "To fix:" in caught.value.message
    assert _totals(target) == before


def test_any_difference_writes_nothing(
    home: Path, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy whose totals differ from the source's (here: the target's totals come out one job short)
    is rolled back whole: the target keeps its schema and no row."""
    real = db_move.ledger_totals
    calls = []

    def one_short(conn: sa.Connection, priced_at: datetime) -> LedgerTotals:
        found = real(conn, priced_at)
        calls.append(found)
        if len(calls) == 1:
            return found
        return LedgerTotals(
            {**found.rows, "jobs": found.rows["jobs"] - 1}, found.segment_cost_usd, found.jobs_by_status
        )

    monkeypatch.setattr(db_move, "ledger_totals", one_short)
    target = postgres_server.new_database()
    with pytest.raises(PermanentError, match=r"does not add up.*table jobs: 5 rows before, 4 after"):
        _move(home / "gpuctl.db", target)
    monkeypatch.setattr(db_move, "ledger_totals", real)
    assert set(_totals(target).rows.values()) == {0}


def test_a_store_of_a_newer_gpuctl_is_refused(home: Path, postgres_server: PostgresServer) -> None:
    with sqlite3.connect(home / "gpuctl.db") as conn:
        conn.execute("ALTER TABLE segments ADD COLUMN carbon_grams REAL")
    with pytest.raises(PermanentError, match=r"segments\.carbon_grams"):
        _move(home / "gpuctl.db", postgres_server.new_database())


def test_the_source_itself_is_refused_as_target(home: Path) -> None:
    with pytest.raises(UserError, match="the source file itself"):
        _move(home / "gpuctl.db", f"sqlite:///{home / 'gpuctl.db'}")


def test_differences_name_every_count_and_total() -> None:
    before = LedgerTotals({"jobs": 2, "segments": 3}, 10.0, {"SUCCEEDED": 2})
    after = LedgerTotals({"jobs": 2, "segments": 2}, 9.5, {"SUCCEEDED": 1, "FAILED": 1})
    assert before.differences(before) == []
    assert before.differences(after) == [
        "table segments: 3 rows before, 2 after",
        "segment cost: 10.0 USD before, 9.5 after",
        "jobs FAILED: 0 before, 1 after",
        "jobs SUCCEEDED: 2 before, 1 after",
    ]
