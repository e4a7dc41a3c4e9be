"""The sidecar's copy of the training progress file on its stdout (``--progress-file``), for Kubernetes.

The trainer's runtime appends progress records to a file on a volume the sidecar shares
(:data:`orchestrator.contract.ENV_PROGRESS_FILE`); the operator cannot read that file, but it reads the
sidecar's log. Each poll prints the records appended since the last one, each as
:data:`~orchestrator.contract.PROGRESS_LINE_PREFIX` and the record's JSON on one line.

Cheap on the log: step records (one per training step) are coalesced to the newest, printed at most
once per ``min_interval_s``; event records (``finished``, ``preempted``, ``resumed``, checkpoints) are
printed as they come, after the newest step record before them, so the order holds. A partial last line
(the writer is mid-append) waits for the next poll; a torn line or an invalid record is skipped (the
contract's parser: what is printed is strict JSON with typed fields); a file
that shrank or was replaced is read again from its start; a sidecar (re)started on a large file reads
only its last :data:`START_TAIL_BYTES`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from orchestrator.contract import PROGRESS_LINE_PREFIX, ProgressRecord, parse_progress_records

START_TAIL_BYTES = 65536
"""How much of an existing file a starting follower reads (older records are history the operator saw)."""
MAX_READ_BYTES = 1 << 20
"""At most this much is read per poll (a burst of records is caught up over the next polls)."""


def progress_line(record: Mapping[str, Any]) -> str:
    return PROGRESS_LINE_PREFIX + json.dumps(record, separators=(",", ":"), allow_nan=False)


class ProgressFollower:
    """Follows one progress file; :meth:`poll` each sampling interval, :meth:`flush` at the end."""

    def __init__(
        self,
        path: str,
        out: TextIO,
        min_interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path, self.out, self.min_interval_s, self.clock = path, out, min_interval_s, clock
        self.offset: int | None = None  # None: not opened yet (start at the tail)
        self.inode: int | None = None
        self.pending: ProgressRecord | None = None
        """The newest step record not printed yet."""
        self.last_printed_at: float | None = None

    def poll(self) -> int:
        """Print what is due of the records appended since the last poll; returns how many lines."""
        printed = 0
        for record in self._new_records():
            if record.event is None:
                self.pending = record
                continue
            printed += self._print_pending()
            self._print(record)
            printed += 1
        if self.pending is not None and (
            self.last_printed_at is None or self.clock() - self.last_printed_at >= self.min_interval_s
        ):
            printed += self._print_pending()
        return printed

    def flush(self) -> int:
        """Print the newest step record still held back (the sidecar is stopping)."""
        return self._print_pending()

    def _print_pending(self) -> int:
        if self.pending is None:
            return 0
        record, self.pending = self.pending, None
        self._print(record)
        return 1

    def _print(self, record: ProgressRecord) -> None:
        self.out.write(progress_line(record.fields) + "\n")
        self.out.flush()
        self.last_printed_at = self.clock()

    def _new_records(self) -> list[ProgressRecord]:
        try:
            with open(self.path, "rb") as handle:
                info = os.fstat(handle.fileno())
                if self.offset is None:
                    self.offset = max(0, info.st_size - START_TAIL_BYTES)  # a cut first line is skipped
                elif info.st_ino != self.inode or info.st_size < self.offset:
                    self.offset = 0  # replaced or truncated: a new file
                self.inode = info.st_ino
                handle.seek(self.offset)
                data = handle.read(MAX_READ_BYTES)
        except OSError:
            return []  # not written yet (or gone): nothing new
        complete = data.rfind(b"\n") + 1  # a partial last line waits for the rest
        if complete == 0 and len(data) == MAX_READ_BYTES:
            complete = len(data)  # one line longer than a read: skip it
        self.offset += complete
        return parse_progress_records(data[:complete], f"progress file {self.path}")
