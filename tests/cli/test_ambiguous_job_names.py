"""A name or id prefix that several jobs share: every command that resolves a job says which jobs
match (id, state, submitted; newest first, at most ten and a count of the rest) and how to pick one
(issue 32, item 5)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from orchestrator.cli.main import main
from orchestrator.state.status import JobStatus
from orchestrator.state.store import SHOWN_MATCHES, JobStore
from orchestrator.testing.states import drive, through

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobStore:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    return JobStore(tmp_path)


def _jobs(store: JobStore, name: str, count: int) -> list[str]:
    """``count`` jobs named ``name``, one a minute, the first of them SUCCEEDED."""
    ids = [
        store.create_job(name=name, user="u", team="t", backend="local", spec_json="{}", deadline=None,
                         now=T0 + timedelta(minutes=i)).id
        for i in range(count)
    ]  # fmt: skip
    finished = through(
        JobStatus.PLACING, JobStatus.LAUNCHING, JobStatus.RUNNING, JobStatus.SUCCEEDED, message="done"
    )
    drive(store, ids[0], T0, *finished)
    return ids


@pytest.mark.parametrize("command", [["status"], ["events"], ["logs"], ["cancel"], ["status", "-o", "json"]])
def test_every_command_lists_the_jobs_a_name_matches(
    store: JobStore, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    first, second, third = _jobs(store, "quickstart", 3)
    _jobs(store, "other", 1)
    assert main([*command, "quickstart"]) == 2
    err = capsys.readouterr().err
    assert "3 jobs match 'quickstart' (newest first):" in err and "no job" not in err
    lines = [line.strip() for line in err.splitlines() if line.startswith("  quickstart-")]
    assert lines == [
        f"{third}  PENDING  submitted 2026-11-22 12:02:00",
        f"{second}  PENDING  submitted 2026-11-22 12:01:00",
        f"{first}  SUCCEEDED  submitted 2026-11-22 12:00:00",
    ]
    assert f"To fix: name one by its full id (or a longer prefix of it), e.g. `{third}`" in err
    assert "other-" not in err


def test_at_most_ten_are_listed_with_a_count_of_the_rest(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = _jobs(store, "sweep", SHOWN_MATCHES + 3)
    assert main(["status", "sweep"]) == 2
    err = capsys.readouterr().err
    listed = [line.split()[0] for line in err.splitlines() if line.startswith("  sweep-")]
    assert listed == ids[::-1][:SHOWN_MATCHES]
    assert "... and 3 older (`gpuctl list` shows every job)" in err


def test_one_match_and_no_match_are_as_before(store: JobStore, capsys: pytest.CaptureFixture[str]) -> None:
    (only,) = _jobs(store, "single", 1)
    assert main(["status", "single"]) == 0 and only in capsys.readouterr().out
    assert main(["status", only[:9]]) == 0
    capsys.readouterr()
    assert main(["status", "missing"]) == 2
    err = capsys.readouterr().err
    assert "no job 'missing'" in err and "see `gpuctl list`" in err


def test_a_hostile_name_among_the_matches_is_shown_escaped(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    _jobs(store, "x", 1)
    with store.transaction() as conn:  # a row written by something else, as issue 29's hostile homes
        conn.execute(text("UPDATE jobs SET status = :s WHERE name = 'x'"), {"s": "RUNNING\x1b[2J\nforged"})
    _jobs(store, "x", 1)
    assert main(["status", "x"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2J\\x0aforged" in err
