"""The progress file: JSON lines appended by rank 0 (format in :mod:`orchestrator.contract`).

Each record is one ``os.write`` on an ``O_APPEND`` file. A writer killed mid-record (SIGKILL, node
loss) leaves a torn last line; the next record then starts with a newline, so it never continues
the torn line (which readers skip) and is not lost with it.
"""

from __future__ import annotations

import json
import math
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class ProgressFile:
    """Appends and flushes one JSON object per line; safe to call from the checkpoint thread."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        line = json.dumps({"time": _now(), **{k: _clean(v) for k, v in record.items()}}, sort_keys=False)
        data = (line + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    data = b"\n" + data  # the last record was torn: do not continue its line
                while data:  # one write for a regular file; the loop only guards a short write
                    data = data[os.write(fd, data) :]
            finally:
                os.close(fd)

    def step(
        self,
        step: int,
        total_steps: int | None,
        loss: float | None,
        world_size: int,
        metrics: dict[str, Any],
        data_s: float | None,
        compute_s: float | None,
    ) -> None:
        self.append(
            {
                "step": step,
                "total_steps": total_steps,
                "loss": loss,
                "world_size": world_size,
                "metrics": {k: _clean(v) for k, v in metrics.items()},
                "data_s": data_s,
                "compute_s": compute_s,
            }
        )

    def event(self, event: str, step: int, **extra: Any) -> None:
        self.append({"event": event, "step": step, **extra})
