"""A user or team name that looks like rich markup is shown as it is, in every table gpuctl prints;
it neither styles the output nor breaks it for everyone sharing the home."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cli.main import main
from orchestrator.cli.views import live_table
from orchestrator.state.store import JobStore
from orchestrator.testing.states import SPOT, running_job

USER = "[bold red]x[/bold red]"
TEAM = "[/oops]"
NOW = datetime.now(UTC) - timedelta(hours=1)
PLACEMENT = replace(SPOT, zone="[green]use1-az1")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")  # one line per row: the names are not wrapped
    store = JobStore(tmp_path)
    running_job(store, NOW, name="markup", user=USER, team=TEAM, placement=PLACEMENT)
    return tmp_path


def test_list_shows_names_literally(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert USER in out and TEAM in out


@pytest.mark.parametrize(("by", "name"), [("user", USER), ("team", TEAM)])
def test_cost_report_shows_names_literally(home: Path, capsys: pytest.CaptureFixture[str], by: str,
                                           name: str) -> None:  # fmt: skip
    assert main(["cost", "report", "--by", by]) == 0
    assert name in capsys.readouterr().out
    assert main(["cost", "report", "--by", by, "--out", str(home / "r.txt")]) == 0
    assert name in (home / "r.txt").read_text()


def test_live_panel_shows_values_literally(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "markup", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    console = Console(width=200, record=True, file=None)
    with console.capture() as captured:
        console.print(live_table(doc, waiting_reason="no capacity in [b]us-east-1[/b]"))
    text = captured.get()
    assert "no capacity in [b]us-east-1[/b]" in text and "[green]use1-az1" in text
    assert "[simulated]" in text, "the local backend's note, once lost as an unknown style"
