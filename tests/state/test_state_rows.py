"""A job's state written by save_state: its row and the options that changed in one statement."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.state.progress_state import ProgressState
from orchestrator.state.state_rows import load_state, save_state
from orchestrator.state.store import JobStore
from orchestrator.state.watch import WaitReason
from tests.state.statements import counted

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
KEPT = {"market": {"zone": "use1-az1", "capacity": [1, 2]}, "monitor": {"interval_s": 30}}


def _job(store: JobStore) -> str:
    return store.create_job(
        name="j", user="u", team="t", backend="local", spec_json="{}", deadline=None, now=NOW, options=KEPT
    ).id


def test_the_row_and_changed_options_are_one_statement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JobStore(tmp_path)
    job_id = _job(store)
    old = load_state(store, job_id)
    waiting = WaitReason(code="no_spot", message="no spot capacity", since=NOW)
    new = old.model_copy(update={"progress": ProgressState(step=3, loss=0.5), "waiting": waiting})
    with counted(store, monkeypatch) as sent, store.transaction() as conn:
        save_state(conn, job_id, old, new, [], NOW)
    writes = [s for s in sent if s.strip().upper() not in ("BEGIN", "BEGIN IMMEDIATE", "COMMIT")]
    assert len(writes) == 1 and writes[0].lstrip().upper().startswith("UPDATE JOBS"), writes
    options = store.job_options(job_id)
    assert {k: options[k] for k in KEPT} == KEPT  # the keys not saved are kept as they were
    assert options["progress"] == {"step": 3, "loss": 0.5, "finished": False}
    assert load_state(store, job_id) == new

    cleared = new.model_copy(update={"waiting": None})
    with store.transaction() as conn:
        save_state(conn, job_id, new, cleared, [], NOW)
    options = store.job_options(job_id)
    assert "waiting" in options and options["waiting"] is None  # cleared, as the job's options keep it
    assert options["progress"] == {"step": 3, "loss": 0.5, "finished": False}
    assert load_state(store, job_id) == cleared


def test_options_the_database_cannot_merge_are_saved_all_the_same(tmp_path: Path) -> None:
    """A loss of NaN or a NUL in a message: JSON the database's own JSON type refuses."""
    store = JobStore(tmp_path)
    job_id = _job(store)
    old = load_state(store, job_id)
    waiting = WaitReason(code="no_spot", message="odd \x00 text \ud800", since=NOW)
    new = old.model_copy(update={"progress": ProgressState(step=9, loss=math.nan), "waiting": waiting})
    with store.transaction() as conn:
        save_state(conn, job_id, old, new, [], NOW)
    loaded = load_state(store, job_id)
    assert loaded.progress is not None and loaded.progress.step == 9 and math.isnan(loaded.progress.loss or 0)
    assert loaded.waiting == waiting
    assert {k: store.job_options(job_id)[k] for k in KEPT} == KEPT
