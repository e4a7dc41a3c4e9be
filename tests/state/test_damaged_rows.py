"""One damaged row in the job store is reported and skipped; everything else goes on (issue 29, finding 10).

A row written by hand, by a bad disk or by another program (a status that is none, a time that does
not parse, JSON that is not an object, text in a number column) next to a healthy job: `list`,
`status`, `events` and `cost report` succeed and say which job, table and column is damaged and what to
do; the controller keeps ticking the healthy job to SUCCEEDED and reports the damaged one once.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.controller.loop import Controller
from orchestrator.spec import load_spec_text
from orchestrator.state.row_check import DamagedRow
from orchestrator.state.state_rows import load_state
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from tests.controller.fake_backend import FakeBackend

T0 = datetime.now(UTC) - timedelta(minutes=5)

DAMAGE = {
    # name: (SQL with ? for the damaged job's id, the column the note names)
    "status": ("UPDATE jobs SET status = 'BOGUS' WHERE id = ?", "status = 'BOGUS'"),
    "failure_reason": ("UPDATE jobs SET failure_reason = 'gremlins' WHERE id = ?", "failure_reason"),
    "submitted_at": ("UPDATE jobs SET submitted_at = 'yesterday' WHERE id = ?", "submitted_at = 'yesterday'"),
    "naive_time": ("UPDATE jobs SET updated_at = '2025-01-01T00:00:00' WHERE id = ?", "updated_at"),
    "options_json": ("UPDATE jobs SET options_json = '{\"waiting\": ' WHERE id = ?", "options_json"),
    "options_shape": (
        'UPDATE jobs SET options_json = \'{"budget_alerts": ["x"]}\' WHERE id = ?',
        "options_json",
    ),
    "summary_json": ("UPDATE jobs SET summary_json = '[1, 2]' WHERE id = ?", "summary_json"),
    "attempts": ("UPDATE jobs SET attempts = 'many' WHERE id = ?", "attempts = 'many'"),
    "team_blob": ("UPDATE jobs SET team = x'00ff' WHERE id = ?", "team"),
    "segment_time": ("UPDATE segments SET started_at = 'soon' WHERE job_id = ?", "started_at = 'soon'"),
    "segment_price": ("UPDATE segments SET node_price_usd_per_hour = 'free' WHERE job_id = ?", "node_price"),
    "placement": ("UPDATE attempts SET placement_json = '{' WHERE job_id = ?", "placement_json"),
    "placement_shape": (
        "UPDATE attempts SET placement_json = '{\"zone\": 1}' WHERE job_id = ?",
        "placement_json",
    ),
    "node_state": ("UPDATE nodes SET launch_state = 'dancing' WHERE job_id = ?", "launch_state = 'dancing'"),
}
SHOWN_ONLY = {"summary_json"}
"""Columns the controller never reads (it writes the summary when the job ends)."""
IN_THE_LEDGER = {"status", "failure_reason", "submitted_at", "naive_time", "attempts", "team_blob",
                 "segment_time", "segment_price"}  # fmt: skip
"""What `cost report` reads of a job that is not running: its jobs row and its segments."""


def _submit(store: JobStore, name: str, order: int) -> str:
    spec = load_spec_text(f"name: {name}\ncommand: train.py\nresources: {{nodes: 1}}\n")
    job = store.create_job(name=name, user="u", team="t", backend="fake", spec_json=spec.model_dump_json(),
                           deadline=None, now=T0 + timedelta(seconds=order))  # fmt: skip
    return job.id


def _damage(store: JobStore, sql: str, job_id: str) -> None:
    with sqlite3.connect(store.path) as conn:
        assert conn.execute(sql, (job_id,)).rowcount >= 1


def _started(tmp_path: Path) -> tuple[JobStore, FakeBackend, Controller, str, str]:
    """A healthy job and the one to damage, both launched (an attempt, a node, a segment each)."""
    store = JobStore(tmp_path)
    backend = FakeBackend()
    damaged, healthy = _submit(store, "damaged", 0), _submit(store, "healthy", 1)
    controller = Controller(store, backend, tick_seconds=60)
    for _ in range(2):
        controller.tick_all()
    assert store.job(healthy).status is JobStatus.LAUNCHING and store.job(damaged).attempts == 1
    return store, backend, controller, damaged, healthy


@pytest.mark.parametrize("kind", sorted(set(DAMAGE) - SHOWN_ONLY))
def test_the_controller_ticks_the_healthy_job_and_reports_the_damaged_one_once(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    store, _, controller, damaged, healthy = _started(tmp_path)
    sql, column = DAMAGE[kind]
    _damage(store, sql, damaged)
    with sqlite3.connect(store.path) as conn:
        before = conn.execute("SELECT * FROM jobs WHERE id = ?", (damaged,)).fetchone()

    for _ in range(6):
        controller.tick_all()  # never raises

    assert store.job(healthy).status is JobStatus.SUCCEEDED
    assert column in controller.errors[damaged] and "To fix" in controller.errors[damaged]
    noted = [e for e in store.events(damaged) if e.kind == "controller_error"]
    assert len(noted) == 1 and column in noted[0].message, "recorded once, not once per tick"
    assert sum(column in r.getMessage() for r in caplog.records) <= 2, "logged once (and the store's note)"
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT * FROM jobs WHERE id = ?", (damaged,)).fetchone() == before, (
            "left as it is"
        )


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_list_status_events_and_cost_report_go_on_and_name_the_damage(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    store, _, _, damaged, healthy = _started(tmp_path)
    sql, column = DAMAGE[kind]
    _damage(store, sql, damaged)

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out = capsys.readouterr()
        assert "Traceback" not in out.out + out.err
        return code, out.out, out.err

    for args in (
        ("list",),
        ("list", "-o", "json"),
        ("status", healthy),
        ("events", healthy),
        ("cost", "report"),
    ):
        code, out, err = run(*args)
        assert code == 0, (args, err)
        assert (healthy if args[0] != "events" else "segment opened") in out, args
        if args[0] == "list" or (args[0] == "cost" and kind in IN_THE_LEDGER):
            assert f"job '{damaged}' is damaged in the job store" in err and column in err, (args, err)
            assert "To fix: set " in err and f"sqlite3 {store.path}" in err
    code, out, _ = run("list", "-o", "json")
    assert healthy in [d["id"] for d in json.loads(out)], "standard output stays valid JSON"

    code, out, err = run("status", damaged)
    if code != 0:  # its jobs row: the one-line error that says what to do
        assert code == 1 and f"job '{damaged}' is damaged" in err and "To fix" in err and column in err
    code, out, err = run("events", damaged)
    assert code == 0 and "transition" in out, "the events of a damaged job still read"


def test_a_damaged_event_is_skipped_and_noted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    store, _, _, damaged, _ = _started(tmp_path)
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE events SET time = 'never' WHERE id = (SELECT min(id) FROM events WHERE job_id = ?)",
                     (damaged,))  # fmt: skip
    assert main(["events", damaged]) == 0
    out = capsys.readouterr()
    assert "attempt 1" in out.out and "submitted" not in out.out
    assert "its events row" in out.err and "time = 'never'" in out.err


def test_the_store_reads_a_damaged_job_as_a_damaged_row(tmp_path: Path) -> None:
    store, _, _, damaged, healthy = _started(tmp_path)
    _damage(store, DAMAGE["status"][0], damaged)
    assert [j.id for j in store.list_jobs()] == [healthy]
    with pytest.raises(DamagedRow) as caught:
        load_state(store, damaged)
    assert (caught.value.job_id, caught.value.table, caught.value.column) == (damaged, "jobs", "status")
    assert "one of PENDING, PLACING" in caught.value.message
    assert list(store.damaged.values()) == [caught.value]
