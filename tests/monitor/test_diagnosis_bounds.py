"""Every finding carries the throughput it costs as a bound, with how it was computed (issue 34, 1)."""

from __future__ import annotations

import pytest

from orchestrator.monitor.diagnosis import (
    GIB,
    GpuCandidate,
    StepTiming,
    UsageSummary,
    diagnose,
    diagnose_steps,
    diagnose_usage,
)


def _usage(**changes: float) -> UsageSummary:
    base = dict(seconds=1000.0, gpus=2, util_mean_pct=95.0, util_p95_pct=99.0, mem_max_bytes=60 * GIB,
                mem_total_bytes=80 * GIB, idle_seconds=0.0, sm_activity_mean=0.9, throttled_fraction=0.0)  # fmt: skip
    return UsageSummary(**{**base, **changes})  # type: ignore[arg-type]


def test_an_input_bound_job_runs_at_most_one_over_one_minus_the_wait_faster() -> None:
    steps = [StepTiming(0.4, 0.6)] * 20
    (found,) = diagnose_steps(steps)
    assert found.bound is not None
    assert found.bound.share == pytest.approx(0.4)
    assert found.bound.speedup == pytest.approx(1 / (1 - 0.4))
    assert "1/(1-0.40) = 1.67x" in found.bound.basis
    assert found.to_dict()["bound"]["speedup"] == pytest.approx(1.6667, rel=1e-3)


@pytest.mark.parametrize(
    ("usage", "code", "share"),
    [
        (_usage(util_mean_pct=30.0), "low-utilization", 0.7),
        (_usage(idle_seconds=600.0), "idle-gpu", 0.3),
        (_usage(sm_activity_mean=0.2), "low-sm-activity", 0.8),
        (_usage(throttled_fraction=0.5), "clock-throttled", 0.5),
    ],
)
def test_gpu_findings_state_their_own_bound(usage: UsageSummary, code: str, share: float) -> None:
    bound = {f.code: f for f in diagnose_usage(usage)}[code].bound
    assert bound is not None
    assert bound.share == pytest.approx(share)
    assert bound.basis


def test_an_oversized_gpu_saves_the_price_difference_of_the_cheaper_type() -> None:
    usage = _usage(util_mean_pct=20.0, mem_max_bytes=10 * GIB)
    cheaper = [GpuCandidate("L4", 24.0, 0.25)]
    found = {f.code: f for f in diagnose_usage(usage, candidates=cheaper)}
    assert found["oversized-gpu"].bound is not None
    assert found["oversized-gpu"].bound.share == pytest.approx(0.75)
    unknown = {f.code: f for f in diagnose_usage(usage)}
    assert unknown["oversized-gpu"].bound is not None and unknown["oversized-gpu"].bound.share is None


def test_memory_pressure_costs_no_throughput_and_unmeasured_is_not_zero() -> None:
    found = {f.code: f for f in diagnose_usage(_usage(mem_max_bytes=79 * GIB))}
    assert found["memory-pressure"].bound is not None and found["memory-pressure"].bound.share == 0.0
    (blind,) = diagnose([], [])
    assert blind.code == "gpu-not-measured"
    assert blind.bound is not None and blind.bound.share is None
    assert "not measured" in blind.bound.basis
