"""A node's output with every line headed by the time its first byte was written, for every backend.

The local node runner (:mod:`orchestrator.backends.local.node_runner`, through :class:`TimedOutput`)
and each node of a SLURM job (the step wrapper of :mod:`orchestrator.backends.slurm.script` runs
``python3 -m orchestrator.backends.output_log``: :func:`main`) write each line of the setup command's,
the torchrun agent's and their own output as ``2026-11-26T07:29:11.859Z<TAB>the line``: the time in
UTC, to the millisecond. A line written in pieces (a progress bar) keeps the time of its first piece;
bytes are written as they arrive, so a follower sees a line before its newline and nothing read is
held back when the node is killed. ``gpuctl logs`` shows the time (:func:`split_time`); a line with
no such head (a file of an older gpuctl, the SLURM batch shell's own lines) is shown without one.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from datetime import UTC, datetime

READ_BYTES = 64 * 1024
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
_HEAD = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z\t")
HEAD_LENGTH = len("2026-11-26T07:29:11.859Z\t")
IGNORED_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
"""What the stand-alone writer (:func:`main`) ignores: SLURM signals every process of a step (the
notice, a cancel), and the writer must outlive the launcher to write its last lines; it ends when
everything that writes into it has closed its pipe (or with SIGKILL)."""


def time_head(now: datetime) -> bytes:
    """The head of a line written at ``now``."""
    moment = now.astimezone(UTC)
    return f"{moment:{TIME_FORMAT}}.{moment.microsecond // 1000:03d}Z\t".encode()


def split_time(line: str) -> tuple[datetime | None, str]:
    """``(time, text)`` of one line of a node's output; ``(None, line)`` for a line without a head."""
    found = _HEAD.match(line)
    if found is None:
        return None, line
    try:
        moment = datetime.fromisoformat(found.group(1)).replace(tzinfo=UTC)
    except ValueError:
        return None, line
    return moment, line[found.end() :]


class LineStamper:
    """Heads each line of a stream of bytes, given in pieces, with the time its first piece came."""

    def __init__(self) -> None:
        self.at_line_start = True

    def stamp(self, data: bytes) -> bytes:
        out = bytearray()
        for piece in data.splitlines(keepends=True):
            if self.at_line_start:
                out += time_head(datetime.now(UTC))
            out += piece
            self.at_line_start = piece.endswith(b"\n")
        return bytes(out)


def write_all(sink: int, data: bytes) -> None:
    """Write ``data`` to ``sink``; a write that fails (disk full, a closed reader) is dropped."""
    try:
        while data:
            data = data[os.write(sink, data) :]
    except OSError:
        pass


class TimedOutput:
    """Writes to ``sink`` (a file descriptor opened for appending) what is written into :attr:`fd`
    (a pipe's writing end, given to child processes), each line headed by its time; and lines of
    the runner's own (:meth:`say`). A write that fails (disk full) is dropped, never blocking the
    children: the pipe is always drained."""

    def __init__(self, sink: int) -> None:
        self.sink = sink
        self._read, self.fd = os.pipe()
        self._lock = threading.Lock()
        self._stamper = LineStamper()
        self._thread = threading.Thread(target=self._pump, name="gpuctl-output", daemon=True)
        self._thread.start()

    def say(self, line: str) -> None:
        """One line of the runner's own, between the children's lines."""
        with self._lock:
            head = b"" if self._stamper.at_line_start else b"\n"
            write_all(self.sink, head + time_head(datetime.now(UTC)) + line.encode() + b"\n")
            self._stamper.at_line_start = True

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop writing into the pipe; wait (at most ``timeout_s``: a grandchild may still hold the
        pipe open) for what is in it to be written."""
        os.close(self.fd)
        self._thread.join(timeout_s)

    def _pump(self) -> None:
        while data := os.read(self._read, READ_BYTES):
            with self._lock:
                write_all(self.sink, self._stamper.stamp(data))
        os.close(self._read)


def copy_timed(source: int, sink: int) -> None:
    """Copy ``source`` to ``sink`` until its end, each line headed by its time."""
    stamper = LineStamper()
    while True:
        try:
            data = os.read(source, READ_BYTES)
        except InterruptedError:  # pragma: no cover - Python retries reads itself (PEP 475)
            continue
        if not data:
            return
        write_all(sink, stamper.stamp(data))


def main() -> int:
    """Standard input to standard output, each line timed, until the input ends; signals that
    SLURM sends a step are ignored (:data:`IGNORED_SIGNALS`)."""
    for name in IGNORED_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    copy_timed(sys.stdin.fileno(), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
