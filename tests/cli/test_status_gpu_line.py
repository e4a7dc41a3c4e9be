"""`gpuctl status`: a job that ran with no GPU monitor window says its GPU use was not measured."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.main import main
from orchestrator.cli.views import summary_lines
from orchestrator.controller.actions import StartAttempt
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing.states import SPOT, drive, through

NOW = datetime.now(UTC) - timedelta(minutes=5)


def test_a_job_that_ran_unmeasured_has_a_not_measured_gpu_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    store = JobStore(tmp_path)
    job = store.create_job(name="blind", user="u", team="t", backend="local", spec_json="{}",
                           deadline=None, now=NOW)  # fmt: skip
    assert main(["status", job.id]) == 0
    assert "GPU use" not in capsys.readouterr().out  # not started: nothing to measure yet
    drive(store, job.id, NOW, *through(JobStatus.PLACING, JobStatus.LAUNCHING), StartAttempt(SPOT, 2))
    assert main(["status", job.id]) == 0
    out = capsys.readouterr().out
    assert f"GPU use: not measured (no NVML on the nodes, or no monitor: `gpuctl events {job.id}`" in out
    assert main(["status", job.id, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpu_usage"] is None


def test_the_monitor_message_is_the_reason() -> None:
    doc: dict[str, Any] = {"id": "j", "state": "RUNNING", "failure_reason": None, "message": "", "attempts": 1, "preemptions": 0,
           "restarts": 0, "cost_usd": 1.0, "on_demand_equivalent_usd": 3.0, "cost_is_simulated": False,
           "segments": [], "backend_details": {"gpu_monitor_message": "GPU monitor: no NVML on this machine"}}  # fmt: skip
    lines = summary_lines(doc)
    assert "GPU use: not measured (GPU monitor: no NVML on this machine)" in lines
    assert sum("no NVML" in line for line in lines) == 1  # said once
