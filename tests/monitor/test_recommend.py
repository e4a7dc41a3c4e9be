"""Mixed precision and a larger batch stay recommendations (issue 34, 2): each with the measured GPU
memory headroom and its gain as a bound with how it was computed, "not measured" where data is missing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.monitor.diagnosis import Finding, StepTiming, diagnose, diagnose_files
from orchestrator.monitor.recommend import tensor_core_type
from tests.monitor.monitor_helpers import GIB

WINDOW: dict[str, Any] = {
    "kind": "gpuctl.monitor.window",
    "start": 1_800_000_000.0,
    "duration_s": 600.0,
    "gpus": 1,
    "model": "NVIDIA H100 80GB HBM3",
    "util_mean_pct": 60.0,
    "util_p95_pct": 90.0,
    "util_max_pct": 100.0,
    "mem_used_max_bytes": 20 * GIB,
    "mem_total_bytes": 80 * GIB,
    "idle_seconds": 0.0,
    "throttled_fraction": 0.0,
}


def by_code(findings: list[Finding]) -> dict[str, Finding]:
    return {f.code: f for f in findings}


def test_a_larger_batch_is_bounded_by_the_measured_utilization_gap() -> None:
    found = by_code(diagnose([WINDOW]))["larger-batch"]
    assert found.severity == "info"
    assert found.evidence["headroom_share"] == pytest.approx(0.75)  # 20 of 80 GiB used at peak
    assert "monitor windows" in found.evidence["headroom_from"]
    assert found.bound is not None and found.bound.share == pytest.approx(0.4)  # busy 60 %
    assert found.bound.speedup == pytest.approx(1 / 0.6)
    assert "utilization gap" in found.bound.basis and "only recommends" in found.fix


@pytest.mark.parametrize(
    "changes", [{"mem_used_max_bytes": 60 * GIB}, {"util_mean_pct": 95.0}], ids=["no-headroom", "busy"]
)
def test_no_larger_batch_without_headroom_or_with_busy_gpus(changes: dict[str, Any]) -> None:
    assert "larger-batch" not in by_code(diagnose([{**WINDOW, **changes}]))


def test_the_tune_records_headroom_without_gpu_use_is_a_gain_not_measured(tmp_path: Path) -> None:
    """No monitor windows, only the runtime's tune record: the headroom is known, the gain is not."""
    progress = tmp_path / "progress.jsonl"
    lines: list[dict[str, Any]] = [{"step": s, "data_s": 0.01, "compute_s": 0.5} for s in range(1, 9)]
    lines.append({"event": "tune_unchanged", "step": 9, "reason": "not input-bound", "data_wait_share": 0.02,
                  "gpu_memory_headroom_share": 0.6})  # fmt: skip
    progress.write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = by_code(diagnose_files(progress_path=progress, gpu_type="H100"))
    batch = found["larger-batch"]
    assert batch.evidence["headroom_share"] == pytest.approx(0.6)
    assert "tune record" in batch.evidence["headroom_from"]
    assert batch.bound is not None and batch.bound.share is None and "not measured" in batch.bound.basis
    assert "mixed-precision" not in found  # GPU use not measured: no utilization to bound it by
    assert "gpu-not-measured" in found


def test_mixed_precision_is_bounded_by_busy_time_and_the_tensor_core_ratio() -> None:
    busy = {**WINDOW, "util_mean_pct": 95.0, "mem_used_max_bytes": 70 * GIB}
    found = by_code(diagnose([busy]))["mixed-precision"]
    assert found.evidence["gpu_type"] == "H100" and found.evidence["tensor_core_ratio"] == 2.0
    assert found.evidence["headroom_share"] == pytest.approx(0.125)
    assert found.bound is not None and found.bound.share == pytest.approx(0.95 * 0.5)
    assert "if it trains in 32-bit" in found.bound.basis
    # Step timings that spend less of the step computing than the GPU is busy bound it further.
    steps = [StepTiming(0.4, 0.6)] * 10
    timed = by_code(diagnose([busy], steps))["mixed-precision"]
    assert timed.evidence["compute_share"] == pytest.approx(0.6)
    assert timed.bound is not None and timed.bound.share == pytest.approx(0.6 * 0.5)


def test_v100_has_no_tf32_so_its_ratio_is_eight() -> None:
    v100 = {**WINDOW, "model": "Tesla V100-SXM2-16GB", "util_mean_pct": 80.0}
    found = by_code(diagnose([v100]))["mixed-precision"]
    assert found.bound is not None and found.bound.share == pytest.approx(0.8 * (1 - 1 / 8))


@pytest.mark.parametrize("model", ["NVIDIA GeForce GTX 1080", "Tesla P100-PCIE-16GB", ""])
def test_no_mixed_precision_without_tensor_cores_or_a_known_type(model: str) -> None:
    assert "mixed-precision" not in by_code(diagnose([{**WINDOW, "model": model, "util_mean_pct": 95.0}]))


def test_tensor_core_types_from_names_and_nvml_models() -> None:
    assert tensor_core_type("A100-80GB") == "A100-80GB"
    assert tensor_core_type(None, [{"model": "NVIDIA A100-SXM4-80GB"}]) == "A100"
    assert tensor_core_type(None, [{"model": "NVIDIA L40S"}]) == "L40S"
    assert tensor_core_type(None, [{"model": "NVIDIA L4"}]) == "L4"
    assert tensor_core_type("P100") is None
