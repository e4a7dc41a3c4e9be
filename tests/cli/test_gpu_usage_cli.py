"""Stored GPU use in `gpuctl status` (text and JSON) and in the cost report (stored data before files)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.cli.cost_cmd import load_report_inputs
from orchestrator.cli.main import main
from orchestrator.state.store import JobStore
from orchestrator.state.usage import UsageStore

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def window(start: float, util: float, idle_s: float) -> str:
    per_gpu = [{"gpu": 0, "samples": 10}, {"gpu": 1, "samples": 10}]
    record = {
        "kind": "gpuctl.monitor.window", "job_id": "x", "start": start, "end": start + 10, "duration_s": 10.0,
        "gpus": 2, "model": "NVIDIA A10G", "util_mean_pct": util, "util_p95_pct": util + 5, "util_max_pct": util + 9,
        "mem_used_mean_bytes": 4 * 2**30, "mem_used_p95_bytes": 5 * 2**30, "mem_used_max_bytes": 6 * 2**30,
        "mem_total_bytes": 24 * 2**30, "sm_activity_mean": 0.5, "idle_seconds": idle_s, "per_gpu": per_gpu,
    }  # fmt: skip
    return json.dumps(record) + "\n"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    store = JobStore(tmp_path)
    job = store.create_job(
        name="j", user="u", team="t", backend="local", spec_json="{}", deadline=None, now=NOW
    )
    file = store.job_dir(job.id) / "monitor-summary-j-a1-n0.jsonl"
    file.write_text(window(0.0, 40.0, 3.0) + window(10.0, 60.0, 0.6))
    UsageStore(store).ingest(job.id, NOW)
    return tmp_path, job.id


def test_status_shows_gpu_use(home: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    _, job_id = home
    assert main(["status", job_id, "-o", "json"]) == 0
    usage = json.loads(capsys.readouterr().out)["gpu_usage"]
    assert usage["samples"] == 40 and usage["windows"] == 2
    assert usage["util_mean_pct"] == 50.0 and usage["util_p95_pct"] == 65.0 and usage["util_max_pct"] == 69.0
    assert usage["mem_peak_fraction"] == 0.25 and usage["sm_activity_mean"] == 0.5
    assert usage["idle_gpu_hours"] == pytest.approx(3.6 / 3600, abs=1e-6)
    assert main(["status", job_id]) == 0
    text = capsys.readouterr().out
    assert "GPU use: utilization mean 50% (p95 65%), peak memory 25% of 24 GiB, SM activity 0.50" in text


def test_status_without_measurements_has_a_null_gpu_usage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    job = JobStore(tmp_path).create_job(
        name="j", user="u", team="t", backend="local", spec_json="{}", deadline=None, now=NOW
    )
    assert main(["status", job.id, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpu_usage"] is None


def test_cost_report_prefers_stored_windows_and_falls_back_to_files(home: tuple[Path, str]) -> None:
    path, job_id = home
    file = path / "jobs" / job_id / "monitor-summary-j-a1-n0.jsonl"
    file.write_text(window(0.0, 40.0, 360.0))  # the stored windows win over what the file says now
    idle = load_report_inputs(path).idle or {}
    assert list(idle) == [job_id] and idle[job_id] == pytest.approx(3.6 / 3600)
    store = JobStore(path)
    other = store.create_job(
        name="k", user="u", team="t", backend="local", spec_json="{}", deadline=None, now=NOW
    )
    (store.job_dir(other.id) / "monitor-summary-k-a1-n0.jsonl").write_text(window(0.0, 40.0, 720.0))
    idle = load_report_inputs(path).idle or {}
    assert idle[other.id] == pytest.approx(0.2)  # nothing stored there: read from the file


def test_diagnose_job_reads_the_stored_node_windows(
    home: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, job_id = home
    assert main(["diagnose", job_id, "-o", "json"]) == 0
    assert "low-utilization" not in {f["code"] for f in json.loads(capsys.readouterr().out)}  # mean 50 %
    store = JobStore(path)
    low = store.create_job(
        name="low", user="u", team="t", backend="local", spec_json="{}", deadline=None, now=NOW
    )
    (store.job_dir(low.id) / "monitor-summary-low-a1-n0.jsonl").write_text(window(0.0, 20.0, 0.0))
    (store.job_dir(low.id) / "monitor-summary-low-a1-n1.jsonl").write_text(window(0.0, 30.0, 0.0))
    UsageStore(store).ingest(low.id, NOW)
    assert main(["diagnose", low.id, "-o", "json"]) == 0
    assert "low-utilization" in {f["code"] for f in json.loads(capsys.readouterr().out)}  # both nodes, 25 %
