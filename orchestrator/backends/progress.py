"""Reading the training progress file (format in :mod:`orchestrator.contract`), for every backend."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from orchestrator.backends.base import Progress
from orchestrator.contract import ProgressRecord, read_progress_records

TAIL_BYTES = 16384


def read_progress(path: Path) -> Progress | None:
    """The newest step line of the progress file, with the final metrics if training finished."""
    step_line: ProgressRecord | None = None
    finished: ProgressRecord | None = None
    for record in reversed(read_progress_records(path, TAIL_BYTES)):
        if finished is None and record.event == "finished":
            finished = record
        if record.is_step:
            step_line = record
            break
        if record.event in ("preempted", "resumed"):
            break  # a later attempt started: an older "finished" no longer holds
    base = step_line or finished
    if base is None:
        return None
    step = finished.step if finished is not None and finished.step is not None else base.step
    return Progress(
        step=step or 0,
        total_steps=base.total_steps,
        loss=base.loss,
        world_size=base.world_size,
        finished=finished is not None,
        metrics=dict(finished.metrics) if finished is not None else {},
        time=base.time,
    )


def read_step_times(path: Path) -> list[tuple[datetime, int]]:
    """(time, step) of every step line of the progress file, in file order (for throughput)."""
    return [
        (record.time, record.step)
        for record in read_progress_records(path)
        if record.is_step and record.time is not None and record.step is not None
    ]
