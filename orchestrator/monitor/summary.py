"""Window summaries: mean, p95 and max of utilization and memory, idle time, SM activity.

One JSON line per window is appended to the summary file; the controller, policies and reports
read it. p95 is the nearest-rank percentile: the ceil(0.95 * n)-th smallest value.
A GPU is idle in a sample when its utilization is below ``idle_threshold_pct`` (default 1 %, i.e.
NVML reported 0 %); it is charged the time since its previous sample (capped at twice the interval,
so a stalled sampler does not invent idle time).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from orchestrator.contract import (
    UNAVAILABLE_KIND,
    WINDOW_KIND,
    BadRecord,
    WindowSummary,
    summary_record,
    window_summary,
)
from orchestrator.contract.fields import warn_once
from orchestrator.monitor.samples import GpuSample

__all__ = [
    "UNAVAILABLE_KIND",
    "WINDOW_KIND",
    "SummaryWriter",
    "WindowAggregator",
    "read_job_windows",
    "read_summaries",
    "read_windows",
    "unavailable_record",
]

DEFAULT_IDLE_THRESHOLD_PCT = 1.0

THROTTLE_REASON_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
"""Clock-event reasons that slow work: SW power cap, HW slowdown, SW/HW thermal, HW power brake."""


def percentile_nearest_rank(values: Sequence[float], q: float) -> float:
    """The ceil(q * n)-th smallest value (q in 0-1); raises ValueError on an empty sequence."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(math.ceil(q * len(ordered)), 1)
    return ordered[rank - 1]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


@dataclass
class _GpuWindow:
    uuid: str
    model: str
    mem_total_bytes: int
    util: list[float] = field(default_factory=list)
    mem_used: list[float] = field(default_factory=list)
    sm_activity: list[float] = field(default_factory=list)
    throttled_samples: int = 0
    idle_seconds: float = 0.0
    last_time: float | None = None

    def summary(self, gpu: int) -> dict[str, Any]:
        return {
            "gpu": gpu,
            "uuid": self.uuid,
            "model": self.model,
            "samples": len(self.util),
            **_stats(self.util, self.mem_used, self.sm_activity),
            "mem_total_bytes": self.mem_total_bytes,
            "idle_seconds": round(self.idle_seconds, 3),
            "throttled_fraction": round(self.throttled_samples / len(self.util), 4),
        }


def _stats(util: Sequence[float], mem: Sequence[float], sm: Sequence[float]) -> dict[str, Any]:
    return {
        "util_mean_pct": round(_mean(util), 3),
        "util_p95_pct": percentile_nearest_rank(util, 0.95),
        "util_max_pct": max(util),
        "mem_used_mean_bytes": round(_mean(mem)),
        "mem_used_p95_bytes": int(percentile_nearest_rank(mem, 0.95)),
        "mem_used_max_bytes": int(max(mem)),
        "sm_activity_mean": round(_mean(sm), 4) if sm else None,
    }


