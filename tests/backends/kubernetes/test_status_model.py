"""One model of a GPUJob's status: what the operator writes, what `gpuctl status` reads, what the CRD says."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.kubernetes.crd import status_openapi_schema
from orchestrator.backends.kubernetes.status_model import (
    DISPLAY_KEYS,
    Condition,
    ForecastStatus,
    GpuJobStatus,
    GpuUsageStatus,
    StatusDisplay,
)
from orchestrator.cli.status_document import kubernetes_document
from orchestrator.state.forecast import Forecast
from orchestrator.state.job_state import STATUS_KEYS, JobState
from orchestrator.state.progress_state import GpuThroughput, ProgressState, ThroughputMark, ThroughputSum
from orchestrator.state.state_rows import load_state
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing.states import running_job

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
USAGE = GpuUsageStatus(
    windows=3, samples=30, model="NVIDIA H100", monitors=1, util_mean_pct=80.0, util_p95_pct=95.0,
    util_max_pct=99.0, mem_peak_bytes=10, mem_total_bytes=80, mem_peak_fraction=0.125, sm_activity_mean=None,
    idle_gpu_hours=0.0, measured_gpu_hours=0.5,
)  # fmt: skip


@pytest.fixture
def state(tmp_path: Path) -> JobState:
    store = JobStore(tmp_path)
    job_id = running_job(store, NOW - timedelta(hours=1), nodes=2)
    progress = ProgressState(step=50, total_steps=100, loss=0.5, time=NOW - timedelta(minutes=1))
    measured = GpuThroughput(
        by_gpu_type={"V100": ThroughputSum(steps=40, gpu_seconds=160.0, seconds=80.0)},
        last=ThroughputMark(step=50, time=NOW - timedelta(minutes=1), attempt=1),
    )
    return load_state(store, job_id).model_copy(update={"progress": progress, "measurements": measured})


def display() -> StatusDisplay:
    forecast = Forecast(
        step=50, total_steps=100, steps_per_second=0.5, finish_at=NOW + timedelta(seconds=100.4),
        eta_seconds=100.4, hourly_usd=2.0, on_demand_hourly_usd=6.0, cost_to_finish_usd=0.0555556,
        cost_to_finish_on_demand_usd=0.1666667, spent_usd=1.0, projected_cost_usd=1.0555556,
    )  # fmt: skip
    return StatusDisplay(
        gpu_type="V100", market="spot", nodes=2, desired_nodes=2, cost_usd=1.0, user="team-a",
        conditions=[Condition(type="Running", status="True", reason="Running", last_transition_time="2026-11-26T11:00:00Z")],
        forecast=ForecastStatus.of(forecast), gpu_usage=USAGE,
        gpu_usage_totals={"windows": 3, "util_p95_samples": [{"pct": 95.0, "samples": 30}]},
    )  # fmt: skip


def pruned(value: Any, schema: dict[str, Any], path: str = "status") -> list[str]:
    """What the API server would prune of ``value``: keys its structural ``schema`` does not name."""
    if isinstance(value, dict) and "properties" in schema:
        lost = [f"{path}.{k}" for k in value if k not in schema["properties"]]
        return lost + [
            p for k, v in value.items() if k in schema["properties"]
            for p in pruned(v, schema["properties"][k], f"{path}.{k}")
        ]  # fmt: skip
    if isinstance(value, list) and "items" in schema:
        return [p for i, v in enumerate(value) for p in pruned(v, schema["items"], f"{path}[{i}]")]
    return []


def test_a_written_status_reads_back_the_same(state: JobState) -> None:
    written = GpuJobStatus(state, display()).to_status()
    again = GpuJobStatus.read(written)
    assert again.state == state and again.display == display()
    assert again.to_status() == written


def test_the_status_is_camel_case_json_with_unset_fields_left_out(state: JobState) -> None:
    written = GpuJobStatus(state, display()).to_status()
    assert written["state"] == "RUNNING" and written["costUsd"] == 1.0 and written["desiredNodes"] == 2
    assert written["forecast"]["finishAt"] == "2026-11-26T12:01:40Z"
    assert written["gpuUsage"]["util_mean_pct"] == 80.0 and "sm_activity_mean" not in written["gpuUsage"]
    assert "zone" not in written and None not in _values(written)
    assert written["progress"] == {
        "step": 50, "totalSteps": 100, "loss": 0.5, "finished": False, "time": "2026-11-26T11:59:00Z"
    }  # fmt: skip
    assert written["gpuMeasurements"] == {
        "byGpuType": {"V100": {"steps": 40, "gpuSeconds": 160.0, "seconds": 80.0}},
        "last": {"step": 50, "time": "2026-11-26T11:59:00Z", "attempt": 1},
    }


def test_the_crd_names_every_key_the_status_writes(state: JobState) -> None:
    written = GpuJobStatus(state, display()).to_status()
    assert pruned(written, status_openapi_schema()) == []


def test_the_state_keys_win_over_display_fields_of_the_same_name(state: JobState) -> None:
    assert not DISPLAY_KEYS & STATUS_KEYS
    assert GpuJobStatus(state).to_status() == state.to_status()


def test_a_field_this_version_cannot_read_is_left_out_never_an_error(state: JobState) -> None:
    written = GpuJobStatus(state, display()).to_status()
    damaged = {
        **written,
        "gpuUsage": {**written["gpuUsage"], "util_mean_pct": math.nan},
        "progress": {"loss": 1.0},
        "conditions": "not a list",
    }
    found = GpuJobStatus.read(damaged)
    assert found.state == state.model_copy(update={"progress": None})
    assert found.display.gpu_usage is None and found.display.conditions is None
    assert found.display.forecast == display().forecast and found.display.cost_usd == 1.0


def test_a_damaged_state_leaves_the_display_fields_readable() -> None:
    found = GpuJobStatus.read({"state": "NOT-A-STATE", "attempt": "x", "costUsd": 2.5, "user": "team-a"})
    assert found.state.status is JobStatus.PENDING and found.state.attempt == 0
    assert found.display.cost_usd == 2.5 and found.display.user == "team-a"


def test_a_segment_it_cannot_read_leaves_the_rest_of_the_state() -> None:
    good = {"start": "2026-11-22T12:00:00Z", "nodes": 1, "gpuType": "H100", "market": "spot"}
    found = GpuJobStatus.read(
        {"attempt": 3, "segments": [good, {"start": "2026-11-22T12:00:00Z", "attempt": "x"}]}
    )
    assert found.state.attempt == 3 and found.state.segments == ()
    assert len(GpuJobStatus.read({"attempt": 3, "segments": [good]}).state.segments) == 1


def test_gpuctl_status_reads_a_gpujob_through_the_model(state: JobState) -> None:
    written = GpuJobStatus(state, display()).to_status()
    doc = kubernetes_document(
        {"metadata": {"name": "j", "namespace": "ns"}, "status": written}, NOW
    ).as_json()
    assert doc["state"] == "RUNNING" and doc["user"] == "team-a" and doc["attempts"] == state.attempt
    assert doc["forecast"]["finish_at"] == "2026-11-26T12:01:40Z" and doc["progress"]["step"] == 50
    assert doc["gpu_usage"]["util_mean_pct"] == 80.0
    assert doc["cost_usd"] == round(state.cost_usd(NOW), 6) and len(doc["segments"]) == len(state.segments)
    assert doc["updated_at"] == "2026-11-26T11:00:00Z"
    assert doc["backend_details"]["conditions"][0]["type"] == "Running"


def test_forecast_rounding() -> None:
    forecast = display().forecast
    assert forecast is not None
    assert forecast.cost_to_finish_usd == 0.055556 and forecast.eta_seconds == 100.4
    assert replace(USAGE, windows=4).windows == 4  # the status's usage is a GpuUsage


def _values(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return [x for v in node.values() for x in _values(v)]
    if isinstance(node, list):
        return [x for v in node for x in _values(v)]
    return [node]
