"""The window aggregate as running totals: saved and extended later, it equals aggregating everything."""

from __future__ import annotations

import json
import random

import pytest

from orchestrator.state.gpu_usage import (
    UsageTotals,
    UsageWindow,
    aggregate,
    summary_line_record,
    usage_window,
)
from tests.state.replay_windows import replay_window_records


@pytest.fixture(scope="module")
def windows() -> list[UsageWindow]:
    records = replay_window_records(7.0)
    return [usage_window(f"n{i % 2}", json.loads(json.dumps(r))) for i, r in enumerate(records)]


def test_totals_saved_and_extended_equal_the_aggregate_of_all(windows: list[UsageWindow]) -> None:
    whole = aggregate(windows)
    assert whole is not None and whole.monitors == 2 and whole.windows == len(windows)
    for cut in range(1, len(windows)):
        first = UsageTotals(monitors=2)
        for w in windows[:cut]:
            first.add(w)
        saved = json.loads(json.dumps(first.to_dict()))
        later = UsageTotals.from_dict(saved)
        for w in windows[cut:]:
            later.add(w)
        assert later.usage() == whole


def test_order_does_not_change_the_aggregate(windows: list[UsageWindow]) -> None:
    shuffled = list(windows)
    random.Random(7).shuffle(shuffled)
    assert aggregate(shuffled) == aggregate(windows)


def test_weighted_p95_and_peak_by_fraction() -> None:
    def win(p95: float, samples: int, used: int, total: int, model: str) -> UsageWindow:
        return UsageWindow("s", 0.0, 10.0, 1, model, samples, p95, p95, p95, used, total, None, 0.0)

    # 96 samples at p95 10, 4 at 90: the 95th of 100 weighted samples is 10; one more at 90 makes it 90
    low, high = win(10.0, 96, 8, 80, "A100"), win(90.0, 4, 40, 40, "A10G")
    assert (usage := aggregate([low, high])) is not None
    assert usage.util_p95_pct == 10.0 and usage.model == "A10G" and usage.mem_peak_fraction == 1.0
    assert usage.mem_peak_bytes == 40 and usage.mem_total_bytes == 40 and usage.sm_activity_mean is None
    assert (usage := aggregate([low, high, win(90.0, 2, 1, 80, "A100")])) is not None
    assert usage.util_p95_pct == 90.0
    assert aggregate([]) is None and UsageTotals().usage() is None


def test_summary_line_record_skips_what_is_not_a_json_object() -> None:
    assert summary_line_record('{"kind": "x"}\n') == {"kind": "x"}
    assert summary_line_record(b" [1, 2]") is None
    assert summary_line_record("gpuctl monitor: serving /metrics on 0.0.0.0:9400") is None
    assert summary_line_record("   ") is None
