"""The sidecar's copy of the progress file on stdout (``--progress-file``): new records only, torn lines
skipped, step records coalesced, events in order, truncation and restarts survived."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.main import build_parser
from orchestrator.contract import PROGRESS_LINE_PREFIX
from orchestrator.monitor import progress_lines
from orchestrator.monitor.app import run_monitor
from orchestrator.monitor.progress_lines import ProgressFollower
from orchestrator.runtime.progress import ProgressFile
from tests.monitor.monitor_helpers import H100X8


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def printed(out: io.StringIO) -> list[dict[str, Any]]:
    lines = out.getvalue().splitlines()
    assert all(line.startswith(PROGRESS_LINE_PREFIX) for line in lines)
    return [json.loads(line.removeprefix(PROGRESS_LINE_PREFIX)) for line in lines]


def step(writer: ProgressFile, n: int) -> None:
    writer.step(n, 100, 1.0 / n, 16, {}, None, None)


def test_prints_only_new_records_and_coalesces_steps(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    out, clock = io.StringIO(), Clock()
    follower = ProgressFollower(str(path), out, min_interval_s=10.0, clock=clock)
    assert follower.poll() == 0  # no file yet
    writer = ProgressFile(path)
    for n in (1, 2, 3):
        step(writer, n)
    assert follower.poll() == 1
    assert [r["step"] for r in printed(out)] == [3]  # the newest of the three
    step(writer, 4)
    assert follower.poll() == 0  # within the interval: held back
    clock.t = 10.0
    assert follower.poll() == 1
    assert follower.poll() == 0  # nothing new: nothing printed again
    step(writer, 5)
    writer.event("checkpoint", 5)
    step(writer, 6)
    writer.event("finished", 6, metrics={"accuracy": 0.97})
    assert follower.poll() == 4  # events at once, each after the newest step before it
    got = printed(out)
    assert [(r["step"], r.get("event")) for r in got] == [
        (3, None), (4, None), (5, None), (5, "checkpoint"), (6, None), (6, "finished"),
    ]  # fmt: skip
    assert got[-1]["metrics"] == {"accuracy": 0.97} and got[0]["total_steps"] == 100


def test_torn_and_partial_lines(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    out = io.StringIO()
    follower = ProgressFollower(str(path), out, min_interval_s=0.0)
    writer = ProgressFile(path)
    step(writer, 1)
    with open(path, "ab") as handle:
        handle.write(b'{"time": "2026-01-01T00:00:00+00:00", "step": 2, "tot')  # writer killed mid-append
    assert follower.poll() == 1  # the partial line waits
    step(writer, 3)  # the next writer starts a new line: the torn one is skipped
    assert follower.poll() == 1
    assert [r["step"] for r in printed(out)] == [1, 3]


def test_truncated_file_and_restarted_sidecar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "progress.jsonl"
    out = io.StringIO()
    follower = ProgressFollower(str(path), out, min_interval_s=0.0)
    writer = ProgressFile(path)
    for n in range(1, 50):
        step(writer, n)
    follower.poll()
    path.write_text("")  # truncated (a new attempt's file in the same volume)
    step(writer, 1)
    follower.poll()
    assert [r["step"] for r in printed(out)] == [49, 1]
    # A restarted sidecar reads only the file's tail, and its cut first line is skipped.
    monkeypatch.setattr(progress_lines, "START_TAIL_BYTES", 300)
    for n in range(2, 40):
        step(writer, n)
    restarted = io.StringIO()
    ProgressFollower(str(path), restarted, min_interval_s=0.0).poll()
    assert [r["step"] for r in printed(restarted)] == [39]


def test_monitor_prints_progress_lines_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "progress.jsonl"
    writer = ProgressFile(path)
    step(writer, 7)
    writer.event("finished", 7, metrics={"loss": 0.1})
    base = [
        "monitor",
        "--source",
        "replay",
        str(H100X8),
        "--interval",
        "0",
        "--port",
        "-1",
        "--summary-stdout",
    ]
    assert run_monitor(build_parser().parse_args(base), log=lambda _: None) == 0
    assert PROGRESS_LINE_PREFIX not in capsys.readouterr().out
    args = build_parser().parse_args([*base, "--progress-file", str(path), "--max-ticks", "3"])
    assert run_monitor(args, log=lambda _: None) == 0
    lines = capsys.readouterr().out.splitlines()
    progress = [
        json.loads(x.removeprefix(PROGRESS_LINE_PREFIX)) for x in lines if x.startswith(PROGRESS_LINE_PREFIX)
    ]
    assert [(r["step"], r.get("event")) for r in progress] == [(7, None), (7, "finished")]
    assert any(x.startswith("{") for x in lines)  # the window summaries are still there
