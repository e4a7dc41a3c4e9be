"""The one parser of GPU monitor window summaries: typed, finite, bounded values; a torn, non-UTF-8 or
mistyped line is skipped (with one warning per file) by every reader, never raised out of it."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.contract import BadRecord, window_summary
from orchestrator.monitor.diagnosis import diagnose_files
from orchestrator.monitor.summary import read_summaries
from orchestrator.state.gpu_usage import unavailable_message
from orchestrator.state.store import JobStore
from orchestrator.state.usage import UsageStore, usage_from_files

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
GOOD: dict[str, Any] = {
    "kind": "gpuctl.monitor.window", "job_id": "j", "start": 1_800_000_000.0, "end": 1_800_000_060.0,
    "duration_s": 60.0, "gpus": 2, "model": "NVIDIA A10G", "util_mean_pct": 40.0, "util_p95_pct": 60.0,
    "util_max_pct": 70.0, "mem_used_mean_bytes": 2**30, "mem_used_p95_bytes": 2**31, "mem_used_max_bytes": 2**32,
    "mem_total_bytes": 24 * 2**30, "sm_activity_mean": 0.5, "idle_seconds": 3.0, "idle_threshold_pct": 1.0,
    "throttled_fraction": 0.0, "per_gpu": [{"gpu": 0, "samples": 60}, {"gpu": 1, "samples": 60}],
}  # fmt: skip

BAD_FIELDS: list[tuple[str, Any]] = [
    ("start", float("inf")),
    ("start", "yesterday"),
    ("start", -5.0),
    ("start", 1e300),
    ("end", 1.0),  # before the start
    ("end", float("nan")),
    ("duration_s", None),
    ("duration_s", [60]),
    ("gpus", 2.5),
    ("gpus", "8"),
    ("gpus", 10**9),
    ("model", 7),
    ("util_mean_pct", float("nan")),
    ("util_mean_pct", 1e9),
    ("util_p95_pct", True),
    ("util_max_pct", -1.0),
    ("mem_used_max_bytes", 1e400),
    ("mem_used_max_bytes", 10**30),
    ("mem_total_bytes", "24GiB"),
    ("mem_used_mean_bytes", -1),
    ("sm_activity_mean", 7.0),
    ("idle_seconds", float("inf")),
    ("idle_seconds", {"s": 1}),
    ("throttled_fraction", 2.0),
    ("idle_threshold_pct", "1"),
    ("job_id", 5),
    ("per_gpu", {"gpu": 0}),
    ("per_gpu", [1, 2]),
    ("per_gpu", [{"samples": "60"}]),
    ("per_gpu", [{"samples": 60, "util_mean_pct": float("inf")}]),
]


@pytest.mark.parametrize(("key", "value"), BAD_FIELDS)
def test_a_field_of_the_wrong_type_or_out_of_range_refuses_the_window(key: str, value: Any) -> None:
    with pytest.raises(BadRecord, match=key):
        window_summary({**GOOD, key: value})


def test_a_valid_window_reads_into_typed_values() -> None:
    window = window_summary(GOOD)
    assert window.samples == 120 and window.gpus == 2 and window.end == 1_800_000_060.0
    assert window.fields == GOOD and window.util_p95_pct == 60.0


def hostile_lines() -> list[bytes]:
    lines = [json.dumps({**GOOD, key: value}).encode() for key, value in BAD_FIELDS]
    lines += [
        json.dumps(GOOD).encode()[:40],
        b'{"kind": "gpuctl.monitor.window", "start": \xff\xfe}',
        b"\xff" * 30,
    ]
    lines += [b"[" * 100_000, b'{"kind": "gpuctl.monitor.window", "gpus": 1e400}', b"[1, 2]", b'"text"']
    lines += [
        json.dumps({"kind": "gpuctl.monitor.unavailable", "reason": ["x"], "message": {"a": 1}}).encode()
    ]
    return lines


def test_every_reader_skips_hostile_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = JobStore(tmp_path)
    job = store.create_job(
        name="j", user="u", team="t", backend="local", spec_json="{}", deadline=None, now=NOW
    )
    file = store.job_dir(job.id) / "monitor-summary-n0.jsonl"
    file.write_bytes(b"\n".join([json.dumps(GOOD).encode(), *hostile_lines(), b""]))
    caplog.set_level(logging.WARNING)
    assert read_summaries(file) == [GOOD]
    usage = UsageStore(store)
    assert usage.ingest(job.id, NOW) == 1 and usage.ingest(job.id, NOW) == 0
    assert usage.windows(job.id) == [GOOD]
    stored = usage.usage(job.id)
    assert stored is not None and stored.samples == 120 and stored == usage_from_files(store.job_dir(job.id))
    assert usage.idle_gpu_hours() == {job.id: pytest.approx(3.0 / 3600)}
    assert diagnose_files(file) is not None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # once for the file's readers, once for the store's
    assert [e.message for e in store.events(job.id) if e.kind == "gpu_monitor"] == [
        "GPU monitor: not running; utilization not measured"
    ]


def test_rows_stored_before_windows_were_checked_are_left_out(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job = store.create_job(
        name="j", user="u", team="t", backend="local", spec_json="{}", deadline=None, now=NOW
    )
    file = store.job_dir(job.id) / "monitor-summary-n0.jsonl"
    file.write_text(json.dumps(GOOD) + "\n")
    usage = UsageStore(store)
    usage.ingest(job.id, NOW)
    with store.transaction() as conn:  # what an older version stored from a hostile line
        conn.exec_driver_sql(
            "INSERT INTO gpu_usage_windows (job_id, source, line_offset, start, end, duration_s, gpus, model,"
            " samples, util_mean_pct, util_p95_pct, util_max_pct, mem_used_max_bytes, mem_total_bytes,"
            " sm_activity_mean, idle_seconds, record_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (job.id, "x", 0, 1e308 * 10, 1e308 * 10, 60.0, 1, "m", 1, 50.0, 50.0, 50.0, 1, 1, None,
             1e308 * 10, '{"start": Infinity}'),
        )  # fmt: skip
    assert usage.windows(job.id) == [GOOD]
    found = usage.usage(job.id)
    assert found is not None and found.windows == 1
    assert usage.idle_gpu_hours() == {job.id: pytest.approx(3.0 / 3600)}
    activity = usage.activity(job.id)
    assert activity is not None and activity.measured_until.timestamp() == GOOD["start"] + 60


def test_an_unavailable_line_of_the_wrong_types_reads_as_not_running() -> None:
    assert (
        unavailable_message({"reason": 5, "message": ["x"]})
        == "GPU monitor: not running; utilization not measured"
    )
    assert len(unavailable_message({"message": "m" * 10_000})) < 400
