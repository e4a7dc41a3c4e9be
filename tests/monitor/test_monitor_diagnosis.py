"""Each diagnosis rule fires on evidence past its threshold and stays quiet below it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import NotFoundError, UserError
from orchestrator.monitor.diagnosis import (
    NOT_MEASURED_CODE,
    GpuCandidate,
    StepTiming,
    diagnose,
    diagnose_files,
    read_step_timings,
)
from orchestrator.monitor.summary import unavailable_record
from tests.monitor.monitor_helpers import GIB


def write_progress(folder: Path) -> Path:
    path = folder / "progress.jsonl"
    path.write_text(
        "".join(json.dumps({"step": s, "data_s": 0.01, "compute_s": 0.5}) + "\n" for s in range(1, 9))
    )
    return path


HEALTHY: dict[str, Any] = {
    "kind": "gpuctl.monitor.window",
    "start": 1_800_000_000.0,
    "duration_s": 60.0,
    "gpus": 8,
    "util_mean_pct": 92.0,
    "util_p95_pct": 99.0,
    "util_max_pct": 100.0,
    "mem_used_max_bytes": 60 * GIB,
    "mem_total_bytes": 80 * GIB,
    "idle_seconds": 0.0,
    "sm_activity_mean": 0.8,
    "throttled_fraction": 0.0,
}
CANDIDATES = [
    GpuCandidate("L4", 24, 0.12),
    GpuCandidate("A10G", 24, 0.15),
    GpuCandidate("A100-80GB", 80, 0.6),
    GpuCandidate("T4", 16, 0.08),
]


def window(**changes: Any) -> dict[str, Any]:
    return {**HEALTHY, **changes}


def codes(windows: list[dict[str, Any]] = (), steps: list[StepTiming] = (), **kwargs: Any) -> set[str]:  # type: ignore[assignment]
    return {f.code for f in diagnose(windows, steps, **kwargs)}


def test_healthy_job_has_no_findings() -> None:
    steps = [StepTiming(0.01, 0.5)] * 20
    assert codes([window()], steps, candidates=CANDIDATES) == set()


def test_input_bound_fires_over_five_percent() -> None:
    steps = [StepTiming(5.0, 0.1)] + [StepTiming(0.19, 0.31)] * 10  # first step (warm-up) is skipped
    [finding, unmeasured] = diagnose([], steps)  # no window: the GPU rules say it was not measured
    assert unmeasured.code == NOT_MEASURED_CODE
    assert finding.code == "input-bound" and finding.severity == "critical"
    assert finding.evidence["data_fraction"] == pytest.approx(0.38)
    assert finding.message.startswith("input-bound: 38 % of step time waiting for data")
    assert "num_workers" in finding.fix and "pin_memory" in finding.fix
    assert codes([], [StepTiming(0.04, 0.96)] * 5) == {NOT_MEASURED_CODE}  # 4 %: fine
    assert [f.severity for f in diagnose([], [StepTiming(0.1, 0.9)] * 5)] == ["warning", "info"]


def test_low_utilization_fires_under_fifty_percent() -> None:
    assert "low-utilization" in codes([window(util_mean_pct=35.0)])
    assert "low-utilization" not in codes([window(util_mean_pct=55.0)])


def test_memory_pressure_over_ninety_percent() -> None:
    assert "memory-pressure" in codes([window(mem_used_max_bytes=int(76 * GIB))])
    assert "memory-pressure" not in codes([window(mem_used_max_bytes=int(70 * GIB))])
    # the --gpu-memory-gib override changes the denominator
    assert "memory-pressure" in codes([window(mem_used_max_bytes=int(70 * GIB))], gpu_memory_gib=75)


def test_low_sm_activity_under_half() -> None:
    assert "low-sm-activity" in codes([window(sm_activity_mean=0.3)])
    assert "low-sm-activity" not in codes([window(sm_activity_mean=0.6)])
    assert "low-sm-activity" not in codes([window(sm_activity_mean=None)])  # no GPM: no claim


def test_idle_gpu_over_ten_percent_of_gpu_time() -> None:
    # 8 GPUs x 60 s = 480 GPU-seconds
    [idle] = [f for f in diagnose([window(idle_seconds=96.0)]) if f.code == "idle-gpu"]
    assert idle.evidence["idle_fraction"] == 0.2 and idle.severity == "warning"
    assert "idle-gpu" not in codes([window(idle_seconds=24.0)])


def test_clock_throttled() -> None:
    assert "clock-throttled" in codes([window(throttled_fraction=0.5)])
    assert "clock-throttled" not in codes([window(throttled_fraction=0.05)])


def test_oversized_gpu_suggests_cheaper_types_that_fit() -> None:
    small = window(util_mean_pct=35.0, mem_used_max_bytes=int(17.6 * GIB))  # 22 % of 80 GiB
    [finding] = [f for f in diagnose([small], candidates=CANDIDATES) if f.code == "oversized-gpu"]
    assert finding.message.startswith("memory 22 % of 80 GiB and utilization 35 %")
    assert "(L4/A10G)" in finding.message  # T4 cannot hold 17.6 GiB x 1.2; A100-80GB is not smaller
    assert finding.fix.startswith("move to L4")
    without = [f for f in diagnose([small]) if f.code == "oversized-gpu"]
    assert "at least 21 GiB" in without[0].message
    assert "oversized-gpu" not in codes([window(util_mean_pct=35.0, mem_used_max_bytes=50 * GIB)])
    assert "oversized-gpu" not in codes([window(util_mean_pct=80.0, mem_used_max_bytes=10 * GIB)])


def test_findings_sorted_by_severity() -> None:
    found = diagnose([window(util_mean_pct=10.0, idle_seconds=400.0, mem_used_max_bytes=5 * GIB)])
    severities = [f.severity for f in found]
    assert severities == sorted(severities, key=["critical", "warning", "info"].index)
    assert {"critical", "warning", "info"} == set(severities)


def test_diagnose_files_reads_progress_and_summaries(tmp_path: Path) -> None:
    summaries = tmp_path / "summary.jsonl"
    summaries.write_text(json.dumps(window(util_mean_pct=30.0)) + "\n")
    progress = tmp_path / "progress.jsonl"
    lines: list[dict[str, Any]] = [
        {"time": f"2026-01-01T00:00:0{i}Z", "step": i, "loss": 1.0, "data_s": 0.3, "compute_s": 0.7}
        for i in range(5)
    ]
    lines.append({"time": "2026-01-01T00:00:09Z", "step": 5, "metrics": {"data_s": 0.3, "compute_s": 0.7}})
    lines.append({"event": "finished"})
    progress.write_text("\n".join(json.dumps(line) for line in lines) + "\n{partial")
    assert len(read_step_timings(progress)) == 6
    found = {f.code for f in diagnose_files(summaries, progress)}
    assert found == {"input-bound", "low-utilization"}
    with pytest.raises(NotFoundError):
        diagnose_files(tmp_path / "missing.jsonl", None)
    with pytest.raises(UserError):
        diagnose_files(None, None)


def test_no_window_is_not_measured_never_no_problems(tmp_path: Path) -> None:
    """No window measured a GPU: one finding says so, with the monitor's reason; never an empty list
    (which the CLI prints as "no problems found")."""
    [finding] = diagnose([], [])
    assert finding.code == NOT_MEASURED_CODE and finding.message.startswith("GPU use not measured (")
    summary = tmp_path / "monitor-summary.jsonl"
    summary.write_text(
        json.dumps(unavailable_record("j", "no_nvml", "NVML is not available: no driver")) + "\n"
    )
    [finding] = diagnose_files(summary)
    assert finding.message.startswith(
        "GPU use not measured (no NVML on the nodes: NVML is not available: no driver)"
    )
    assert (
        diagnose_files(summary_path=None, progress_path=write_progress(tmp_path))[-1].code
        == NOT_MEASURED_CODE
    )
    assert NOT_MEASURED_CODE not in codes([window()])
