"""What job code writes cannot break the CLI: a progress value read as infinity, a record of the wrong
types or a torn, non-UTF-8 or mistyped monitor summary line leaves `list`, `status` and `cost report`
working (the record is skipped), and `status -o json` prints strict JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.state.store import JobStore
from tests.cli.hostile_home import PROGRESS, WINDOW, gpuctl, running_job, strict_json, write_lines

WRONG_TYPES: list[dict[str, Any]] = [
    {"step": "x"},
    {"time": 12345},
    {"metrics": [1, 2]},
    {"loss": "low"},
    {"world_size": "eight"},
    {"total_steps": [100]},
    {"time": "2026-11-22T12:00:02"},  # no UTC offset
    {"event": 5},
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobStore:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    return JobStore(tmp_path)


@pytest.mark.parametrize(
    "line", ['{"step": 1e400}', '{"step": 1e400, "event": "finished"}', '{"step": 1e300}']
)
def test_an_infinite_or_huge_step_is_skipped(home: JobStore, line: str) -> None:
    """Finding 2: json reads 1e400 as inf, and int(inf) raised OverflowError in every reader."""
    victim, other = running_job(home, "victim"), running_job(home, "other")
    write_lines(home.job_dir(victim) / "progress.jsonl", [json.dumps(PROGRESS), line])
    code, out = gpuctl("list", "-o", "json")
    assert code == 0 and {d["id"] for d in strict_json(out)} == {victim, other}
    code, out = gpuctl("status", victim, "-o", "json")
    assert code == 0 and strict_json(out)["progress"]["step"] == PROGRESS["step"]
    assert gpuctl("cost", "report")[0] == 0


@pytest.mark.parametrize("fields", WRONG_TYPES, ids=lambda f: next(iter(f)))
def test_a_record_of_the_wrong_type_is_skipped(home: JobStore, fields: dict[str, Any]) -> None:
    """Finding 3: a well-formed record with a wrong type broke `list` for every job, and `status`."""
    victim, other = running_job(home, "victim"), running_job(home, "other")
    write_lines(
        home.job_dir(victim) / "progress.jsonl", [json.dumps(PROGRESS), json.dumps({**PROGRESS, **fields})]
    )
    code, out = gpuctl("list")
    assert code == 0 and victim in out and other in out
    code, out = gpuctl("status", victim, "-o", "json")
    assert code == 0 and strict_json(out)["progress"]["step"] == PROGRESS["step"]
    assert gpuctl("status", victim)[0] == 0
    assert gpuctl("cost", "report")[0] == 0


@pytest.mark.parametrize(
    "line",
    [
        json.dumps(WINDOW)[:50].encode(),  # torn
        b'{"kind": "gpuctl.monitor.window", "idle_seconds": "\xff\xfe"}',  # not UTF-8
        b"\xff\xfe\xfd",
        json.dumps({**WINDOW, "idle_seconds": "3"}).encode(),
        json.dumps({**WINDOW, "idle_seconds": None}).encode(),
        json.dumps({**WINDOW, "start": [1]}).encode(),
        b'{"kind": "gpuctl.monitor.window", "idle_seconds": 1e400}',
        json.dumps({"kind": "gpuctl.monitor.unavailable", "message": {"x": 1}}).encode(),
    ],
)
def test_a_bad_monitor_summary_line_is_skipped_by_cost_report(home: JobStore, line: bytes) -> None:
    """Finding 3: a torn, non-UTF-8 or mistyped `monitor-summary` line broke `cost report`."""
    victim = running_job(home, "victim")
    write_lines(home.job_dir(victim) / "monitor-summary-n0.jsonl", [json.dumps(WINDOW), line])
    code, out = gpuctl("cost", "report", "-o", "json")
    assert code == 0 and strict_json(out)
    assert gpuctl("cost", "report")[0] == 0


@pytest.mark.parametrize(
    "line",
    [
        '{"time": "2026-11-22T12:00:02+00:00", "step": 8, "loss": NaN}',
        '{"time": "2026-11-22T12:00:02+00:00", "step": 8, "loss": Infinity, "metrics": {"acc": -Infinity}}',
        '{"time": "2026-11-22T12:00:02+00:00", "step": 8, "metrics": {"acc": NaN}}',
        '{"event": "finished", "step": 8, "metrics": {"acc": NaN}}',
    ],
)
def test_status_json_never_prints_nan(home: JobStore, line: str) -> None:
    """Finding 11: `status -o json` printed NaN (not JSON) from a progress record."""
    victim = running_job(home, "victim")
    write_lines(home.job_dir(victim) / "progress.jsonl", [json.dumps(PROGRESS), line])
    code, out = gpuctl("status", victim, "-o", "json")
    assert code == 0
    doc = strict_json(out)
    assert doc["progress"]["step"] == PROGRESS["step"] and doc["progress"]["loss"] == PROGRESS["loss"]
    code, out = gpuctl("list", "-o", "json")
    assert code == 0 and strict_json(out)


def test_stored_metrics_that_are_not_finite_are_left_out(home: JobStore) -> None:
    """Finding 11: a job's stored summary from before records were checked prints as strict JSON."""
    victim = running_job(home, "victim")
    home.set_summary(victim, {"metrics": {"acc": float("nan"), "loss": float("inf"), "epochs": 3}})
    code, out = gpuctl("status", victim, "-o", "json")
    assert code == 0 and strict_json(out)["metrics"] == {"epochs": 3}


@pytest.mark.parametrize("number", ["NaN", "Infinity", "1e400", "1" + "0" * 400])
def test_a_ledger_export_with_a_non_finite_number_is_one_error(tmp_path: Path, number: str) -> None:
    """Finding 11: `cost report --input` never carries NaN or Infinity into its report (nor raises)."""
    export = tmp_path / "ledger.json"
    export.write_text(f'{{"jobs": [], "segments": [], "idle_gpu_hours": {{"j": {number}}}}}')
    code, out = gpuctl("cost", "report", "--input", str(export), "-o", "json")
    assert code != 0 and out == ""
    export.write_text('{"jobs": [], "segments": [], "idle_gpu_hours": {"j": 1.5}}')
    code, out = gpuctl("cost", "report", "--input", str(export), "-o", "json")
    assert code == 0 and strict_json(out)
