"""The GPU monitor's summary lines (format in docs/monitor.md), read into :class:`WindowSummary` and
:class:`MonitorUnavailable`: the one parser of every reader (the controller's store, the Kubernetes
operator, cost reports, diagnosis). A monitor runs on the job's nodes beside its code, so its lines are
untrusted: a line that is not a JSON object, a window whose fields have the wrong type, a non-finite
number anywhere or a number out of range is refused (:class:`~orchestrator.contract.fields.BadRecord`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from orchestrator.contract.fields import (
    MAX_COUNT,
    MAX_EPOCH,
    MAX_SECONDS,
    BadRecord,
    json_object,
    real,
    require_finite,
    text,
    whole,
)

WINDOW_KIND = "gpuctl.monitor.window"
UNAVAILABLE_KIND = "gpuctl.monitor.unavailable"
"""A summary-file line written instead of windows when the monitor cannot sample (e.g. no NVML)."""
MAX_GPUS = 1 << 16
"""GPUs of one node's monitor."""
MAX_BYTES = 1 << 60
MAX_GPU_SECONDS = MAX_SECONDS * MAX_GPUS
MAX_MESSAGE = 300
"""Characters of an ``unavailable`` line's message that are kept."""
_OPTIONAL_BYTES = ("mem_used_mean_bytes", "mem_used_p95_bytes")
_T = TypeVar("_T")


@dataclass(frozen=True)
class WindowSummary:
    """One valid window summary: what the readers use, typed and bounded."""

    start: float
    """Epoch seconds, as every time of a window."""
    end: float
    duration_s: float
    gpus: int
    model: str
    samples: int
    """GPU-samples: the sum over ``per_gpu``, else ``gpus``."""
    util_mean_pct: float
    util_p95_pct: float
    util_max_pct: float
    mem_used_max_bytes: int
    mem_total_bytes: int
    sm_activity_mean: float | None
    idle_seconds: float
    """GPU-seconds below the idle threshold, summed over the window's GPUs."""
    throttled_fraction: float | None
    job_id: str | None
    fields: Mapping[str, Any] = field(default_factory=dict)
    """The line's object as written: strict JSON (every number in it is finite)."""


@dataclass(frozen=True)
class MonitorUnavailable:
    """An ``unavailable`` line: the monitor could not sample (``reason`` ``no_nvml`` or another token)."""

    reason: str
    message: str


def summary_record(line: str | bytes) -> dict[str, Any] | None:
    """The JSON object of one summary line; None for a blank line or anything that is not an object
    (a torn line, bytes that are not UTF-8, the sidecar's own messages in a Kubernetes log)."""
    return json_object(line) if line.strip() else None


def window_summary(record: Mapping[str, Any]) -> WindowSummary:
    """The typed window of a ``gpuctl.monitor.window`` object; raises :class:`BadRecord` for a bad one."""
    require_finite(record)
    start = _required(real(record, "start", 0.0, MAX_EPOCH, required=True))
    duration = _required(real(record, "duration_s", 0.0, MAX_SECONDS, required=True))
    end = real(record, "end", start, MAX_EPOCH)
    gpus = _required(whole(record, "gpus", 0, MAX_GPUS, required=True))
    for name in _OPTIONAL_BYTES:
        whole(record, name, 0, MAX_BYTES)
    real(record, "idle_threshold_pct", 0.0, 100.0)
    return WindowSummary(
        start=start,
        end=start + duration if end is None else end,
        duration_s=duration,
        gpus=gpus,
        model=text(record, "model", "") or "",
        samples=_samples(record.get("per_gpu")) or gpus,
        util_mean_pct=_percent(record, "util_mean_pct"),
        util_p95_pct=_percent(record, "util_p95_pct"),
        util_max_pct=_percent(record, "util_max_pct"),
        mem_used_max_bytes=_required(whole(record, "mem_used_max_bytes", 0, MAX_BYTES, required=True)),
        mem_total_bytes=_required(whole(record, "mem_total_bytes", 0, MAX_BYTES, required=True)),
        sm_activity_mean=real(record, "sm_activity_mean", 0.0, 1.0),
        idle_seconds=_required(real(record, "idle_seconds", 0.0, MAX_GPU_SECONDS, required=True)),
        throttled_fraction=real(record, "throttled_fraction", 0.0, 1.0),
        job_id=text(record, "job_id"),
        fields=dict(record),
    )


def _required(value: _T | None) -> _T:
    if value is None:  # whole()/real() with required=True never return None
        raise BadRecord("a required field is missing")
    return value


def _percent(record: Mapping[str, Any], key: str) -> float:
    return _required(real(record, key, 0.0, 100.0, required=True))


def _samples(per_gpu: Any) -> int:
    """GPU-samples of a window's ``per_gpu`` list (0 when absent)."""
    if per_gpu is None:
        return 0
    if not isinstance(per_gpu, list) or len(per_gpu) > MAX_GPUS:
        raise BadRecord(f"per_gpu must be a list of at most {MAX_GPUS} objects")
    total = 0
    for index, gpu in enumerate(per_gpu):
        if not isinstance(gpu, Mapping):
            raise BadRecord("per_gpu must be a list of objects")
        try:
            total += whole(gpu, "samples", 0, MAX_COUNT) or 0
        except BadRecord as bad:
            raise BadRecord(f"per_gpu[{index}].{bad}") from None
    if total > MAX_COUNT:
        raise BadRecord(f"per_gpu samples must add up to at most {MAX_COUNT}")
    return total


def monitor_unavailable(record: Mapping[str, Any]) -> MonitorUnavailable:
    """An ``unavailable`` object; a field that is not a string reads as absent."""
    reason, message = record.get("reason"), record.get("message")
    return MonitorUnavailable(
        reason=reason if isinstance(reason, str) else "",
        message=message[:MAX_MESSAGE] if isinstance(message, str) else "",
    )
