"""A node's output, every line headed with the time it was written (issue 32, item 4): the local node
runner's ``output.log`` and the stand-alone writer a SLURM node's step wrapper runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.backends.output_log import TimedOutput, split_time, time_head


def test_a_head_reads_back_as_its_time() -> None:
    moment = datetime(2026, 11, 26, 7, 29, 11, 859_000, tzinfo=UTC)
    line = time_head(moment).decode() + "step 4\tloss 0.1"
    assert split_time(line) == (moment, "step 4\tloss 0.1")
    assert split_time("2026-11-26T07:29:11 no head") == (None, "2026-11-26T07:29:11 no head")


def test_children_and_the_runner_write_timed_lines_a_piece_at_a_time(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    before = datetime.now(UTC) - timedelta(seconds=1)
    sink = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    out = TimedOutput(sink)
    child = "import sys, time; print('one'); sys.stdout.write('two, '); sys.stdout.flush(); " \
            "time.sleep(0.2); print('in pieces'); print('err', file=sys.stderr)"  # fmt: skip
    subprocess.run([sys.executable, "-c", child], stdout=out.fd, stderr=out.fd, check=True)
    out.say("gpuctl: the runner's own line")
    out.close()
    os.close(sink)
    lines = [split_time(line) for line in log.read_text().splitlines()]
    assert [text for _, text in lines] == ["one", "two, in pieces", "err", "gpuctl: the runner's own line"]
    for when, _ in lines:
        assert when is not None and before <= when <= datetime.now(UTC)


def test_output_is_drained_when_the_log_cannot_be_written(tmp_path: Path) -> None:
    """A full disk never blocks the trainer: what cannot be written is dropped."""
    sink = os.open(tmp_path / "output.log", os.O_RDONLY | os.O_CREAT)  # every write fails
    out = TimedOutput(sink)
    child = "import sys; sys.stdout.write('x' * 4_000_000)"  # far more than a pipe holds
    subprocess.run([sys.executable, "-c", child], stdout=out.fd, check=True, timeout=30)
    out.close()
    os.close(sink)


def test_the_stand_alone_writer_times_its_input_and_outlives_the_signals_of_a_step() -> None:
    writer = subprocess.Popen([sys.executable, "-m", "orchestrator.backends.output_log"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    assert writer.stdin is not None and writer.stdout is not None
    writer.stdin.write(b"before\n")
    writer.stdin.flush()
    assert split_time(writer.stdout.readline().decode())[1] == "before\n"  # it runs, its handlers set
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        writer.send_signal(sig)
    writer.stdin.write(b"after the notice, ")
    writer.stdin.flush()
    writer.stdin.write(b"in pieces\nlast line, no newline")
    out, _ = writer.communicate(timeout=30)
    assert writer.returncode == 0
    assert [split_time(line)[1] for line in out.decode().splitlines()] == ["after the notice, in pieces",
                                                                           "last line, no newline"]  # fmt: skip
    assert all(split_time(line)[0] is not None for line in out.decode().splitlines())