class WindowAggregator:
    """Collects samples; ``add`` returns a finished window's summary when ``window_s`` has passed."""

    def __init__(
        self,
        window_s: float = 60.0,
        interval_s: float = 1.0,
        idle_threshold_pct: float = DEFAULT_IDLE_THRESHOLD_PCT,
        job_id: str | None = None,
    ) -> None:
        self.window_s = window_s
        self.max_gap_s = 2.0 * interval_s if interval_s > 0 else float("inf")
        self.idle_threshold_pct = idle_threshold_pct
        self.job_id = job_id
        self.idle_seconds_total: dict[int, float] = {}
        self._start: float | None = None
        self._last_tick: float | None = None
        self._tick_gap = interval_s
        self._gpus: dict[int, _GpuWindow] = {}
        self._last_time: dict[int, float] = {}

    def add(self, samples: Sequence[GpuSample]) -> dict[str, Any] | None:
        """Record one tick. When the tick reaches the window's end, return the closed window first."""
        if not samples:
            return None
        finished = None
        now = samples[0].time
        if self._last_tick is not None and now > self._last_tick:
            self._tick_gap = now - self._last_tick
        if self._start is not None and now - self._start >= self.window_s:
            finished = self._close(end=now)
        if self._start is None:
            self._start = now
        self._last_tick = now
        for sample in samples:
            self._add_one(sample)
        return finished

    def _add_one(self, sample: GpuSample) -> None:
        window = self._gpus.get(sample.gpu)
        if window is None:
            window = self._gpus[sample.gpu] = _GpuWindow(sample.uuid, sample.model, sample.mem_total_bytes)
        window.util.append(sample.util_pct)
        window.mem_used.append(float(sample.mem_used_bytes))
        if sample.sm_activity is not None:
            window.sm_activity.append(sample.sm_activity)
        if sample.clock_event_reasons & THROTTLE_REASON_MASK:
            window.throttled_samples += 1
        previous = self._last_time.get(sample.gpu)
        self._last_time[sample.gpu] = sample.time
        if previous is not None and sample.util_pct < self.idle_threshold_pct:
            gap = min(max(sample.time - previous, 0.0), self.max_gap_s)
            window.idle_seconds += gap
            self.idle_seconds_total[sample.gpu] = self.idle_seconds_total.get(sample.gpu, 0.0) + gap

    def flush(self) -> dict[str, Any] | None:
        """Close the current window (even if short) and return its summary; None if it is empty.

        The window ends one tick after its last sample (each sample stands for one interval)."""
        if self._last_tick is None:
            return None
        return self._close(end=self._last_tick + self._tick_gap)

    def _close(self, end: float) -> dict[str, Any] | None:
        if self._start is None or not self._gpus:
            return None
        per_gpu = [window.summary(gpu) for gpu, window in sorted(self._gpus.items())]
        windows = list(self._gpus.values())
        record: dict[str, Any] = {
            "kind": WINDOW_KIND,
            "job_id": self.job_id,
            "start": self._start,
            "end": end,
            "duration_s": round(end - self._start, 3),
            "gpus": len(per_gpu),
            "model": windows[0].model,
            **_stats(
                [u for w in windows for u in w.util],
                [m for w in windows for m in w.mem_used],
                [a for w in windows for a in w.sm_activity],
            ),
            "mem_total_bytes": max(w.mem_total_bytes for w in windows),
            "idle_seconds": round(sum(w.idle_seconds for w in windows), 3),
            "idle_threshold_pct": self.idle_threshold_pct,
            "throttled_fraction": round(_mean([g["throttled_fraction"] for g in per_gpu]), 4),
            "per_gpu": per_gpu,
        }
        self._start = None
        self._gpus = {}
        return record


def unavailable_record(job_id: str | None, reason: str, message: str) -> dict[str, Any]:
    """``reason``: ``no_nvml`` or another short token; ``message``: the error, for people."""
    return {
        "kind": UNAVAILABLE_KIND,
        "job_id": job_id,
        "time": time.time(),
        "reason": reason,
        "message": message,
    }


class SummaryWriter:
    """Appends window summaries as JSON lines (one write and flush per line) to a file, a stream, or both.

    The stream is for the Kubernetes sidecar: its stdout is the container log the operator reads."""

    def __init__(self, path: str | Path | None, stream: TextIO | None = None) -> None:
        self.path = None if path is None else Path(path)
        self.stream = stream
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(line)
        if self.stream is not None:
            self.stream.write(line)
            self.stream.flush()


def read_windows(path: str | Path) -> list[WindowSummary]:
    """The valid window summaries of a file, in order. Blank lines and other kinds are skipped; a line
    that is not a JSON object (torn, not UTF-8) or a window that is not valid is skipped with a
    warning, once per file. Raises OSError when the file cannot be read."""
    windows = []
    source = f"GPU monitor summary file {path}"
    lines = Path(path).read_bytes().split(b"\n")
    for number, line in enumerate(lines, 1):
        record = summary_record(line)
        if record is None:
            if line.strip() and number < len(lines):  # a last line without its newline may be mid-write
                warn_once(source, "not a JSON object")
            continue
        if record.get("kind") != WINDOW_KIND:
            continue
        try:
            windows.append(window_summary(record))
        except BadRecord as bad:
            warn_once(source, str(bad))
    return windows


def read_summaries(path: str | Path) -> list[dict[str, Any]]:
    """All valid window summaries of a file, as written (see :func:`read_windows`)."""
    return [dict(window.fields) for window in read_windows(path)]


def read_job_windows(files: Iterable[Path]) -> list[WindowSummary]:
    """The valid windows of a job's summary files; a file that cannot be read is skipped with a warning."""
    windows = []
    for file in files:
        try:
            windows += read_windows(file)
        except OSError as exc:
            warn_once(f"GPU monitor summary file {file}", f"cannot be read: {exc.strerror or exc}")
    return windows
