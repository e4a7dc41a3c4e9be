"""Right-size in the controller: measurements from earlier runs, then recommend or place on the pick."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.backends.base import Placement, Progress
from orchestrator.catalog.offers import MarketKind
from orchestrator.controller.actions import CloseSegment, RightSize, StartAttempt, Transition
from orchestrator.controller.measurements import gpu_measurements, monitor_usage
from orchestrator.controller.reconcile import JobView, reconcile
from orchestrator.policies import GpuMeasurement
from orchestrator.spec import load_spec_text
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.state.usage import UsageStore
from orchestrator.testing.states import drive, running_job

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
A100 = Placement("A100", MarketKind.SPOT, "aws", "us-east-1", "use1-az1", "p4d", 8, 10.0, 32.0, "test")
T4 = replace(A100, gpu_type="T4", instance_type="g4dn.xlarge", gpus_per_node=1)

FAST_A100 = GpuMeasurement("A100", 4.0, 10.0, 0.3)
SLOW_T4 = GpuMeasurement("T4", 1.0, 10.0, 0.9)


def view(mode: str, measurements: tuple[GpuMeasurement, ...], **kw: object) -> JobView:
    spec = load_spec_text(
        "name: t\ncommand: train.py\nresources: {gpu_types: [A100, T4]}\n"
        f"policies: {{right_size: {mode}}}\n"
    )
    base = JobView(spec=spec, status=JobStatus.RECOVERING, now=NOW, submitted_at=NOW - timedelta(hours=1),
                   deadline=NOW + timedelta(hours=5), attempt=1, placement=A100, spot=A100,
                   progress=Progress(step=1000, total_steps=11000), measurements=measurements)  # fmt: skip
    return replace(base, **kw)  # type: ignore[arg-type]


def test_auto_picks_the_cheapest_type_that_meets_the_deadline_and_says_why() -> None:
    # 10000 steps left: a T4 at 1 step/s needs 2.8 h (deadline in 5 h) for far less than the A100
    (action,) = reconcile(view("auto", (FAST_A100, SLOW_T4)))
    assert isinstance(action, RightSize) and action.gpu_type == "T4" and action.apply
    assert "T4" in action.why and "deadline" in action.why


def test_a_deadline_the_small_gpu_cannot_meet_keeps_the_big_one() -> None:
    actions = reconcile(view("auto", (FAST_A100, SLOW_T4), deadline=NOW + timedelta(hours=1.5)))
    (action,) = actions
    assert isinstance(action, RightSize) and action.gpu_type == "A100"


def test_the_same_pick_is_not_repeated_and_placement_goes_on() -> None:
    actions = reconcile(view("auto", (FAST_A100, SLOW_T4), right_size_pick="T4"))
    assert any(isinstance(a, StartAttempt) for a in actions)


def test_recommend_records_without_applying_and_off_does_nothing() -> None:
    (action,) = reconcile(view("recommend", (FAST_A100, SLOW_T4)))
    assert isinstance(action, RightSize) and not action.apply
    assert any(isinstance(a, StartAttempt) for a in reconcile(view("off", (FAST_A100, SLOW_T4))))


def test_without_measurements_or_progress_nothing_is_sized() -> None:
    assert any(isinstance(a, StartAttempt) for a in reconcile(view("auto", ())))
    assert any(isinstance(a, StartAttempt) for a in reconcile(view("auto", (SLOW_T4,), progress=None)))


def _ran(store: JobStore, name: str, placement: Placement, nodes: int, steps_per_s: float) -> str:
    spec = load_spec_text(f"name: {name}\ncommand: train.py\n")
    start = NOW - timedelta(minutes=10)
    job_id = running_job(
        store, start, name=name, placement=placement, nodes=nodes, spec_json=spec.model_dump_json()
    )
    drive(
        store,
        job_id,
        start + timedelta(minutes=5),
        CloseSegment("finished"),
        Transition(JobStatus.SUCCEEDED, "done"),
    )
    lines = [
        {"time": (start + timedelta(seconds=30 + i)).isoformat(), "step": int(i * steps_per_s), "total_steps": 999}
        for i in range(0, 120, 10)
    ]  # fmt: skip
    lines.append(
        {"time": (start + timedelta(minutes=8)).isoformat(), "step": 10**6}
    )  # after the segment: ignored
    (store.job_dir(job_id) / "progress.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return job_id


def test_measurements_come_from_runs_of_the_same_job_per_gpu_type(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    _ran(store, "train", A100, nodes=2, steps_per_s=8.0)  # 2 x 8 GPUs at 8 steps/s: 0.5 step/s per GPU
    _ran(store, "train", T4, nodes=1, steps_per_s=0.5)
    _ran(store, "other", T4, nodes=1, steps_per_s=100.0)
    current = _ran(store, "train", T4, nodes=1, steps_per_s=0.7)
    found = {m.gpu_type: m for m in gpu_measurements(store, store.job(current), NOW)}
    assert set(found) == {"A100", "T4"}
    assert abs(found["A100"].units_per_second_per_gpu - 0.5) < 0.02
    assert abs(found["T4"].units_per_second_per_gpu - 0.6) < 0.02  # two T4 runs, same length: the mean
    assert found["T4"].peak_memory_gib is None  # no monitor data: not measured, not zero


def test_memory_and_utilization_come_from_the_stored_monitor_windows(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = _ran(store, "train", T4, nodes=1, steps_per_s=0.5)
    window = {
        "kind": "gpuctl.monitor.window", "start": NOW.timestamp() - 400, "duration_s": 60.0, "gpus": 1,
        "model": "Tesla T4", "util_mean_pct": 35.0, "util_p95_pct": 50.0, "util_max_pct": 60.0,
        "mem_used_max_bytes": 6 * 2**30, "mem_total_bytes": 16 * 2**30, "sm_activity_mean": 0.3,
        "idle_seconds": 0.0, "per_gpu": [{"samples": 60}],
    }  # fmt: skip
    (store.job_dir(job_id) / "monitor-summary-n0.jsonl").write_text(json.dumps(window) + "\n")
    UsageStore(store).ingest(job_id, NOW)
    (found,) = gpu_measurements(store, store.job(job_id), NOW, monitor_usage(store))
    assert found.gpu_type == "T4" and found.peak_memory_gib == 6.0 and found.utilization == 0.35
