"""What right-size measures from a job's progress (kept in its state) and reads of GPUJobs (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from operators.kubernetes.rightsize import STATUS_KEY, measurements, same_job, sized_spec
from orchestrator.spec import JobSpec
from orchestrator.spec.market import MarketKind
from orchestrator.state.job_state import JobState, RightSizePick, SegmentState
from orchestrator.state.placement import Placement
from orchestrator.state.progress_state import ProgressState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
H100 = Placement(gpu_type="H100", market=MarketKind.SPOT, cloud="gcp", region="r", zone="r-a", instance_type="a3",
                      gpus_per_node=8, node_price_usd_per_hour=10.0, on_demand_node_price_usd_per_hour=40.0,
                      price_source="test")  # fmt: skip


def state(attempt: int = 1, opened_s: float = 0.0, nodes: int = 2) -> JobState:
    segment = SegmentState(
        attempt=attempt, placement=H100, nodes=nodes, started_at=T0 + timedelta(seconds=opened_s)
    )
    return JobState(attempt=attempt, placement=H100, segments=(segment,))


def seen(kept: JobState, step: int, at_s: float) -> JobState:
    """``kept`` with a progress record of ``step`` at ``at_s`` seen (the host records it so)."""
    return kept.with_progress(ProgressState(step=step, time=T0 + timedelta(seconds=at_s)))


def test_steps_between_two_records_of_one_segment_count_for_its_gpu_type() -> None:
    first = seen(state(), 10, 5)  # the first record: only a starting point
    assert first.to_status()[STATUS_KEY] == {
        "byGpuType": {},
        "last": {"step": 10, "time": "2026-01-01T00:00:05Z", "attempt": 1},
    }
    second = seen(first, 40, 20)
    status = second.to_status()
    assert status[STATUS_KEY]["byGpuType"] == {"H100": {"steps": 30, "gpuSeconds": 240.0, "seconds": 15.0}}
    assert seen(second, 40, 20) == second  # the same record again: nothing more
    assert seen(second, 35, 18) == second.model_copy(update={"progress": seen(second, 35, 18).progress})
    [m] = measurements([status])
    assert m.gpu_type == "H100" and m.units_per_second_per_gpu == 30 / 240.0 and m.peak_memory_gib is None


def test_spans_across_a_new_segment_or_attempt_are_left_out() -> None:
    first = seen(state(), 10, 5)
    rescaled = seen(first.model_copy(update={"segments": state(opened_s=10).segments}), 40, 20)
    assert rescaled.measurements is not None and rescaled.measurements.by_gpu_type == {}
    assert rescaled.measurements.last is not None and rescaled.measurements.last.step == 40
    relaunched = seen(state(attempt=2).model_copy(update={"measurements": first.measurements}), 40, 20)
    assert relaunched.measurements is not None and relaunched.measurements.by_gpu_type == {}


def test_short_measurements_are_ignored_and_monitor_numbers_need_one_gpu_type() -> None:
    brief = {STATUS_KEY: {"byGpuType": {"H100": {"steps": 5, "gpuSeconds": 40.0, "seconds": 5.0}}}}
    assert measurements([brief]) == ()  # under the local controller's 10 s minimum
    usage = {"mem_peak_bytes": 30 * 2**30, "util_mean_pct": 80.0}
    long = {STATUS_KEY: {"byGpuType": {"H100": {"steps": 50, "gpuSeconds": 400.0, "seconds": 50.0}}},
            "gpuUsage": usage, "segments": [{"gpuType": "H100"}]}  # fmt: skip
    [m] = measurements([long])
    assert (m.peak_memory_gib, m.utilization) == (30.0, 0.8)
    mixed = {**long, "segments": [{"gpuType": "H100"}, {"gpuType": "A100"}]}
    [m] = measurements([mixed])
    assert (m.peak_memory_gib, m.utilization) == (None, None)


def test_runs_of_the_same_job_and_the_sized_spec() -> None:
    spec = JobSpec.model_validate(
        {"name": "train", "command": "t.py", "resources": {"gpu_types": ["A100", "H100"]}, "team": "nlp"}
    )
    assert same_job(spec, {"metadata": {"name": "x"}, "spec": {"name": "train", "team": "nlp"}})
    assert not same_job(spec, {"metadata": {"name": "train"}, "spec": {"team": "vision"}})
    assert sized_spec(spec, state()) is spec
    picked = state().model_copy(update={"right_size": RightSizePick(gpu_type="H100", apply=True)})
    assert sized_spec(spec, picked).resources.gpu_types == ["H100"]
    recommended = state().model_copy(update={"right_size": RightSizePick(gpu_type="H100", apply=False)})
    assert sized_spec(spec, recommended) is spec
