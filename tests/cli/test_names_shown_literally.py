"""A user or team name that looks like rich markup is shown as it is, in every table gpuctl prints;
it neither styles the output nor breaks it for everyone sharing the home."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cli.main import main
from orchestrator.cli.views import live_table
from orchestrator.state.store import JobStore, StoreWrites

USER = "[bold red]x[/bold red]"
TEAM = "[/oops]"
NOW = datetime.now(UTC) - timedelta(hours=1)
PLACEMENT = {
    "gpu_type": "V100", "instance_type": "p3.2xlarge", "market": "spot", "cloud": "aws", "region": "us-east-1",
    "zone": "[green]use1-az1", "gpus_per_node": 1, "node_price_usd_per_hour": 1.0,
    "on_demand_node_price_usd_per_hour": 3.0, "price_source": "test",
}  # fmt: skip


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")  # one line per row: the names are not wrapped
    store = JobStore(tmp_path)
    job_id = store.create_job(
        name="markup", user=USER, team=TEAM, backend="local", spec_json="{}", deadline=None, now=NOW
    ).id
    with store.transaction() as conn:
        StoreWrites.open_segment(conn, job_id, 1, PLACEMENT, 1, NOW)
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
