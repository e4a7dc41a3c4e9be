"""Reading the training progress file (format in :mod:`orchestrator.contract`), for every backend."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from orchestrator.backends.base import Progress
from orchestrator.contract import read_progress_records

TAIL_BYTES = 16384


def read_progress(path: Path) -> Progress | None:
    """The newest step line of the progress file, with the final metrics if training finished."""
    step_line: dict[str, object] | None = None
    finished: dict[str, object] | None = None
    for doc in reversed(read_progress_records(path, TAIL_BYTES)):
        if finished is None and doc.get("event") == "finished":
            finished = doc
        if "event" not in doc and "step" in doc:
            step_line = doc
            break
        if doc.get("event") in ("preempted", "resumed"):
            break  # a later attempt started: an older "finished" no longer holds
    base = step_line or finished
    if base is None:
        return None
    metrics = {k: float(v) for k, v in dict(finished.get("metrics") or {}).items()} if finished else {}  # type: ignore[call-overload]
    return Progress(
        step=int(finished["step"] if finished and "step" in finished else base.get("step", 0)),  # type: ignore[call-overload]
        total_steps=_opt_int(base.get("total_steps")),
        loss=_opt_float(base.get("loss")),
        world_size=_opt_int(base.get("world_size")),
        finished=finished is not None,
        metrics=metrics,
        time=datetime.fromisoformat(str(base["time"])) if base.get("time") else None,
    )


def _opt_int(v: object) -> int | None:
    return int(v) if isinstance(v, int | float) else None


def _opt_float(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) else None


def read_step_times(path: Path) -> list[tuple[datetime, int]]:
    """(time, step) of every step line of the progress file, in file order (for throughput)."""
    points: list[tuple[datetime, int]] = []
    for doc in read_progress_records(path):
        try:
            if "event" not in doc and "step" in doc and doc.get("time"):
                points.append((datetime.fromisoformat(str(doc["time"])), int(doc["step"])))
        except (ValueError, TypeError, AttributeError):
            continue
    return points
