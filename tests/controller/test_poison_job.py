"""One job's bad data never stops the controller for the others (issue 13).

A stored spec that no longer validates, or an unexpected exception while a job is reconciled or
applied, ends that job FAILED with a reason and an event; a transient fault (a backend command
failing for a while) keeps the job and is recorded once; every other job is still reconciled.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.controller.loop import Controller
from orchestrator.errors import TemporaryError
from orchestrator.spec import load_spec_text
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import JobStore
from tests.controller.conftest import Gpuctl
from tests.controller.fake_backend import FakeBackend

T0 = datetime.now(UTC) - timedelta(minutes=5)


def _submit(store: JobStore, name: str, order: int, backend: str = "fake") -> str:
    spec = load_spec_text(f"name: {name}\ncommand: train.py\nresources: {{nodes: 2}}\n")
    job = store.create_job(name=name, user="u", team="t", backend=backend, spec_json=spec.model_dump_json(),
                           deadline=None, now=T0 + timedelta(seconds=order))  # fmt: skip
    return job.id


def _corrupt(store: JobStore, job_id: str, spec_json: str) -> None:
    """Write the stored spec straight into SQLite, as a hostile or damaged database would hold it."""
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE jobs SET spec_json = ? WHERE id = ?", (spec_json, job_id))


def _null_grace(store: JobStore, job_id: str) -> str:
    doc = json.loads(store.job(job_id).spec_json)
    doc["checkpoint"]["notice_grace_seconds"] = None  # what `.inf` was stored as before the fix
    return json.dumps(doc)


def _tick_until_idle(controller: Controller, limit: int = 30) -> int:
    for n in range(1, limit + 1):
        controller.tick_all()
        if controller.idle.is_set():
            return n
    raise AssertionError("the controller never became idle")


def test_poison_jobs_fail_alone_and_the_others_finish(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    backend = FakeBackend()
    null_grace = _submit(store, "null-grace", 0)
    garbage = _submit(store, "garbage", 1)
    good = [_submit(store, f"good-{i}", 2 + i) for i in range(2)]
    crash = _submit(store, "crash", 4)
    flaky = _submit(store, "flaky", 5)
    _corrupt(store, null_grace, _null_grace(store, null_grace))
    _corrupt(store, garbage, '{"name": "garbage", "command": ')
    backend.crashing[crash] = RuntimeError("launch blew up")
    backend.failing[flaky] = (3, TemporaryError("squeue timed out", "check slurmctld"))

    _tick_until_idle(Controller(store, backend, tick_seconds=60))

    for job_id in good:
        assert store.job(job_id).status is JobStatus.SUCCEEDED, store.events(job_id)
    broken = store.job(null_grace)
    assert (broken.status, broken.failure_reason) == (JobStatus.FAILED, FailureReason.INVALID_SPEC)
    assert "checkpoint.notice_grace_seconds" in broken.message and "finite number" not in broken.message
    assert "Input should be a valid number" in broken.message
    (last,) = [e for e in store.events(null_grace) if e.status is JobStatus.FAILED]
    assert "the stored job spec is invalid" in last.message
    assert store.job(garbage).failure_reason is FailureReason.INVALID_SPEC
    assert "not valid JSON" in store.job(garbage).message

    crashed = store.job(crash)
    assert (crashed.status, crashed.failure_reason) == (JobStatus.FAILED, FailureReason.INTERNAL_ERROR)
    assert "RuntimeError: launch blew up" in crashed.message
    crash_nodes = {n.node_id for n in store.nodes(crash)}
    assert len(crash_nodes) == 2 and crash_nodes <= set(backend.stopped)  # its nodes were stopped
    assert all(n.launch_state == "ended" for n in store.nodes(crash))
    assert all(s.ended_at is not None for s in store.segments(crash))

    # A transient fault: the job is kept, the error recorded once, and it finishes when the fault clears.
    assert store.job(flaky).status is JobStatus.SUCCEEDED
    noted = [e for e in store.events(flaky) if e.kind == "controller_error"]
    assert [e.message for e in noted] == ["squeue timed out"]


def test_terminal_poison_job_is_still_ticked_quietly(tmp_path: Path) -> None:
    """After FAILED, the ticks of the keep-ticking window stop leftover nodes and raise nothing."""
    store = JobStore(tmp_path)
    backend = FakeBackend()
    job_id = _submit(store, "late", 0)
    controller = Controller(store, backend, tick_seconds=60)
    controller.tick_all()
    controller.tick_all()  # placed and launched: two nodes
    assert store.job(job_id).status is JobStatus.LAUNCHING
    _corrupt(store, job_id, "[]")
    controller.tick_all()
    failed = store.job(job_id)
    assert (failed.status, failed.failure_reason) == (JobStatus.FAILED, FailureReason.INVALID_SPEC)
    assert len(backend.stopped) == 2
    before = len(store.events(job_id))
    for _ in range(3):
        controller.tick_all()
    assert len(store.events(job_id)) == before and controller.errors == {}


@pytest.mark.slow  # starts `gpuctl controller run`
def test_cli_on_a_poison_job_prints_no_traceback_and_the_controller_exits_when_idle(gpuctl: Gpuctl) -> None:
    store = JobStore(gpuctl.home)
    cancelled = _submit(store, "cancel-me", 0, backend="local")
    waiting = _submit(store, "wait-me", 1, backend="local")
    for job_id in (cancelled, waiting):
        _corrupt(store, job_id, _null_grace(store, job_id))

    said = {}
    for command in ("status", "cancel", "events"):
        proc = gpuctl.run(command, cancelled, timeout=60)
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
        said[command] = proc.stdout
    assert store.job(cancelled).failure_reason is FailureReason.INVALID_SPEC
    assert "ended FAILED (invalid_spec): the stored job spec is invalid" in said["cancel"]
    assert "FAILED (invalid_spec): the stored job spec is invalid" in gpuctl.run("status", cancelled).stdout

    proc = gpuctl.run("controller", "run", "--backend", "local", "--exit-when-idle", timeout=90)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert store.job(waiting).failure_reason is FailureReason.INVALID_SPEC
