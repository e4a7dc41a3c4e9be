"""The one parser of progress records: typed, finite, bounded values; a bad record is skipped (with one
warning per file), never raised out of a reader."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.progress import read_progress, read_step_times
from orchestrator.contract import BadRecord, parse_progress_records, progress_record, read_progress_records
from orchestrator.costs.lost_work import lost_work_from_progress
from orchestrator.monitor.diagnosis import read_step_timings

GOOD = {"time": "2026-01-01T00:00:01+00:00", "step": 7, "total_steps": 10, "loss": 0.5, "world_size": 2}

BAD_FIELDS: list[tuple[str, Any]] = [
    ("step", float("inf")),
    ("step", 1e300),
    ("step", 10**16),
    ("step", -1),
    ("step", 2.5),
    ("step", "x"),
    ("step", True),
    ("step", [1]),
    ("total_steps", "10"),
    ("total_steps", float("inf")),
    ("world_size", 0),
    ("world_size", {"n": 2}),
    ("loss", "low"),
    ("loss", float("nan")),
    ("loss", float("-inf")),
    ("time", 12345),
    ("time", "yesterday"),
    ("time", "2026-01-01T00:00:01"),  # no UTC offset
    ("time", "9999-12-31T23:59:59+00:00"),
    ("time", ["2026-01-01T00:00:01+00:00"]),
    ("metrics", [1, 2]),
    ("metrics", "accuracy=1"),
    ("metrics", {"accuracy": float("nan")}),
    ("event", 5),
    ("data_s", -1.0),
    ("data_s", "fast"),
    ("compute_s", 1e12),
    ("extra", {"deep": [float("inf")]}),  # no number anywhere may be non-finite
]


@pytest.mark.parametrize(("key", "value"), BAD_FIELDS)
def test_a_field_of_the_wrong_type_or_out_of_range_refuses_the_record(key: str, value: Any) -> None:
    with pytest.raises(BadRecord, match=key):
        progress_record({**GOOD, key: value})


def test_a_valid_record_reads_into_typed_values() -> None:
    record = progress_record({**GOOD, "step": 7.0, "metrics": {"acc": 1, "note": "x", "nan": None}})
    assert record.step == 7 and isinstance(record.step, int) and record.is_step
    assert record.time == datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert record.metrics == {"acc": 1.0} and record.loss == 0.5 and record.world_size == 2
    assert record.fields["step"] == 7 and isinstance(record.fields["step"], int)
    assert (
        progress_record({"event": "finished", "step": 3, "time": "2026-01-01T00:00:01Z"}).event == "finished"
    )


def _write(path: Path, *lines: str | bytes) -> None:
    path.write_bytes(b"".join((line.encode() if isinstance(line, str) else line) + b"\n" for line in lines))


def hostile_lines() -> list[str | bytes]:
    """The issue's lines and their class: json reads 1e400 as inf; wrong types; too deep; not UTF-8."""
    lines: list[str | bytes] = [
        '{"step": 1e400}',
        '{"step": 1e400, "event": "finished"}',
        '{"loss": NaN, "step": 9}',
    ]
    lines += [json.dumps({**GOOD, key: value}) for key, value in BAD_FIELDS]
    lines += ["[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000]
    lines += [b'{"step": 9, "time": "\xff\xfe"}', '{"step": ' + "9" * 5000 + "}"]
    return lines


def test_every_reader_skips_hostile_records(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    _write(path, *hostile_lines(), json.dumps(GOOD))
    assert [r.fields for r in read_progress_records(path)] == [GOOD]
    progress = read_progress(path)
    assert progress is not None and progress.step == 7 and progress.loss == 0.5
    assert read_step_times(path) == [(datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC), 7)]
    assert lost_work_from_progress(path) is not None
    assert read_step_timings(path) == []
    assert [r.step for r in parse_progress_records("\n".join(map(str, hostile_lines())))] == []


def test_a_bad_record_is_reported_once_per_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "progress.jsonl"
    _write(path, '{"step": "x"}', '{"time": 12345, "step": 1}', json.dumps(GOOD))
    caplog.set_level(logging.WARNING)
    for _ in range(3):  # a controller reads the file every tick
        assert len(read_progress_records(path)) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0] and "step must be a number" in warnings[0]


def test_the_tail_of_a_finished_run_keeps_its_metrics_and_refuses_a_bad_final_line(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    finished = {"event": "finished", "step": 10, "metrics": {"accuracy": 0.97, "tag": "best"}}
    _write(path, json.dumps(GOOD), json.dumps(finished), '{"event": "finished", "step": 1e400}')
    progress = read_progress(path)
    assert progress is not None and progress.finished and progress.step == 10
    assert progress.metrics == {"accuracy": 0.97}


TUNE = {"before_step_s": 0.3, "after_step_s": 0.1, "settings": {"num_workers": 4, "pin_memory": False}}


def test_a_tune_record_reads_into_a_typed_result() -> None:
    record = progress_record({**GOOD, "event": "tuned", "tune": TUNE})
    assert record.tune is not None and record.tune.before_step_s == 0.3 and record.tune.after_step_s == 0.1
    assert record.tune.settings == {"num_workers": 4, "pin_memory": False}
    assert record.tune.speedup == pytest.approx(3.0)
    assert progress_record(GOOD).tune is None


BAD_TUNES: list[Any] = [
    "fast",
    [0.3, 0.1],
    {"after_step_s": 0.1},
    {**TUNE, "before_step_s": -1.0},
    {**TUNE, "after_step_s": "0.1"},
    {**TUNE, "after_step_s": 1e12},
    {**TUNE, "settings": [1]},
    {**TUNE, "settings": {"num_workers": 1.5}},
    {**TUNE, "settings": {"num_workers": None}},
    {**TUNE, "settings": {"nested": {"a": 1}}},
    {**TUNE, "settings": {"huge": 10**16}},
    {**TUNE, "settings": {"long": "x" * 201}},
    {**TUNE, "settings": {f"k{i}": i for i in range(33)}},
]


@pytest.mark.parametrize("tune", BAD_TUNES)
def test_a_bad_tune_field_refuses_the_record(tune: Any) -> None:
    with pytest.raises(BadRecord, match="tune"):
        progress_record({**GOOD, "tune": tune})


def test_a_bad_tune_record_is_skipped_with_one_warning_per_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "progress.jsonl"
    bad = [json.dumps({**GOOD, "event": "tuned", "tune": tune}) for tune in BAD_TUNES]
    _write(path, *bad, json.dumps({**GOOD, "event": "tuned", "tune": TUNE}))
    caplog.set_level(logging.WARNING)
    for _ in range(2):
        records = read_progress_records(path)
        assert [r.tune.after_step_s for r in records if r.tune] == [0.1] and len(records) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "tune" in warnings[0]
