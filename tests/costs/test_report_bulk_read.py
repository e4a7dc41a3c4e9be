"""`gpuctl cost report` reads the job store in bulk (one query per table, the diagnosis from what it
read): every format of the report, and the damaged rows it notes, are those of the per-row reads
(``JobStore.segments``, each job's monitor windows, :func:`diagnose_job` per job), on both engines."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert

from orchestrator.cli.avoidable_view import diagnose_job
from orchestrator.cli.cost_cmd import _table_text, load_report_inputs
from orchestrator.cli.output import print_notes
from orchestrator.costs.html import to_html
from orchestrator.costs.inputs import ReportInputs, read_ledger, read_store_ledger
from orchestrator.costs.ledger import LostWork, Window
from orchestrator.costs.render import TABLE_ROWS, to_csv, to_json
from orchestrator.costs.report import GroupBy, build_report_from
from orchestrator.errors import GpuctlError
from orchestrator.state.job_dir import job_dir_path
from orchestrator.state.ledger_read import read_segments
from orchestrator.state.records import SegmentRecord
from orchestrator.state.row_check import DamagedRow
from orchestrator.state.store import JobStore
from orchestrator.state.tables import jobs, segments
from orchestrator.state.usage import UsageStore, usage_from_files
from tests.costs.factory import at, fleet
from tests.costs.ledger_rows import job_row, segment_row, write_records

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

NOW = at(12, day=20)
GIB = 2**30


def _ledger(home: Path) -> JobStore:
    """The factory's fleet written into the job store of ``home``, with what the report reads beside
    it: monitor windows (stored, and one job's only in its summary file), progress files (step
    timings, a tune record, a preemption's lost work), a damaged job and damaged segment rows."""
    job_records, segment_records, _ = fleet()
    store = JobStore(home)
    write_records(store, job_records, segment_records)
    with store.transaction() as conn:
        conn.execute(insert(segments), [  # job00's open; job02's, job04's and job03's ended long ago
            {**_row(segment_records[0]), "started_at": "yesterday"},
            {**_row(segment_records[5]), "ended_at": "2025-01-31T12:00"},
            {**_row(segment_records[7]), "ended_at": "2025-01-31T12:00:00+00:00", "nodes": -1},
            {**_row(segment_records[6]), "ended_at": "2025-01-31T12:00"},
        ])  # fmt: skip
        conn.execute(insert(jobs), {**job_row(job_records[0]), "id": "broken", "status": "exploded"})
    for i, job in enumerate(job_records):
        ran = [s for s in segment_records if s.job_id == job.id]
        folder = store.job_dir(job.id)
        if i % 3 == 0:
            _progress(folder / "progress.jsonl", ran[0].started_at, tuned=i == 3, lost=i != 6)
        if i % 4:
            window = _window(ran[0].started_at.timestamp(), util=20.0 + 5 * i)
            (folder / "monitor-summary-r-a1-n0.jsonl").write_text(json.dumps(window) + "\n")
            if i != 5:  # job05's windows only in its summary file
                UsageStore(store).ingest(job.id)
    return store


def _row(s: SegmentRecord) -> dict[str, object]:
    return {**segment_row(s), "ended_at": None}


def _window(start: float, util: float) -> dict[str, object]:
    return {"kind": "gpuctl.monitor.window", "start": start, "duration_s": 3600.0, "gpus": 1,
            "model": "Tesla V100-SXM2-16GB", "util_mean_pct": util, "util_p95_pct": util + 5,
            "util_max_pct": 100.0, "mem_used_max_bytes": 4 * GIB, "mem_total_bytes": 16 * GIB,
            "idle_seconds": 600.0, "samples": 360}  # fmt: skip


def _progress(path: Path, start: datetime, tuned: bool, lost: bool) -> None:
    lines: list[dict[str, object]] = [
        {"time": (start + timedelta(seconds=10 * s)).isoformat(), "step": s, "total_steps": 10_000,
         "data_s": 0.4, "compute_s": 0.6} for s in range(1, 30)
    ]  # fmt: skip
    if lost:
        lines.append({"time": (start + timedelta(seconds=400)).isoformat(), "event": "resumed", "step": 20})
    if tuned:
        lines.append({"time": (start + timedelta(seconds=500)).isoformat(), "event": "tuned",
                      "tune": {"before_step_s": 1.0, "after_step_s": 0.8, "settings": {}}})  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _per_row(home: Path, window: Window | None) -> tuple[ReportInputs, list[str]]:
    """The report's inputs read row by row (and the notes of the damaged rows met)."""
    store = JobStore(home, read_only=True)
    since = None if window is None else window.start
    inputs = read_ledger(store, since)
    in_report = {s.job_id for s in inputs.segments}
    fixes, tuned, lost = {}, {}, {}
    for job in store.list_jobs():
        if job.id not in in_report:
            continue
        try:
            diagnosed = diagnose_job(store, job, datetime.now(UTC), segments=store.segments(job.id))
        except (DamagedRow, GpuctlError):
            continue
        fixes[job.id] = diagnosed.avoidable.fixes
        if diagnosed.tuned:
            tuned[job.id] = diagnosed.tuned
        if diagnosed.lost is not None and diagnosed.lost.steps:
            lost[job.id] = diagnosed.lost
    idle, measured = dict(inputs.idle or {}), dict(inputs.measured or {})
    for job in inputs.jobs:  # a job's windows not stored: those of its summary files
        usage = None if job.id in measured else usage_from_files(job_dir_path(home, job.id))
        if usage is not None and usage.measured_gpu_hours > 0:
            idle[job.id], measured[job.id] = usage.idle_gpu_hours, usage.measured_gpu_hours
    found = dataclasses.replace(inputs, fixes=fixes, tuned=tuned, lost=lost, idle=idle, measured=measured)
    return found, _notes(store)


def _notes(store: JobStore) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stderr(out):
        print_notes(store.damaged.values())
    return out.getvalue().splitlines()


def _documents(inputs: ReportInputs, window: Window | None, by: GroupBy) -> dict[str, object]:
    report = build_report_from(inputs, NOW, window, by)
    return {"json": json.loads(to_json(report)), "csv": to_csv(report), "html": to_html(report),
            "table": _table_text(report, TABLE_ROWS)}  # fmt: skip


@pytest.mark.parametrize("window", [None, Window(at(0, day=3), NOW)], ids=["all time", "since day 3"])
def test_every_format_of_the_report_is_that_of_the_per_row_reads(
    tmp_path: Path, window: Window | None, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    _ledger(home)
    expected, expected_notes = _per_row(home, window)
    bulk = load_report_inputs(home, None if window is None else window.start)
    notes = capsys.readouterr().err.splitlines()
    assert notes == expected_notes
    assert sum(n.startswith("gpuctl: note:") for n in notes) == 5  # a damaged job, four damaged segments
    assert (
        expected.fixes and expected.tuned and expected.lost and expected.measured
    )  # the test reads them all
    for name in ("jobs", "segments", "idle", "measured", "to_finish", "fixes", "tuned", "lost"):
        assert getattr(bulk, name) == getattr(expected, name), name
    for by in GroupBy:
        assert _documents(bulk, window, by) == _documents(expected, window, by)


def test_the_bulk_read_skips_and_notes_exactly_the_damaged_rows(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _ledger(home)
    row_by_row, bulk = JobStore(home, read_only=True), JobStore(home, read_only=True)
    assert read_segments(bulk) == row_by_row.segments()
    assert list(bulk.damaged) == list(row_by_row.damaged) and len(bulk.damaged) == 4
    since = at(0, day=3)
    assert read_segments(JobStore(home, read_only=True), since) == row_by_row.segments(since=since)
    mine = ["job04", "job00", "job03"]  # only the rows of these jobs are read, their damage noted in turn
    only = JobStore(home, read_only=True)
    assert read_segments(only, of_jobs=mine) == [s for s in row_by_row.segments() if s.job_id in mine]
    assert [d.job_id for d in only.damaged.values()] == mine  # job02's damaged row is not read


def test_the_bulk_ledger_is_the_per_row_ledger(tmp_path: Path) -> None:
    store = _ledger(tmp_path / "home")
    per_row = read_ledger(store)
    bulk = read_store_ledger(store)
    assert bulk == per_row
    assert bulk.measured and set(bulk.measured) == set(bulk.idle or {})
    assert LostWork() not in bulk.lost.values()
