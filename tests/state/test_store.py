from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.controller import engine
from orchestrator.controller.actions import CloseSegment, CountPreemption, StartAttempt, Transition
from orchestrator.errors import InternalError, NotFoundError
from orchestrator.state.state_rows import load_state, save_state
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing.states import SPOT, drive, through

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def _job(store: JobStore) -> str:
    return store.create_job(
        name="j", user="u", team="t", backend="local", spec_json="{}", deadline=None, now=NOW
    ).id


def test_a_transition_saves_status_and_event_together(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = _job(store)
    drive(store, job_id, NOW, Transition(JobStatus.PLACING, "placing"))
    assert store.job(job_id).status is JobStatus.PLACING
    assert [e.status for e in store.events(job_id)] == [JobStatus.PENDING, JobStatus.PLACING]


def test_illegal_transition_writes_nothing(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = _job(store)
    with pytest.raises(InternalError):
        drive(store, job_id, NOW, CountPreemption(), Transition(JobStatus.RUNNING, "skip ahead"))
    job = store.job(job_id)
    assert job.status is JobStatus.PENDING and job.preemptions == 0


def test_a_failed_transaction_rolls_the_whole_state_back(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = _job(store)
    old = load_state(store, job_id)
    applied = engine.apply(
        [CountPreemption(), Transition(JobStatus.PLACING, "placing")], old, job_id, (), NOW
    )
    with pytest.raises(RuntimeError), store.transaction() as conn:
        save_state(conn, job_id, old, applied.state, applied.events, NOW)
        raise RuntimeError("killed mid-tick")
    job = store.job(job_id)
    assert job.status is JobStatus.PENDING and job.preemptions == 0
    assert [e.status for e in store.events(job_id)] == [JobStatus.PENDING]


def test_segments_open_and_close(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = _job(store)
    drive(store, job_id, NOW, *through(JobStatus.PLACING, JobStatus.LAUNCHING), StartAttempt(SPOT, 2))
    drive(
        store,
        job_id,
        NOW.replace(hour=13),
        CloseSegment("preempted"),
        Transition(JobStatus.PREEMPTED, "reclaimed"),
    )
    (seg,) = store.segments(job_id)
    assert seg.cost_usd(NOW) == pytest.approx(2.0) and seg.on_demand_equivalent_usd(NOW) == pytest.approx(6.0)
    assert seg.end_reason == "preempted"


def test_job_lookup_by_prefix_and_name(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = _job(store)
    assert store.job(job_id[:4]).id == job_id
    assert store.job("j").id == job_id
    with pytest.raises(NotFoundError):
        store.job("nope")
