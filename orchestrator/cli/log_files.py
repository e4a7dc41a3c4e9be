"""`gpuctl logs` of a local or SLURM job: its output files, streamed in bounded memory; how every
backend's lines are shown (:class:`LinePrinter`).

A log file is read in chunks of :data:`CHUNK` bytes and printed line by line, a line longer than
:data:`MAX_LINE` bytes in pieces, so a log of any size needs no more memory than that; ``--tail N``
starts each file at its last N lines, found by reading backwards from its end. A file is opened as a
regular file only (:func:`orchestrator.home.open_regular_file`): a FIFO, a device or a symlink in its
place is skipped with a one-line note, never waited on nor followed. Each line is the job's own
output, shown with newline and tab as they are and any other control character escaped
(:func:`orchestrator.terminal.terminal_text`), so no output can rewrite the terminal.

A line a node headed with its time (:mod:`orchestrator.backends.output_log`: a local node's runner, a
SLURM node's step wrapper) is shown with it, after the line's source:
``[attempt-1/n0] 2026-11-26T07:29:11Z text``; so is a pod's line that the Kubernetes API server
headed with its time (:func:`split_api_time`, for :mod:`orchestrator.cli.kube_jobs`). A torchrun agent's
traceback for a signal it got (the notice, a cancel: :data:`~orchestrator.backends.torchrun.
AGENT_SIGNAL_EXCEPTION`) is shown as one line; any other traceback is shown whole. A traceback is held
until its last line (at most :data:`MAX_HELD_LINES` lines; a longer one is shown whole). ``raw``:
every line as written, time heads and tracebacks included.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from orchestrator.backends.output_log import split_time
from orchestrator.backends.torchrun import AGENT_SIGNAL_EXCEPTION
from orchestrator.errors import NotFoundError, PermanentError
from orchestrator.home import open_regular_file
from orchestrator.state.job_dir import ATTEMPT_PREFIX, OUTPUT_LOG, SLURM_OUTPUT_PREFIX
from orchestrator.terminal import terminal_text

CHUNK = 64 * 1024
MAX_LINE = 64 * 1024
"""Bytes of one printed line: a longer line is printed in pieces of this size."""
MAX_HELD_LINES = 200
"""Lines of a traceback held to see how it ends; a longer one is shown whole."""
MAX_HELD_CHARS = 256 * 1024
"""Characters of a traceback held to see how it ends; a longer one is shown whole."""
TRACEBACK_START = "Traceback (most recent call last):"
_AGENT_SIGNAL = re.compile(re.escape(AGENT_SIGNAL_EXCEPTION) + r": Process (\d+) got signal: (\d+)\s*$")


@dataclass(frozen=True)
class LogView:
    """How lines are shown: with their time (when known), and torchrun's signal tracebacks folded;
    ``raw``: as written."""

    timestamps: bool = True
    raw: bool = False


Line = tuple[datetime | None, str]


@dataclass
class LinePrinter:
    """Shows the lines of one source, each headed by ``prefix`` (and its time), torchrun's signal
    tracebacks folded (:class:`LogView`); ``split`` reads a line's time and text."""

    prefix: str
    view: LogView = field(default_factory=LogView)
    split: Callable[[str], Line] = split_time
    held: list[Line] = field(default_factory=list)
    """The lines of a traceback not yet shown: its end decides whether it is folded."""
    held_chars: int = 0

    def show(self, raw_line: str) -> None:
        """Show one line (decoded, one piece of at most :data:`MAX_LINE` bytes)."""
        if self.view.raw:
            self._print((None, raw_line))
            return
        when, text = self.split(raw_line)
        if self.held:
            if text[:1].isspace():
                self.held.append((when, text))
                self.held_chars += len(text)
                if len(self.held) > MAX_HELD_LINES or self.held_chars > MAX_HELD_CHARS:
                    self.release()
                return
            folded = agent_signal_line(text)
            if folded is not None:
                self.held = [(self.held[0][0], folded)]
                self.release()
                return
            self.release()
        if text == TRACEBACK_START:
            self.held = [(when, text)]
            return
        self._print((when, text))

    def release(self) -> None:
        """Show the lines held (the end of the output, or a traceback that is not the agent's)."""
        held, self.held, self.held_chars = self.held, [], 0
        for line in held:
            self._print(line)

    def _print(self, line: Line) -> None:
        when, text = line
        stamp = (
            f"{when.astimezone(UTC):%Y-%m-%dT%H:%M:%S}Z " if when is not None and self.view.timestamps else ""
        )
        # a carriage return (progress bars) starts a new line rather than overwriting this one
        for part in text.splitlines() or [""]:
            print(terminal_text(self.prefix + stamp + part, multiline=True))


