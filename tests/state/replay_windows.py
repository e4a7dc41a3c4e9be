"""The synthetic 8-GPU replay file summarised into windows, as a monitor writes them (state tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.monitor.samples import read_sample_ticks
from orchestrator.monitor.summary import WindowAggregator

REPLAY = Path(__file__).resolve().parents[1] / "data" / "monitor" / "h100x8_synthetic.jsonl"


def replay_window_records(window_s: float) -> list[dict[str, Any]]:
    """Every window summary of the replay file, the last (short) one included."""
    aggregator = WindowAggregator(window_s=window_s, interval_s=1.0)
    records: list[dict[str, Any]] = []
    for tick in read_sample_ticks(REPLAY):
        finished = aggregator.add(tick)
        if finished:
            records.append(finished)
    last = aggregator.flush()
    assert last is not None
    records.append(last)
    return records
