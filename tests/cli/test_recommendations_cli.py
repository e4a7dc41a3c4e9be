"""Mixed precision and a larger batch in `gpuctl diagnose JOB`, `gpuctl status` and the cost report: listed
and priced with the measured headroom, never counted as avoidable spend; the CSV's ``topFix`` column
(issue 34, 2 and the report's top fixes)."""

from __future__ import annotations

import csv
import io
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.state.store import JobStore
from orchestrator.testing.states import running_job
from tests.cli.hostile_home import write_lines

STARTED = datetime.now(UTC) - timedelta(hours=2)
"""Two hours before the test runs: set again by the ``store`` fixture, since the suite may run this test long
after it imported the module, and the USD the tests expect is that of a job running 2 hours."""
GIB = 2**30


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobStore:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setattr(sys.modules[__name__], "STARTED", datetime.now(UTC) - timedelta(hours=2))
    return JobStore(tmp_path)


def _steps(store: JobStore, job_id: str, data_s: float, compute_s: float) -> None:
    write_lines(store.job_dir(job_id) / "progress.jsonl", [
        json.dumps({"time": (STARTED + timedelta(seconds=s)).isoformat(), "step": s, "total_steps": 10_000,
                    "data_s": data_s, "compute_s": compute_s}) for s in range(1, 40)
    ])  # fmt: skip


def _busy_v100(store: JobStore) -> str:
    """A V100 job (1 USD an hour, 2 hours) busy 80 % with 12 of its 16 GiB never used."""
    job_id = running_job(store, STARTED, name="roomy")
    _steps(store, job_id, 0.02, 0.98)
    window = {"kind": "gpuctl.monitor.window", "start": STARTED.timestamp(), "duration_s": 7200.0, "gpus": 1,
              "model": "Tesla V100-SXM2-16GB", "util_mean_pct": 80.0, "util_p95_pct": 95.0, "util_max_pct": 100.0,
              "mem_used_max_bytes": 4 * GIB, "mem_total_bytes": 16 * GIB, "idle_seconds": 0.0}  # fmt: skip
    (store.job_dir(job_id) / "monitor-summary-r-a1-n0.jsonl").write_text(json.dumps(window) + "\n")
    return job_id


def test_diagnose_lists_the_recommendations_with_headroom_and_gain(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = _busy_v100(store)
    assert main(["diagnose", job_id, "-o", "json"]) == 0
    found = {f["code"]: f for f in json.loads(capsys.readouterr().out)}
    mixed, batch = found["mixed-precision"], found["larger-batch"]
    assert mixed["evidence"]["headroom_share"] == pytest.approx(0.75)
    assert mixed["bound"]["share"] == pytest.approx(0.8 * (1 - 1 / 8))  # busy 80 %, V100: 8x over FP32
    spent = mixed["priced_over"]["month_spend_usd"]
    assert spent == pytest.approx(2.0, rel=0.01)
    # GPU findings are priced over the measured part of the spend (the 2 h window of a job run slightly longer)
    measured = spent * mixed["priced_over"]["coverage"]
    assert measured == pytest.approx(2.0, rel=1e-3)
    assert mixed["month_usd"] == pytest.approx(0.7 * measured, rel=1e-3)
    assert batch["bound"]["share"] == pytest.approx(0.2) and batch["month_usd"] == pytest.approx(
        0.2 * measured, rel=1e-3
    )
    assert main(["diagnose", job_id]) == 0
    out = capsys.readouterr().out
    assert "avoidable spend: none found" in out  # recommendations are not counted
    ranked = out.split("fixes by what they save:")[1]
    assert "mixed-precision: remaining work: not known yet, 1.40 USD in the last 30 days" in ranked
    assert "not counted as avoidable spend" in ranked
    assert main(["status", job_id]) == 0
    assert "avoidable spend: none found" in capsys.readouterr().out


def test_the_report_lists_recommendations_apart_and_the_csv_has_each_rows_top_fix(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    roomy = _busy_v100(store)
    slow = running_job(store, STARTED, name="slow")
    _steps(store, slow, 0.3, 0.7)
    assert main(["cost", "report", "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in report["rows"]}
    assert rows[roomy]["avoidableCost"] == 0 and rows[roomy]["topFix"] is None
    assert rows[slow]["topFix"].startswith("input-bound: ")
    counted = {(f["job"], f["finding"]): f["counted"] for f in report["topFixes"]}
    assert counted[(roomy, "mixed-precision")] is False and counted[(slow, "input-bound")] is True
    assert main(["cost", "report", "-o", "csv"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    by_job = {r["job"]: r for r in table}
    assert by_job[slow]["topFix"].startswith("input-bound: ") and by_job[roomy]["topFix"] == ""
    assert by_job["TOTAL"]["topFix"].startswith("input-bound: ")


def test_the_report_diagnoses_only_its_jobs_and_lists_the_store_once(
    store: JobStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cost report --since` diagnoses only the jobs with spend in its window, and pricing every job
    lists the stored jobs a fixed number of times, not once per job (linear in the jobs)."""
    from orchestrator.cli import avoidable_view
    from orchestrator.controller.actions import CloseSegment
    from orchestrator.state.status import JobStatus
    from orchestrator.testing.states import drive, through

    old = running_job(store, STARTED - timedelta(days=20), name="old")
    drive(store, old, STARTED - timedelta(days=19), CloseSegment("finished"), *through(JobStatus.SUCCEEDED))
    recent = [running_job(store, STARTED, name=f"new{i}") for i in range(8)]
    for job_id in (old, *recent):
        _steps(store, job_id, 0.3, 0.7)
    diagnosed: list[str] = []
    listed: list[int] = []
    real_diagnose, real_list = avoidable_view.job_findings, JobStore.list_jobs

    def counting_diagnose(store: JobStore, job: object, *args: object, **kwargs: object) -> object:
        diagnosed.append(job.id)  # type: ignore[attr-defined]
        return real_diagnose(store, job, *args, **kwargs)  # type: ignore[arg-type]

    def counting_list(self: JobStore, include_terminal: bool = True) -> object:
        listed.append(1)
        return real_list(self, include_terminal)

    monkeypatch.setattr(avoidable_view, "job_findings", counting_diagnose)
    monkeypatch.setattr(JobStore, "list_jobs", counting_list)
    assert main(["cost", "report", "--since", "7d", "-o", "json"]) == 0
    assert sorted(diagnosed) == sorted(recent)
    assert {r["name"] for r in json.loads(capsys.readouterr().out)["rows"]} == set(recent)
    diagnosed.clear()
    listed.clear()
    assert main(["cost", "report", "-o", "json"]) == 0
    assert sorted(diagnosed) == sorted([old, *recent])
    assert len(listed) < len(recent)  # a fixed few times (the ledger's reads, the diagnosis's), not per job
