"""The output contract of every command: `-o table|json` wherever data is printed, and tables that fit an
80-column terminal without cutting job ids or states (optional columns go instead; `-o wide` has all)."""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cli.main import build_parser, main
from orchestrator.cli.output import Column, fitted_table
from orchestrator.cli.views import JOB_COLUMNS
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing.states import drive, through

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield " ".join((*path, name)), sub
                yield from commands(sub, (*path, name))


def output_option(parser: argparse.ArgumentParser) -> argparse.Action | None:
    return next((a for a in parser._actions if "-o" in a.option_strings), None)


def test_every_command_with_o_offers_table_and_json_with_table_the_default() -> None:
    found = {}
    for name, parser in commands(build_parser()):
        option = output_option(parser)
        if option is not None:
            found[name] = option
            assert option.dest == "output" and "--output" in option.option_strings, name
            assert {"table", "json"} <= set(option.choices or ()), f"gpuctl {name} -o {option.choices}"
            assert option.default == "table", name
    # the commands that print data all have it
    wanted = {"list", "status", "events", "gpus", "diagnose", "simulate", "cost report", "monitor"}
    assert wanted <= set(found), sorted(wanted - set(found))
    assert "wide" in (found["list"].choices or ())


def test_backend_flags_are_grouped_under_their_backend() -> None:
    parser = dict(commands(build_parser()))["status"]
    groups = {g.title: [a.dest for a in g._group_actions] for g in parser._action_groups}
    assert groups["Kubernetes (--backend kubernetes)"] == ["namespace"]
    assert groups["SLURM (--backend slurm)"] == ["cluster_config"]


@pytest.fixture
def long_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    store = JobStore(tmp_path)
    job = store.create_job(name="quickstart-mnist-resnet", user="someone-long", team="research-vision",
                           backend="local", spec_json="{}", deadline=None, now=NOW)  # fmt: skip
    drive(store, job.id, NOW, *through(JobStatus.PLACING, JobStatus.CANCELLED, message="by hand"))
    return job.id


def test_list_in_80_columns_keeps_the_whole_id_and_state(
    long_job: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert long_job in out and "CANCELLED" in out and "…" not in out, out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "COST USD" in out and "TEAM" not in out  # the least needed column went first
    assert main(["list", "-o", "wide"]) == 0
    wide = capsys.readouterr().out
    assert "TEAM" in wide and "research-vision" in wide and "FAILURE" in wide


def test_list_to_a_pipe_keeps_every_default_column(long_job: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "TEAM" in out and "research-vision" in out and "FAILURE" not in out


def test_fitted_table_in_a_narrow_console_never_cuts_kept_columns() -> None:
    rows = [{"id": "quickstart-mnist-9f2c1a", "state": "SUCCEEDED", "x": "y" * 30}]
    columns = [Column("ID", lambda r: r["id"]), Column("STATE", lambda r: r["state"]),
               Column("X", lambda r: r["x"], drop=1)]  # fmt: skip
    for width in (80, 40):
        console = Console(file=io.StringIO(), width=width)
        console.print(fitted_table(columns, rows, width))
        text = console.file.getvalue()  # type: ignore[attr-defined]
        assert "quickstart-mnist-9f2c1a" in text and "SUCCEEDED" in text
        assert ("y" * 30 in text) == (width == 80)


def test_job_columns_keep_id_and_state_only() -> None:
    assert [c.header for c in JOB_COLUMNS if c.drop is None] == ["ID", "STATE"]


def test_events_json(long_job: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", long_job, "-o", "json"]) == 0
    events = json.loads(capsys.readouterr().out)
    assert [e["kind"] for e in events] == ["transition"] * 3 and "CANCELLED" in events[-1]["message"]
    assert set(events[0]) == {"time", "kind", "message"}


def test_events_of_a_slurm_job_without_controller_say_where_to_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    assert main(["events", "sbatch-only", "--backend", "slurm"]) == 2
    err = capsys.readouterr().err
    assert "controller's store" in err and "gpuctl status JOB --backend slurm" in err
