from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.state.store import JobStore


def test_diagnose_a_job_by_id_reads_its_progress_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    store = JobStore(tmp_path)
    job = store.create_job(name="slow-input", user="u", team="t", backend="local", spec_json="{}",
                           deadline=None, now=datetime.now(UTC))  # fmt: skip
    lines = [json.dumps({"step": s, "data_s": 0.4, "compute_s": 0.6}) for s in range(1, 50)]
    (store.job_dir(job.id) / "progress.jsonl").write_text("\n".join(lines))
    assert main(["diagnose", job.id, "-o", "json"]) == 0
    findings = json.loads(capsys.readouterr().out)
    assert any("input" in f["code"] for f in findings), findings


def test_diagnose_a_job_without_nvml_says_not_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The monitor found no NVML and wrote only an "unavailable" record: the GPU rules could not run,
    which `diagnose` says instead of "no problems found" (text and JSON)."""
    from orchestrator.monitor.summary import unavailable_record

    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    store = JobStore(tmp_path)
    job = store.create_job(name="blind", user="u", team="t", backend="local", spec_json="{}",
                           deadline=None, now=datetime.now(UTC))  # fmt: skip
    notice = unavailable_record(job.id, "no_nvml", "NVML is not available: NVML Shared Library Not Found")
    (store.job_dir(job.id) / "monitor-summary-blind-a1-n0.jsonl").write_text(json.dumps(notice) + "\n")
    assert main(["diagnose", job.id]) == 0
    out = capsys.readouterr().out
    assert "no problems found" not in out
    assert "GPU use not measured (no NVML on the nodes: NVML is not available: NVML Shared Library" in out
    assert main(["diagnose", job.id, "-o", "json"]) == 0
    assert [f["code"] for f in json.loads(capsys.readouterr().out)] == ["gpu-not-measured"]
