"""A node's ``output.log``: every line headed by the time its first byte was written.

The node runner (:mod:`orchestrator.backends.local.node_runner`) reads the setup command's and the
torchrun agent's standard output and error through a pipe and writes each line to ``output.log`` as
``2026-11-26T07:29:11.859Z<TAB>the line``: the time in UTC, to the millisecond. A line written in
pieces (a progress bar) keeps the time of its first piece; bytes are written as they arrive, so a
follower sees a line before its newline. ``gpuctl logs`` shows the time (:func:`split_time`); a line
with no such head (a file of an older runner, the runner's own crash) is shown without one.
"""

from __future__ import annotations

import os
import re
import threading
from datetime import UTC, datetime

READ_BYTES = 64 * 1024
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
_HEAD = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z\t")
HEAD_LENGTH = len("2026-11-26T07:29:11.859Z\t")


def time_head(now: datetime) -> bytes:
    """The head of a line written at ``now``."""
    moment = now.astimezone(UTC)
    return f"{moment:{TIME_FORMAT}}.{moment.microsecond // 1000:03d}Z\t".encode()


def split_time(line: str) -> tuple[datetime | None, str]:
    """``(time, text)`` of one line of an ``output.log``; ``(None, line)`` for a line without a head."""
    found = _HEAD.match(line)
    if found is None:
        return None, line
    try:
        moment = datetime.fromisoformat(found.group(1)).replace(tzinfo=UTC)
    except ValueError:
        return None, line
    return moment, line[found.end() :]


class TimedOutput:
    """Writes to ``sink`` (a file descriptor opened for appending) what is written into :attr:`fd`
    (a pipe's writing end, given to child processes), each line headed by its time; and lines of
    the runner's own (:meth:`say`). A write that fails (disk full) is dropped, never blocking the
    children: the pipe is always drained."""

    def __init__(self, sink: int) -> None:
        self.sink = sink
        self._read, self.fd = os.pipe()
        self._lock = threading.Lock()
        self._at_line_start = True
        self._thread = threading.Thread(target=self._pump, name="gpuctl-output", daemon=True)
        self._thread.start()

    def say(self, line: str) -> None:
        """One line of the runner's own, between the children's lines."""
        with self._lock:
            head = b"" if self._at_line_start else b"\n"
            self._write(head + time_head(datetime.now(UTC)) + line.encode() + b"\n")
            self._at_line_start = True

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop writing into the pipe; wait (at most ``timeout_s``: a grandchild may still hold the
        pipe open) for what is in it to be written."""
        os.close(self.fd)
        self._thread.join(timeout_s)

    def _pump(self) -> None:
        while data := os.read(self._read, READ_BYTES):
            with self._lock:
                self._write(self._stamp(data))
        os.close(self._read)

    def _stamp(self, data: bytes) -> bytes:
        out = bytearray()
        for piece in data.splitlines(keepends=True):
            if self._at_line_start:
                out += time_head(datetime.now(UTC))
            out += piece
            self._at_line_start = piece.endswith(b"\n")
        return bytes(out)

    def _write(self, data: bytes) -> None:
        try:
            while data:
                data = data[os.write(self.sink, data) :]
        except OSError:
            pass
