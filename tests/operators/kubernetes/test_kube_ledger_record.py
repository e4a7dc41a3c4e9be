"""What the operator writes of a GPUJob to the ledger database, pure: its record, and how a deletion
ends it (:mod:`operators.kubernetes.ledger_db`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from operators.kubernetes.ledger_db import DELETED, LedgerWrites, closed_by_deletion, ledger_record
from orchestrator.state.database_url import URL_ENV
from orchestrator.state.job_state import JobState, SegmentState
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing.states import SPOT

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
BODY = {
    "metadata": {
        "name": "train",
        "namespace": "ml",
        "uid": "u-1",
        "creationTimestamp": "2026-03-02T11:59:00Z",
    },
    "spec": {"team": "vision", "command": "t.py"},
}


def _state(status: JobStatus, end: datetime | None) -> JobState:
    first = SegmentState(attempt=1, placement=SPOT, nodes=2, started_at=T0, ended_at=T0 + timedelta(hours=1),
                         end_reason="preempted")  # fmt: skip
    last = SegmentState(attempt=2, placement=SPOT, nodes=2, started_at=T0 + timedelta(hours=1), ended_at=end)
    return JobState(status=status, attempt=2, preemptions=1, segments=(first, last))


def test_a_deletion_closes_the_open_segment_and_cancels_a_job_that_had_not_ended() -> None:
    ended = closed_by_deletion(_state(JobStatus.RUNNING, None), T0 + timedelta(hours=3), "uid-1")
    assert ended.status is JobStatus.CANCELLED and ended.message == "the GPUJob was deleted"
    assert [(s.ended_at, s.end_reason) for s in ended.segments] == [
        (T0 + timedelta(hours=1), "preempted"), (T0 + timedelta(hours=3), DELETED)
    ]  # fmt: skip
    done = _state(JobStatus.FAILED, T0 + timedelta(hours=2)).model_copy(
        update={"failure_reason": FailureReason.USER_CODE_ERROR}
    )
    assert closed_by_deletion(done, T0 + timedelta(hours=5), "uid-1") == done  # an ended job: as it ended


def test_the_record_names_the_gpujob_by_uid_with_its_place_and_team() -> None:
    job, segments = ledger_record(BODY, _state(JobStatus.RUNNING, None), T0 + timedelta(hours=2), "prod-eu")
    assert (job.id, job.name, job.user, job.team, job.cluster, job.namespace, job.backend) == (
        "u-1",
        "train",
        "ml",
        "vision",
        "prod-eu",
        "ml",
        "kubernetes",
    )
    assert job.submitted_at == T0 - timedelta(minutes=1) and (job.attempts, job.preemptions) == (2, 1)
    assert len(segments) == 2 and '"team": "vision"' in job.spec_json


def test_without_a_database_nothing_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    writes = LedgerWrites()
    status = _state(JobStatus.RUNNING, None).to_status()
    assert not writes.after_pass(BODY, status, T0) and not writes.on_delete({**BODY, "status": status}, T0)


def test_a_pass_writes_only_what_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    monkeypatch.setenv(URL_ENV, url)
    writes = LedgerWrites()
    running = _state(JobStatus.RUNNING, None).to_status()
    assert writes.after_pass(BODY, running, T0 + timedelta(hours=2))
    assert not writes.after_pass(BODY, running, T0 + timedelta(hours=3))  # the same state: no write
    done = _state(JobStatus.SUCCEEDED, T0 + timedelta(hours=4)).to_status()
    assert writes.after_pass(BODY, done, T0 + timedelta(hours=4))
    store = JobStore(tmp_path, read_only=True, url=url)
    assert store.job("u-1").status is JobStatus.SUCCEEDED
    assert [s.ended_at for s in store.segments("u-1")] == [T0 + timedelta(hours=1), T0 + timedelta(hours=4)]
