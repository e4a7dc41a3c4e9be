"""Property: for any JSON value in any field, the parsers either refuse the record (BadRecord) or return
typed, finite, bounded values whose ``fields`` are strict JSON; nothing else is ever raised."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.contract import BadRecord, progress_record, summary_record, window_summary
from orchestrator.contract.fields import MAX_COUNT, MAX_TIME, MIN_TIME
from tests.cli.hostile_home import PROGRESS, WINDOW

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([10**16, 2**63, 10**400, 1e300, -0.0, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00"])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=10)
)
JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip


def _finite(value: float | None) -> bool:
    return value is None or math.isfinite(value)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([*PROGRESS, "event", "other"]), JSON, max_size=5))
def test_a_progress_record_is_refused_or_typed(changes: dict[str, Any]) -> None:
    line = json.dumps({**PROGRESS, **changes})  # NaN and Infinity are written as a broken writer would
    found = summary_record(line)
    assert found is not None
    try:
        record = progress_record(found)
    except BadRecord:
        return
    for count in (record.step, record.total_steps, record.world_size):
        assert count is None or (type(count) is int and 0 <= count <= MAX_COUNT)
    assert record.time is None or (record.time.tzinfo is not None and MIN_TIME <= record.time <= MAX_TIME)
    assert all(_finite(v) for v in (record.loss, record.data_s, record.compute_s, *record.metrics.values()))
    assert record.event is None or isinstance(record.event, str)
    json.dumps(record.fields, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([*WINDOW, "other"]), JSON, max_size=5))
def test_a_window_is_refused_or_typed(changes: dict[str, Any]) -> None:
    found = summary_record(json.dumps({**WINDOW, **changes}))
    assert found is not None
    try:
        window = window_summary(found)
    except BadRecord:
        return
    numbers = [window.start, window.end, window.duration_s, window.util_mean_pct, window.util_p95_pct,
               window.util_max_pct, window.idle_seconds, window.sm_activity_mean, window.throttled_fraction]  # fmt: skip
    assert all(_finite(v) for v in numbers) and window.end >= window.start
    assert all(0.0 <= p <= 100.0 for p in (window.util_mean_pct, window.util_p95_pct, window.util_max_pct))
    assert type(window.gpus) is int and type(window.samples) is int and 0 <= window.samples <= MAX_COUNT
    assert type(window.mem_used_max_bytes) is int and type(window.mem_total_bytes) is int
    assert isinstance(window.model, str)
    json.dumps(window.fields, allow_nan=False)
