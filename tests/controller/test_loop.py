from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.backends.local.backend import LocalBackend
from orchestrator.controller.loop import Controller, ControllerLock
from orchestrator.costs.schedule import REPORT_JOB_ID
from orchestrator.spec import load_spec_text
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing import SimScript, SimulatedBackend

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL


def test_controller_schedules_cost_reports_from_its_config(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    (tmp_path / "config.yaml").write_text(
        f"reports: {{schedule: '0 8 * * 1-5', folder: {tmp_path / 'reports'}}}\n"
    )
    controller = Controller(store, LocalBackend(store), tick_seconds=60)
    controller.start()
    try:
        job = controller.scheduler.get_job(REPORT_JOB_ID)
        assert job is not None and job.next_run_time.hour == 8 and job.next_run_time.weekday() < 5
        job.func(**job.kwargs)  # what the schedule runs: writes the HTML and CSV
        assert sorted(p.suffix for p in (tmp_path / "reports").iterdir()) == [".csv", ".html"]
    finally:
        controller.stop()


def test_only_one_controller_holds_the_lock(tmp_path: Path) -> None:
    first, second = ControllerLock(tmp_path), ControllerLock(tmp_path)
    assert first.acquire()
    assert second.held_elsewhere() and not second.acquire()
    first.release()
    assert second.acquire()
    second.release()


def test_the_controller_stays_while_an_ended_jobs_nodes_still_run(tmp_path: Path) -> None:
    """`controller run --exit-when-idle` must not leave while cancelled nodes still save their
    checkpoint: it kills them after the grace period and stops the rendezvous, or they would leak."""
    store = JobStore(tmp_path)
    world = SimulatedBackend()
    spec = load_spec_text("name: c\ncommand: train.py\nresources: {nodes: 2}\n")
    job = store.create_job(name="c", user="u", team="t", backend=world.name, spec_json=spec.model_dump_json(),
                           deadline=None, now=datetime.now(UTC))  # fmt: skip
    world.script(job.id, SimScript(steps=1000))
    controller = Controller(store, world)
    for _ in range(4):
        world.advance()
        controller.tick_all()
    assert store.job(job.id).status is JobStatus.LAUNCHING and not controller.idle.is_set()
    store.request_cancel(job.id, datetime.now(UTC))
    controller.tick_all()
    assert store.job(job.id).status is JobStatus.CANCELLED
    controller.tick_all()
    assert not controller.idle.is_set(), "left while the stopped nodes were still running"
    world.advance()  # they have saved their checkpoint and exited
    controller.tick_all()
    assert controller.idle.is_set()
