"""`gpuctl status JOB` shows a running job's live step, the values of `-o json`, never the step of the
message written when it became RUNNING (issue 32, item 2)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.controller.actions import Transition
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing.states import drive, running_job
from tests.cli.hostile_home import write_lines

STARTED = datetime.now(UTC) - timedelta(minutes=5)


def _running(store: JobStore, message: str) -> str:
    return running_job(store, STARTED, name="trainer", nodes=2, message=message)


def _progress(step: int, loss: float) -> str:
    when = (STARTED + timedelta(seconds=step)).isoformat()
    return json.dumps({"time": when, "step": step, "total_steps": 300, "loss": loss, "world_size": 2})


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobStore:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    return JobStore(tmp_path)


def test_the_status_line_shows_the_live_step_of_the_json(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = _running(store, "training at step 6 on 2 node(s)")
    write_lines(store.job_dir(job_id) / "progress.jsonl", [_progress(6, 2.0), _progress(128, 0.25)])
    assert main(["status", job_id, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["progress"]["step"] == 128 and doc["nodes"] == 2
    assert main(["status", job_id]) == 0
    headline = capsys.readouterr().out.splitlines()[0]
    assert headline == f"job {job_id} RUNNING: training at step 128/300 on 2 node(s), loss 0.2500"
    assert "step 6 " not in headline


def test_without_progress_the_status_line_keeps_the_message(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = _running(store, "all nodes running")
    assert main(["status", job_id]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"job {job_id} RUNNING: all nodes running"


def test_a_job_not_running_shows_its_message_and_its_last_step(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = _running(store, "training at step 6 on 2 node(s)")
    drive(store, job_id, STARTED, Transition(JobStatus.PREEMPTED, "spot capacity reclaimed"))
    write_lines(store.job_dir(job_id) / "progress.jsonl", [_progress(40, 1.0)])
    assert main(["status", job_id]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"job {job_id} PREEMPTED: spot capacity reclaimed"
    assert "progress: training at step 40/300, loss 1.0000" in lines
