"""Samples recorded on a real NVIDIA H200 (scripts/record_nvml_samples.py): 12 s idle, 25 s of a bf16
matrix product on the GPU (its first seconds CUDA's start-up), 12 s idle again, one sample a second. The replay, the window summaries and
the diagnosis must read a real GPU's numbers the way they read the synthetic ones."""

from __future__ import annotations

import json
import statistics

from orchestrator.monitor.diagnosis import combine_windows, diagnose_usage
from orchestrator.monitor.samples import GpuSample, read_sample_ticks
from orchestrator.monitor.summary import WindowAggregator
from tests.monitor.monitor_helpers import DATA

H200 = DATA / "h200_recorded.jsonl"


def _phases() -> dict[str, list[GpuSample]]:
    phases: dict[str, list[GpuSample]] = {}
    for line in H200.read_text().splitlines():
        row = json.loads(line)
        phases.setdefault(row["phase"], []).append(GpuSample.from_dict(row))
    return phases


def test_the_recording_is_one_h200_idle_then_busy_then_idle() -> None:
    phases = _phases()
    assert list(phases) == ["idle", "load", "after"]
    load = phases["load"]
    assert {s.model for s in load} == {"NVIDIA H200"}
    busy = [s for s in load if s.util_pct >= 99]  # the first seconds are CUDA's start-up, still idle
    assert len(busy) >= 15
    assert all(s.sm_activity is not None and s.sm_activity > 0.5 for s in busy)  # GPM works on Hopper
    assert statistics.median(s.sm_activity or 0.0 for s in busy) > 0.9
    assert all(s.processes for s in busy)  # the trainer's process is seen with its memory
    assert max(s.util_pct for s in phases["idle"]) == 0
    assert max(s.power_w for s in phases["idle"]) < 150 < min(s.power_w for s in busy)


def test_windows_of_the_replay_tell_idle_from_busy() -> None:
    aggregator = WindowAggregator(window_s=10.0, interval_s=1.0)
    windows = [w for tick in read_sample_ticks(H200) if (w := aggregator.add(tick)) is not None]
    if (last := aggregator.flush()) is not None:
        windows.append(last)
    first, busiest = windows[0], max(windows, key=lambda w: w["util_mean_pct"])
    assert first["util_mean_pct"] == 0 and first["idle_seconds"] >= 9
    assert busiest["util_mean_pct"] > 95 and busiest["idle_seconds"] == 0
    assert busiest["sm_activity_mean"] > 0.9
    assert sum(w["duration_s"] for w in windows) >= 45

    usage = combine_windows(windows)
    assert usage is not None
    codes = {f.code for f in diagnose_usage(usage)}
    assert "idle-gpu" in codes  # 24 of 49 seconds idle on purpose
