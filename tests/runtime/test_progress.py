"""The progress writer never continues a line torn by a killed writer."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.contract import read_progress_records
from orchestrator.runtime import ProgressFile


def test_an_append_after_a_torn_tail_starts_a_new_line(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    first = ProgressFile(path)
    first.event("resumed", 10)
    with path.open("a") as handle:
        handle.write('{"time": "2026-01-01T00:00:00+00:00", "step": 11, "lo')  # killed mid-append
    second = ProgressFile(path)  # the next attempt
    second.step(11, 20, 0.25, 2, {}, None, None)
    second.event("finished", 11)
    lines = path.read_text().splitlines()
    assert lines[1].endswith('"lo') and len(lines) == 4
    records = read_progress_records(path)
    assert [(r.step, r.event) for r in records] == [(10, "resumed"), (11, None), (11, "finished")]
    assert records[1].loss == 0.25


def test_each_record_is_one_line_and_non_finite_numbers_are_null(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    ProgressFile(path).step(1, None, float("nan"), 1, {"x": float("inf")}, 0.1, 0.2)
    text = path.read_text()
    assert text.endswith("\n") and text.count("\n") == 1
    record = json.loads(text)
    assert record["loss"] is None and record["metrics"] == {"x": None}
