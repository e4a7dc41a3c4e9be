from __future__ import annotations

from pathlib import Path

from orchestrator.backends.local.backend import LocalBackend
from orchestrator.controller.loop import Controller, ControllerLock
from orchestrator.costs.schedule import REPORT_JOB_ID
from orchestrator.state.store import JobStore


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
