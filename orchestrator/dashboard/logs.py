"""The tail of a job's output files for the job page, read as `gpuctl logs --tail` reads them.

Each file is opened as a regular file only (a FIFO, a device or a symlink in its place is named and
skipped, never waited on), its last lines are found by :func:`orchestrator.cli.log_files.tail_start`
(reading backwards, at most ``lines`` x ``MAX_LINE`` bytes), and at most :data:`MAX_TAIL_BYTES` are
read from there; a line longer than ``MAX_LINE`` bytes is cut into pieces. Control characters are
shown escaped (:func:`orchestrator.terminal.terminal_text`); the page escapes the rest (HTML).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.cli.log_files import MAX_LINE, tail_start
from orchestrator.errors import PermanentError
from orchestrator.home import open_regular_file
from orchestrator.terminal import terminal_text

TAIL_LINES = 40
"""Lines shown per output file."""
MAX_TAIL_BYTES = 256 * 1024
"""Bytes read per output file, whatever its lines."""


@dataclass(frozen=True)
class LogTail:
    """The last lines of one output file (``note``: why it was not read, else None)."""

    source: str
    lines: list[str]
    note: str | None = None

    def as_json(self) -> dict[str, object]:
        return {"source": self.source, "lines": self.lines, "note": self.note}


def source_name(path: Path) -> str:
    """``attempt-1/node-0`` for ``.../attempt-1/node-0/output.log`` (as `gpuctl logs` prefixes lines)."""
    return f"{path.parent.parent.name}/{path.parent.name}"


def tail_file(path: Path, lines: int = TAIL_LINES) -> LogTail:
    """The last ``lines`` lines of ``path``, in bounded memory."""
    source = source_name(path)
    try:
        fd = open_regular_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return LogTail(source, [], "not written yet")
    except PermanentError as err:
        return LogTail(source, [], f"skipped {err.what}")
    except OSError as exc:
        return LogTail(source, [], f"cannot be read: {exc.strerror}")
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fd).st_size
        start = max(tail_start(fh, size, lines), size - MAX_TAIL_BYTES)
        fh.seek(start)
        data = fh.read(size - start)
    return LogTail(source, _lines(data)[-lines:] if lines > 0 else [])


def _lines(data: bytes) -> list[str]:
    out: list[str] = []
    for raw in data.split(b"\n"):
        for at in range(0, max(len(raw), 1), MAX_LINE):
            # a carriage return (progress bars) starts a new line, as in `gpuctl logs`
            out.extend(
                terminal_text(p, multiline=True)
                for p in raw[at : at + MAX_LINE].decode("utf-8", "replace").splitlines()
            )
    return out
