"""`gpuctl logs` of a local job reads its output files in bounded memory and only as regular files
(issue 29, finding 12): a 600 MB log needs no more memory than a small one, a FIFO or a symlink in
place of a log is skipped with a one-line note (never waited on, never followed), and a folder that
is not `attempt-<number>` is skipped with a note."""

from __future__ import annotations

import io
import os
import sys
import threading
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.cli import log_files
from orchestrator.cli.main import build_parser, main
from orchestrator.state.store import JobStore

PEAK_BYTES = 4 << 20
"""What printing a log may hold in memory at most, whatever its size."""


@pytest.fixture
def job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    store = JobStore(tmp_path)
    job = store.create_job(name="big", user="u", team="t", backend="local", spec_json="{}", deadline=None,
                           now=datetime.now(UTC))  # fmt: skip
    return store.job_dir(job.id)


def _log(job_dir: Path, attempt: str = "attempt-1", node: str = "big-n0") -> Path:
    path = job_dir / attempt / node / "output.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _peak_of_logs(job_dir: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, int, str]:
    """Run `gpuctl logs JOB ARGS` with standard output counted, not kept; (exit code, peak bytes, the
    last line printed)."""
    seen = {"lines": 0, "last": ""}

    class Counting(io.TextIOBase):
        def write(self, text: str) -> int:
            if text.strip():
                seen["lines"] += text.count("\n") or 1
                seen["last"] = text.strip().splitlines()[-1]
            return len(text)

    build_parser()  # the command modules are imported before memory is counted
    monkeypatch.setattr("sys.stdout", Counting())
    tracemalloc.start()
    try:
        code = main(["logs", job_dir.name, *args])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        monkeypatch.setattr("sys.stdout", sys.__stdout__)
    return code, peak, str(seen["last"])


def test_a_600_mb_log_is_tailed_in_bounded_memory(job_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _log(job_dir)
    with open(log, "wb") as fh:  # sparse: 600 MB that cost no disk
        fh.truncate(600 << 20)
        fh.seek(0, os.SEEK_END)
        fh.write(b"step 99\nfinished\n")
    code, peak, last = _peak_of_logs(job_dir, monkeypatch, "--tail", "2")
    assert code == 0 and last == "[attempt-1/n0] finished"
    assert peak < PEAK_BYTES, f"peak {peak} bytes"


def test_a_log_is_streamed_in_bounded_memory(job_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    line = b"step %08d loss 0.1234 " + b"x" * 80 + b"\n"
    with open(_log(job_dir), "wb") as fh:
        for block in range(200):  # 20 MB
            fh.write(b"".join(line % (block * 1000 + i) for i in range(1000)))
    code, peak, last = _peak_of_logs(job_dir, monkeypatch)
    assert code == 0 and last.startswith("[attempt-1/n0] step 00199999 loss")
    assert peak < PEAK_BYTES, f"peak {peak} bytes for a 20 MB log"


def test_a_line_longer_than_the_bound_is_printed_in_pieces(
    job_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _log(job_dir).write_bytes(b"a" * (log_files.MAX_LINE * 2 + 10) + b"\nend\n")
    assert main(["logs", job_dir.name]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [len(x) for x in lines[:3]] == [
        len("[attempt-1/n0] ") + n for n in (log_files.MAX_LINE,) * 2 + (10,)
    ]
    assert lines[3] == "[attempt-1/n0] end"


@pytest.mark.parametrize(("lines", "shown"), [(0, []), (1, ["c"]), (2, ["b", "c"]), (9, ["a", "b", "c"])])
def test_tail_shows_the_last_lines(job_dir: Path, capsys: pytest.CaptureFixture[str], lines: int,
                                   shown: list[str]) -> None:  # fmt: skip
    _log(job_dir).write_text("a\nb\nc\n")
    assert main(["logs", job_dir.name, "--tail", str(lines)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"[attempt-1/n0] {x}" for x in shown]


def test_a_fifo_log_is_skipped_with_a_note_not_waited_on(
    job_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(_log(job_dir))
    _log(job_dir, node="big-n1").write_text("from n1\n")
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(main(["logs", job_dir.name])), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "gpuctl logs hung on the FIFO"
    out = capsys.readouterr()
    assert codes == [0] and out.out == "[attempt-1/n1] from n1\n"
    (note,) = out.err.splitlines()
    assert note.startswith("gpuctl: note: skipped ") and "output.log is a FIFO (named pipe)" in note


def test_a_symlinked_log_is_not_followed(
    job_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "someone-elses.txt"
    secret.write_text("their secret\n")
    _log(job_dir).symlink_to(secret)
    assert main(["logs", job_dir.name]) == 0
    out = capsys.readouterr()
    assert "their secret" not in out.out and "is a symbolic link" in out.err


def test_folders_that_are_not_attempts_are_skipped_with_a_note(
    job_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _log(job_dir, "attempt-x").write_text("not gpuctl's\n")
    _log(job_dir, "attempt-10").write_text("tenth\n")
    _log(job_dir, "attempt-2").write_text("second\n")
    assert main(["logs", job_dir.name]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == ["[attempt-2/n0] second", "[attempt-10/n0] tenth"]
    assert "attempt-x: not an attempt-<number> folder" in out.err and len(out.err.splitlines()) == 1
