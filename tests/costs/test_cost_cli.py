"""`gpuctl cost report` end to end on a JSON ledger export."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.cli.cost_cmd import load_report_inputs
from orchestrator.cli.main import main
from orchestrator.costs.inputs import ReportInputs, inputs_from_json, inputs_to_json
from orchestrator.costs.ledger import LostWork, job_costs
from orchestrator.state.records import JobRecord, SegmentRecord
from tests.costs.factory import fleet, preempted_three_times


@pytest.fixture()
def export(tmp_path: Path) -> Path:
    jobs, segments, idle = fleet()
    j3, s3 = preempted_three_times()
    inputs = ReportInputs([*jobs, j3], [*segments, *s3], idle, {"j3": LostWork(300, 6.0)})
    path = tmp_path / "ledger.json"
    path.write_text(inputs_to_json(inputs))
    return path


def test_export_round_trip(export: Path) -> None:
    back = inputs_from_json(export.read_text())
    assert len(back.jobs) == 13 and back.lost["j3"] == LostWork(300, 6.0)
    [j3] = [
        c
        for c in job_costs(back.jobs, back.segments, back.segments[0].started_at.replace(day=28))
        if c.job_id == "j3"
    ]
    assert j3.cost_usd == pytest.approx(14.8)


def test_report_formats_agree(export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "report", "--input", str(export), "--by", "team", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    total = doc["totals"]["totalCost"]
    assert doc["aggregate"] == "team" and total > 0
    assert (
        main(
            [
                "cost",
                "report",
                "--input",
                str(export),
                "--by",
                "team",
                "-o",
                "csv",
                "--out",
                str(tmp_path / "r.csv"),
            ]
        )
        == 0
    )
    rows = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert float(rows[-1]["totalCost"]) == pytest.approx(total, abs=1e-5)
    assert (
        main(
            [
                "cost",
                "report",
                "--input",
                str(export),
                "--by",
                "team",
                "-o",
                "table",
                "--out",
                str(tmp_path / "t.txt"),
            ]
        )
        == 0
    )
    assert f"${total:,.2f}" in (tmp_path / "t.txt").read_text()
    assert (
        main(["cost", "report", "--input", str(export), "-o", "html", "--out", str(tmp_path / "r.html")]) == 0
    )
    assert "<svg" in (tmp_path / "r.html").read_text()


def test_window_filters(export: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "cost",
                "report",
                "--input",
                str(export),
                "--window",
                "2026-03-02T11:00,2026-03-02T15:00",
                "--by",
                "job",
                "-o",
                "json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    j3 = next(r for r in doc["rows"] if r["name"] == "j3")
    assert j3["totalCost"] == pytest.approx(5.6)


def test_errors_are_clear(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["cost", "report", "--input", str(tmp_path / "nope.json")]) == 2
    assert "To fix" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text('{"jobs": [{"id": 1}]}')
    assert main(["cost", "report", "--input", str(tmp_path / "bad.json")]) == 2
    assert "not a gpuctl ledger export" in capsys.readouterr().err
    assert main(["cost", "report", "--input", str(tmp_path / "bad.json"), "--since", "soon"]) == 2
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    code = main(["cost", "report"])  # reads the job store when this build has one
    assert code == 0 or (code == 3 and "--input FILE" in capsys.readouterr().err)


class FakeStore:
    """The two read methods reports need from the job store, plus monitor idle summaries."""

    def __init__(self) -> None:
        self.jobs, self.segs, self.idle = fleet()
        self.since: object = "unset"

    def list_jobs(self) -> list[JobRecord]:
        return self.jobs

    def segments(self, job_id: str | None = None, since: datetime | None = None) -> list[SegmentRecord]:
        self.since = since
        return self.segs

    def idle_gpu_hours(self) -> dict[str, float]:
        return self.idle


def test_report_reads_the_job_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = FakeStore()
    opened: list[tuple[Path, bool]] = []
    monkeypatch.setattr(
        "orchestrator.state.store.open_store",
        lambda home, read_only=False: opened.append((home, read_only)) or store,
    )
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    inputs = load_report_inputs(tmp_path)
    assert inputs.idle == store.idle and len(inputs.segments) == len(store.segs)
    assert main(["cost", "report", "--by", "user", "--since", "3650d", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert opened == [(tmp_path, True)] * 2 and isinstance(store.since, datetime), "the report only reads"
    expected = sum(c.cost_usd for c in job_costs(store.jobs, store.segs, datetime.now(UTC)))
    assert (
        doc["totals"]["totalCost"] == pytest.approx(expected) and doc["totals"]["gpuEfficiency"] is not None
    )