@dataclass
class LogFile:
    """One output file and how far it has been printed (``offset`` None: not read yet)."""

    path: Path
    prefix: str
    offset: int | None = None
    refused: bool = False
    view: LogView = field(default_factory=LogView)
    lines: LinePrinter = field(init=False)

    def __post_init__(self) -> None:
        self.lines = LinePrinter(self.prefix, self.view)

    def show(self, raw_line: str) -> None:
        self.lines.show(raw_line)

    def release(self) -> None:
        self.lines.release()


_API_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d) ")


def split_api_time(line: str) -> Line:
    """``(time, text)`` of a log line a Kubernetes API server headed with its time (``timestamps=true``:
    ``2026-11-26T07:29:11.859123456Z text``, RFC 3339 to the nanosecond); ``(None, line)`` without."""
    found = _API_TIME.match(line)
    if found is None:
        return None, line
    fraction = (found.group(2) or ".")[1:7].ljust(6, "0")
    zone = "+00:00" if found.group(3) == "Z" else found.group(3)
    try:
        moment = datetime.fromisoformat(f"{found.group(1)}.{fraction}{zone}").astimezone(UTC)
    except ValueError:
        return None, line
    return moment, line[found.end() :]


def agent_signal_line(text: str) -> str | None:
    """The one line that stands for a torchrun agent's traceback ending in ``text``; None when
    ``text`` is not the end of one."""
    found = _AGENT_SIGNAL.match(text)
    if found is None:
        return None
    number = int(found.group(2))
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    return (
        f"gpuctl: torchrun agent (pid {found.group(1)}) stopped by {name} (a notice, a cancel or a stop); "
        "its traceback hidden, `gpuctl logs --raw` shows it"
    )


def print_new_lines(log: LogFile, tail: int | None = None, *, final: bool = True) -> None:
    """Print what ``log`` holds past its offset (the first time: from its start, or its last ``tail``
    lines); a file that is not a regular one is noted once on standard error and skipped. ``final``:
    nothing more is read after this, so a traceback held is shown too."""
    try:
        fd = open_regular_file(log.path, os.O_RDONLY)
    except FileNotFoundError:  # gone since listed: nothing to show
        return
    except PermanentError as err:
        if not log.refused:
            print(terminal_text(f"gpuctl: note: skipped {err.what}"), file=sys.stderr)
            log.refused = True
        return
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fd).st_size
        if log.offset is None:
            log.offset = 0 if tail is None else tail_start(fh, size, tail)
        if size < log.offset:  # truncated since: print it again from its start
            log.offset = 0
        fh.seek(log.offset)
        log.offset += _print_from(fh, log)
    if final:
        log.release()


def _print_from(fh: BinaryIO, log: LogFile) -> int:
    """Print the lines from ``fh``'s position to its end; returns the bytes read."""
    read = 0
    pending = b""
    while chunk := fh.read(CHUNK):
        read += len(chunk)
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            log.show(line.decode("utf-8", "replace"))
        while len(pending) >= MAX_LINE:
            log.show(pending[:MAX_LINE].decode("utf-8", "replace"))
            pending = pending[MAX_LINE:]
    if pending:  # a last line without its newline (yet)
        log.show(pending.decode("utf-8", "replace"))
    return read


