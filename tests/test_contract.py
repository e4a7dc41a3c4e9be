"""The progress-file reader every component shares: torn lines are skipped, complete records kept."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.contract import read_progress_records

RECORDS = [{"step": i, "time": f"2026-01-01T00:00:0{i}+00:00"} for i in range(1, 5)]


def _line(record: dict[str, object]) -> str:
    return json.dumps(record) + "\n"


def test_torn_lines_in_the_middle_and_at_the_end_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    torn = _line({"step": 99, "loss": 0.5})[:9]  # a writer killed mid-append
    path.write_text(_line(RECORDS[0]) + _line(RECORDS[1]) + torn + "\n" + _line(RECORDS[2]) + "\n")
    with path.open("a") as handle:
        handle.write(_line(RECORDS[3]) + torn)
    assert [r.fields for r in read_progress_records(path)] == RECORDS


def test_a_tail_read_drops_the_cut_first_line_and_non_objects(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    path.write_text("".join(_line(r) for r in RECORDS) + "17\n[1]\n")
    tail = len(_line(RECORDS[3])) + len(_line(RECORDS[2])) + 10 + len("17\n[1]\n")
    assert [r.fields for r in read_progress_records(path, tail_bytes=tail)] == RECORDS[2:]


def test_a_missing_file_has_no_records(tmp_path: Path) -> None:
    assert read_progress_records(tmp_path / "nothing.jsonl") == []
