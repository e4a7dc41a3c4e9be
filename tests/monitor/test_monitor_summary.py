"""Window summaries against hand-computed numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.monitor.summary import (
    SummaryWriter,
    WindowAggregator,
    percentile_nearest_rank,
    read_summaries,
)
from tests.monitor.monitor_helpers import GIB, make_sample


def test_percentile_nearest_rank_by_hand() -> None:
    assert percentile_nearest_rank([5, 1, 4, 2, 3], 0.95) == 5  # ceil(4.75) = 5th smallest
    assert percentile_nearest_rank(list(range(1, 101)), 0.95) == 95
    assert percentile_nearest_rank([7], 0.95) == 7
    with pytest.raises(ValueError):
        percentile_nearest_rank([], 0.95)


def test_mean_p95_max_of_one_gpu() -> None:
    aggregator = WindowAggregator(window_s=60, interval_s=1)
    for t in range(20):  # util 0, 5, ..., 95; memory 1..20 GiB
        assert aggregator.add([make_sample(float(t), util=5.0 * t, mem_gib=t + 1)]) is None
    window = aggregator.flush()
    assert window is not None
    assert window["util_mean_pct"] == 47.5
    assert window["util_p95_pct"] == 90.0  # 19th of 20 values
    assert window["util_max_pct"] == 95.0
    assert window["mem_used_mean_bytes"] == round(10.5 * GIB)
    assert window["mem_used_p95_bytes"] == 19 * GIB
    assert window["mem_used_max_bytes"] == 20 * GIB
    assert window["start"] == 0.0 and window["end"] == 20.0 and window["duration_s"] == 20.0
    assert window["idle_seconds"] == 0.0  # util 0 only at the first sample: no interval to charge
    assert window["sm_activity_mean"] is None
    assert aggregator.flush() is None  # nothing left


def test_idle_seconds_threshold_and_gap_cap() -> None:
    aggregator = WindowAggregator(window_s=600, interval_s=1, idle_threshold_pct=1.0)
    for t, util in [(0, 0.0), (1, 0.0), (2, 50.0), (3, 0.5), (13, 0.0), (14, 1.0)]:
        aggregator.add([make_sample(float(t), util=util)])
    window = aggregator.flush()
    assert window is not None
    # t=1: 1 s; t=3 (0.5 % < 1 %): 1 s; t=13: gap of 10 s capped at 2 x interval = 2 s; t=14: 1 % is busy
    assert window["idle_seconds"] == 4.0
    assert aggregator.idle_seconds_total == {0: 4.0}


def test_windows_close_on_time_and_across_gpus() -> None:
    aggregator = WindowAggregator(window_s=10, interval_s=1)
    closed = []
    for t in range(25):
        tick = [
            make_sample(float(t), gpu=0, util=100.0, sm_activity=0.8),
            make_sample(
                float(t), gpu=1, util=0.0, sm_activity=None, clock_event_reasons=0x4 if t < 5 else 0x1
            ),
        ]
        window = aggregator.add(tick)
        if window is not None:
            closed.append(window)
    last = aggregator.flush()
    assert last is not None
    closed.append(last)
    assert [(w["start"], w["end"]) for w in closed] == [(0.0, 10.0), (10.0, 20.0), (20.0, 25.0)]
    first = closed[0]
    assert first["gpus"] == 2
    assert first["util_mean_pct"] == 50.0
    assert first["util_p95_pct"] == 100.0
    assert first["sm_activity_mean"] == 0.8  # GPU 1 reported none
    assert first["idle_seconds"] == 9.0  # GPU 1 idle from t=1 to t=9
    assert closed[1]["idle_seconds"] == 10.0
    per_gpu = {g["gpu"]: g for g in first["per_gpu"]}
    assert per_gpu[1]["throttled_fraction"] == 0.5  # power cap (0x4) in 5 of 10 samples; 0x1 (idle) is not
    assert per_gpu[0]["throttled_fraction"] == 0.0
    assert first["throttled_fraction"] == 0.25


def test_writer_and_reader_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "job" / "monitor-summary.jsonl"
    writer = SummaryWriter(path)
    aggregator = WindowAggregator(window_s=60, interval_s=1, job_id="j1")
    aggregator.add([make_sample(0.0)])
    record = aggregator.flush()
    assert record is not None
    writer.write(record)
    writer.write(record)
    with path.open("a") as handle:
        handle.write('{"kind": "something-else"}\n\n')
    assert read_summaries(path) == [record, record]
    assert record["job_id"] == "j1"