def tail_start(fh: BinaryIO, size: int, lines: int) -> int:
    """Where the last ``lines`` lines of the file start: read backwards from the end, at most
    ``lines`` x :data:`MAX_LINE` bytes (longer lines are cut there)."""
    if lines <= 0 or size == 0:
        return size
    limit = max(0, size - lines * MAX_LINE)
    fh.seek(size - 1)
    end = size - 1 if fh.read(1) == b"\n" else size  # the newline that ends the last line
    found, pos = 0, end
    while pos > limit:
        start = max(limit, pos - CHUNK)
        fh.seek(start)
        block = fh.read(pos - start)
        at = len(block)
        while (at := block.rfind(b"\n", 0, at)) >= 0:
            found += 1
            if found == lines:
                return start + at + 1
        pos = start
    return limit


@dataclass(frozen=True)
class LogSource:
    """Whose output a file holds: the attempt and node when its path tells (a local node's
    ``attempt-N/NODE/output.log``; a SLURM attempt's ``slurm-attempt-N.out``, all its nodes in one)."""

    attempt: int | None
    node: str | None
    label: str

    @classmethod
    def of(cls, path: Path) -> LogSource:
        attempt = _number_after(ATTEMPT_PREFIX, path.parent.parent.name)
        if attempt is not None and path.name == OUTPUT_LOG:
            node = path.parent.name
            return cls(attempt, node, f"{ATTEMPT_PREFIX}{attempt}/{node.rsplit('-', 1)[-1]}")
        attempt = _number_after(SLURM_OUTPUT_PREFIX, path.name.removesuffix(".out"))
        if attempt is not None:
            return cls(attempt, None, f"{ATTEMPT_PREFIX}{attempt}")
        return cls(None, None, path.name)

    def matches(self, attempt: int | None, node: str | None) -> bool:
        """Of attempt ``attempt`` and node ``node`` (its id, or its short name such as ``n0``)?"""
        if attempt is not None and self.attempt != attempt:
            return False
        return node is None or (self.node is not None and node in (self.node, self.node.rsplit("-", 1)[-1]))


def _number_after(head: str, name: str) -> int | None:
    number = name.removeprefix(head)
    return int(number) if number != name and number.isascii() and number.isdigit() else None


def print_logs(
    paths: Callable[[], list[Path]],
    ended: Callable[[], bool],
    *,
    attempt: int | None = None,
    node: str | None = None,
    view: LogView | None = None,
    tail: int | None = None,
    follow: bool = False,
) -> None:
    """Print the output files ``paths()`` names (of ``attempt`` and ``node`` only, when given), each
    line headed by its source; ``follow``: again every second until ``ended()``."""
    files: dict[Path, LogFile] = {}
    while True:
        done = not follow or ended()  # asked before reading: what was written before it ended is shown
        listed = paths()
        chosen = [p for p in listed if LogSource.of(p).matches(attempt, node)]
        if listed and not chosen and not follow:
            _nothing_of(attempt, node, listed)
        for path in chosen:
            if path not in files:
                files[path] = LogFile(path, f"[{LogSource.of(path).label}] ", view=view or LogView())
            print_new_lines(files[path], tail, final=not follow)
        if done:
            for log in files.values():
                log.release()
            return
        sys.stdout.flush()
        time.sleep(1.0)


def _nothing_of(attempt: int | None, node: str | None, listed: list[Path]) -> None:
    asked = " ".join(part for part in (f"--attempt {attempt}" if attempt is not None else "",
                                       f"--node {node}" if node is not None else "") if part)  # fmt: skip
    sources = ", ".join(LogSource.of(p).label for p in listed)
    raise NotFoundError(
        terminal_text(f"no output of the job matches {asked}; it has: {sources}"),
        "name one of those attempts (--attempt N) and nodes (--node n0); a SLURM attempt's output holds "
        "all its nodes, so --node does not apply to it",
    )
