"""GPU use that was not measured reads as "not measured" in every output, never as 0 idle / 100 %."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cli.cost_cmd import load_report_inputs
from orchestrator.controller.actions import CloseSegment, Transition
from orchestrator.costs.html import to_html
from orchestrator.costs.render import to_csv, to_json, to_table
from orchestrator.costs.report import build_report_from
from orchestrator.monitor.summary import unavailable_record
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing.states import drive, running_job

START = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
END = datetime(2026, 11, 22, 11, 0, tzinfo=UTC)


def idle_window(seconds: float) -> str:
    """One window of one GPU, idle all the time."""
    record = {
        "kind": "gpuctl.monitor.window", "job_id": "x", "start": START.timestamp(), "end": START.timestamp() + seconds,
        "duration_s": seconds, "gpus": 1, "model": "V100", "samples": 10, "util_mean_pct": 0.0, "util_p95_pct": 0.0,
        "util_max_pct": 0.0, "mem_used_mean_bytes": 0, "mem_used_p95_bytes": 0, "mem_used_max_bytes": 0,
        "mem_total_bytes": 16 * 2**30, "sm_activity_mean": None, "idle_seconds": seconds, "per_gpu": [],
    }  # fmt: skip
    return json.dumps(record) + "\n"


def ran(store: JobStore, name: str, summary: str) -> str:
    """A job of team ``t`` on 2 nodes x 1 GPU for an hour, with ``summary`` as its node 0 monitor file."""
    job_id = running_job(store, START, name=name, backend="slurm", nodes=2)
    drive(store, job_id, END, CloseSegment("finished"), Transition(JobStatus.SUCCEEDED, "finished"))
    (store.job_dir(job_id) / f"monitor-summary-{name}-a1-n0.jsonl").write_text(summary)
    return job_id


@pytest.fixture
def home(tmp_path: Path) -> tuple[Path, str, str]:
    store = JobStore(tmp_path)
    blind = ran(
        store, "blind", json.dumps(unavailable_record("b", "no_nvml", "NVML is not available")) + "\n"
    )
    part = ran(store, "part", idle_window(360.0))  # 0.1 of its 2 GPU-hours measured, all idle
    return tmp_path, blind, part


def test_a_partly_measured_job_counts_only_its_measured_gpu_hours(home: tuple[Path, str, str]) -> None:
    path, blind, part = home
    report = build_report_from(load_report_inputs(path), END, None, "job")
    jobs = {j.job_id: j for j in report.jobs}
    assert jobs[part].gpu_hours == pytest.approx(2.0) and jobs[part].measured_gpu_hours == pytest.approx(0.1)
    assert jobs[part].gpu_efficiency == 0.0  # idle all the time it was measured, not 95 %
    assert jobs[blind].gpu_efficiency is None and jobs[blind].measured_gpu_hours is None


def test_every_output_says_not_measured(home: tuple[Path, str, str]) -> None:
    path, blind, part = home
    inputs = load_report_inputs(path)
    by_job = build_report_from(inputs, END, None, "job")
    rows = {r["name"]: r for r in json.loads(to_json(by_job))["rows"]}
    assert rows[blind]["gpuEfficiency"] is None and rows[blind]["idleGpuHours"] is None
    assert rows[blind]["measuredGpuHours"] == 0 and rows[blind]["measuredShare"] == 0
    assert rows[part]["measuredGpuHours"] == pytest.approx(0.1) and rows[part]["gpuEfficiency"] == 0.0

    by_team = build_report_from(inputs, END, None, "team")
    [team] = json.loads(to_json(by_team))["rows"]
    assert team["gpuHours"] == pytest.approx(4.0) and team["measuredGpuHours"] == pytest.approx(0.1)
    assert team["measuredShare"] == pytest.approx(0.025) and team["gpuEfficiency"] == 0.0
    assert "GPU use measured on 0.10 of 4.00 GPU-hours (2%)" in by_team.notes[0]

    [csv_row] = [r for r in csv.DictReader(io.StringIO(to_csv(by_job))) if r["job"] == blind]
    assert (
        csv_row["gpuEfficiency"] == ""
        and csv_row["idleGpuHours"] == ""
        and float(csv_row["measuredGpuHours"]) == 0
    )

    console = Console(width=250, record=True)
    console.print(to_table(by_job))
    text = console.export_text()
    [line] = [ln for ln in text.splitlines() if blind in ln]
    assert "not measured" in line and "100%" not in line
    assert "GPU use measured on 0.10 of 4.00 GPU-hours" in text

    page = to_html(by_job)
    scatter = page.split('data-chart="efficiency-vs-cost"')[1].split("</figure>")[0]
    assert (
        scatter.count('class="point"') == 1
        and "1 of 2 jobs left out: their GPU use was not measured" in scatter
    )
    hist = page.split('data-chart="utilization-histogram"')[1].split("</figure>")[0]
    assert "1 of 2 jobs left out" in hist and "<td class='unmeasured'>not measured</td>" in page


def test_nothing_measured_is_never_100_percent(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    blind = ran(
        store, "blind", json.dumps(unavailable_record("b", "no_nvml", "NVML is not available")) + "\n"
    )
    report = build_report_from(load_report_inputs(tmp_path), END, None, "job")
    doc = json.loads(to_json(report))
    assert doc["totals"]["gpuEfficiency"] is None and doc["totals"]["measuredGpuHours"] == 0
    assert "GPU use not measured: none of the 2.00 GPU-hours" in report.notes[0]
    page = to_html(report)
    assert 'class="point"' not in page.split('data-chart="efficiency-vs-cost"')[1].split("</figure>")[0]
    assert "GPU use not measured" in page and blind in page


def test_an_export_keeps_measured_gpu_hours(home: tuple[Path, str, str]) -> None:
    from orchestrator.costs.inputs import inputs_from_json, inputs_to_json

    path, blind, part = home
    back = inputs_from_json(inputs_to_json(load_report_inputs(path)))
    assert back.measured is not None and list(back.measured) == [part]
    assert back.measured[part] == pytest.approx(0.1) and blind not in (back.idle or {})
