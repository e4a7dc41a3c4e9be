"""`gpuctl list --state/--user/--team/--since/--watch`, `diagnose` without a job, and an open attempt's
time so far (issue 32, item 8)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.cli import job_filters
from orchestrator.cli.main import main
from orchestrator.cli.views import segment_span
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore

NOW = datetime.now(UTC)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobStore:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    store = JobStore(tmp_path)
    for name, user, team, age_h in (
        ("old", "ann", "vision", 30),
        ("new", "bob", "nlp", 1),
        ("mid", "ann", "nlp", 5),
    ):
        store.create_job(name=name, user=user, team=team, backend="local", spec_json="{}", deadline=None,
                         now=NOW - timedelta(hours=age_h))  # fmt: skip
    return store


def _names(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main(["list", "-o", "json", *args]) == 0
    return [d["name"] for d in json.loads(capsys.readouterr().out)]


def test_list_filters_by_state_user_team_and_since(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _names(capsys) == ["old", "mid", "new"]
    assert _names(capsys, "--user", "ann") == ["old", "mid"]
    assert _names(capsys, "--team", "nlp", "--user", "ann") == ["mid"]
    assert _names(capsys, "--since", "6h") == ["mid", "new"]
    since = (NOW - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")  # no zone: UTC
    assert _names(capsys, "--since", since) == ["new"]
    assert _names(capsys, "--state", "pending") == ["old", "mid", "new"]
    assert _names(capsys, "--state", "RUNNING,succeeded") == []
    assert _names(capsys, "--state", "active") == ["old", "mid", "new"]


def test_a_wrong_filter_says_what_is_accepted(store: JobStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--state", "runing"]) == 2
    err = capsys.readouterr().err
    assert "--state 'runing' is not a job state" in err and "RUNNING" in err and "active" in err
    assert main(["list", "--since", "yesterday"]) == 2
    assert "neither a duration nor a time" in capsys.readouterr().err


def test_watch_prints_the_list_again_until_ctrl_c(
    store: JobStore, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds = []

    def sleep(seconds: float) -> None:
        rounds.append(seconds)
        if len(rounds) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr("orchestrator.cli.job_filters.time.sleep", sleep)
    assert main(["list", "-w", "0.5", "--user", "bob"]) == 0
    out = capsys.readouterr().out
    assert rounds == [0.5, 0.5, 0.5] and out.count("(Ctrl-C to stop)") == 3 and out.count("new") == 3
    assert "\x1b" not in out  # not a terminal: the rounds follow each other, nothing is cleared


def test_every_state_is_accepted_by_name() -> None:
    for state in JobStatus:
        assert job_filters._states([state.value.lower()]) == frozenset({state})


def test_diagnose_without_a_job_names_the_forms_that_work(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose"]) == 2
    err = capsys.readouterr().err
    assert "`gpuctl diagnose JOB`" in err and "--summaries FILE" in err


def test_an_open_attempt_shows_its_time_so_far() -> None:
    start = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)
    seg = {"started_at": start.isoformat(), "ended_at": None}
    assert segment_span(seg, start + timedelta(minutes=3, seconds=12)) == "3m12s so far"
    assert segment_span({**seg, "ended_at": (start + timedelta(hours=1)).isoformat()}) == "1h00m00s"
    assert segment_span({**seg, "started_at": NOW.isoformat()}).endswith("s so far")
