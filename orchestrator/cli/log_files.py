"""`gpuctl logs` of a local or SLURM job: its output files, streamed in bounded memory.

A log file is read in chunks of :data:`CHUNK` bytes and printed line by line, a line longer than
:data:`MAX_LINE` bytes in pieces, so a log of any size needs no more memory than that; ``--tail N``
starts each file at its last N lines, found by reading backwards from its end. A file is opened as a
regular file only (:func:`orchestrator.home.open_regular_file`): a FIFO, a device or a symlink in its
place is skipped with a one-line note, never waited on nor followed. Each line is the job's own
output, shown with newline and tab as they are and any other control character escaped
(:func:`orchestrator.terminal.terminal_text`), so no output can rewrite the terminal.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from orchestrator.errors import PermanentError
from orchestrator.home import open_regular_file
from orchestrator.terminal import terminal_text

CHUNK = 64 * 1024
MAX_LINE = 64 * 1024
"""Bytes of one printed line: a longer line is printed in pieces of this size."""


@dataclass
class LogFile:
    """One output file and how far it has been printed (``offset`` None: not read yet)."""

    path: Path
    prefix: str
    offset: int | None = None
    refused: bool = False


def print_new_lines(log: LogFile, tail: int | None = None) -> None:
    """Print what ``log`` holds past its offset (the first time: from its start, or its last ``tail``
    lines); a file that is not a regular one is noted once on standard error and skipped."""
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
        log.offset += _print_from(fh, log.prefix)


def _print_from(fh: BinaryIO, prefix: str) -> int:
    """Print the lines from ``fh``'s position to its end; returns the bytes read."""
    read = 0
    pending = b""
    while chunk := fh.read(CHUNK):
        read += len(chunk)
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            _print_line(prefix, line)
        while len(pending) >= MAX_LINE:
            _print_line(prefix, pending[:MAX_LINE])
            pending = pending[MAX_LINE:]
    if pending:  # a last line without its newline (yet)
        _print_line(prefix, pending)
    return read


def _print_line(prefix: str, line: bytes) -> None:
    # a carriage return (progress bars) starts a new line rather than overwriting this one
    for part in line.decode("utf-8", "replace").splitlines() or [""]:
        print(terminal_text(prefix + part, multiline=True))


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
