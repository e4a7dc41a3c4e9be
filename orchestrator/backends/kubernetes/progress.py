"""Training progress of a GPUJob: the progress lines of the monitor sidecars' logs, kept in ``status.progress``.

The trainer's runtime writes progress records to a file the pod's monitor sidecar shares; the sidecar
prints them on its stdout (``--progress-file``, lines prefixed :data:`~orchestrator.contract.PROGRESS_LINE_PREFIX`),
in the same log the operator reads for GPU use (:mod:`orchestrator.backends.kubernetes.gpu_usage`), and pushes
them to the operator's intake (:mod:`orchestrator.backends.kubernetes.intake`), so that a pass needs no log read.
``status.progress`` is the newest record seen, in the form of a local job's progress
(:func:`orchestrator.backends.progress.read_progress`):

``step``, ``totalSteps``, ``loss``, ``worldSize`` (of the newest step record), ``finished`` and
``metrics`` (a ``finished`` record after it; a later ``preempted`` or ``resumed`` clears them), ``time``
(ISO 8601, the newest record's, by the trainer's clock).

A record counts only when it is newer than ``time``, so a re-read log (``sinceSeconds`` reaches back)
or the lines of an older pod change nothing; records of several pods are taken in time order. Keys with
no value are left out (a merge patch would delete them, and the status would differ on every pass).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from orchestrator.backends.base import Progress
from orchestrator.contract import PROGRESS_LINE_PREFIX, parse_progress_records
from orchestrator.times import iso_z, parse_iso_or_none

STATUS_KEY = "progress"
_STEP_KEYS = (("step", "step"), ("total_steps", "totalSteps"), ("loss", "loss"), ("world_size", "worldSize"))


def progress_records(log_text: str) -> list[dict[str, Any]]:
    """The valid progress records printed in a monitor log (its other lines, and records that are not
    valid, are skipped: :func:`orchestrator.contract.parse_progress_records`)."""
    prefix = PROGRESS_LINE_PREFIX.strip()
    found = [
        line.strip().removeprefix(prefix) for line in log_text.splitlines() if line.strip().startswith(prefix)
    ]
    return [
        dict(r.fields) for r in parse_progress_records("\n".join(found), "progress lines of a monitor log")
    ]


def record_time(record: Mapping[str, Any]) -> datetime | None:
    return parse_iso_or_none(record.get("time"))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def advance(current: Mapping[str, Any] | None, records: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``status.progress`` after ``records`` (any order, any pods): those newer than it, oldest first."""
    progress = dict(current) if current else None
    seen = record_time(progress) if progress else None
    timed = [(t, r) for r in records if (t := record_time(r)) is not None and (seen is None or t > seen)]
    for t, record in sorted(timed, key=lambda pair: pair[0]):
        event = record.get("event")
        if event is None and _number(record.get("step")):
            progress = {new: record[old] for old, new in _STEP_KEYS if _number(record.get(old))}
            progress["finished"] = False
        elif event == "finished" and _number(record.get("step")):
            metrics = {k: float(v) for k, v in dict(record.get("metrics") or {}).items() if _number(v)}
            progress = {**(progress or {}), "step": record["step"], "finished": True, "metrics": metrics}
            if not metrics:
                del progress["metrics"]
        elif event in ("preempted", "resumed") and progress is not None:
            # a later attempt started: an older "finished" no longer holds; its first step makes it fresh
            progress = {k: v for k, v in progress.items() if k != "metrics"} | {"finished": False}
            continue
        else:
            continue  # checkpoints: no progress of their own
        progress["time"] = iso_z(t)
    return progress


def with_progress(status: Mapping[str, Any], log_texts: Iterable[str]) -> dict[str, Any]:
    """``status`` with ``progress`` advanced by the progress lines of the monitors' logs."""
    records = [r for text in log_texts for r in progress_records(text)]
    progress = advance(status.get(STATUS_KEY), records)
    updated = dict(status)
    if progress is not None:
        updated[STATUS_KEY] = progress
    return updated


def progress_of(status: Mapping[str, Any]) -> Progress | None:
    """The GPUJob's newest progress as the controller sees a local job's; None: no progress line yet."""
    written = status.get(STATUS_KEY)
    if not isinstance(written, Mapping) or not _number(written.get("step")):
        return None
    metrics = written.get("metrics") or {}
    return Progress(
        step=int(written["step"]),
        total_steps=int(written["totalSteps"]) if _number(written.get("totalSteps")) else None,
        loss=float(written["loss"]) if _number(written.get("loss")) else None,
        world_size=int(written["worldSize"]) if _number(written.get("worldSize")) else None,
        finished=bool(written.get("finished")),
        metrics={str(k): float(v) for k, v in metrics.items() if _number(v)}
        if isinstance(metrics, Mapping)
        else {},
        time=record_time(written),
    )
