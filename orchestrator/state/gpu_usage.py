"""The aggregate of GPU monitor window summaries: pure, no storage (format of a window in docs/monitor.md).

:class:`UsageTotals` holds running sums over windows; :class:`GpuUsage` follows from it. The totals can
be saved as JSON and extended later with more windows, giving the same result as aggregating all
windows at once: the controller's store aggregates its stored windows with it, the Kubernetes operator
keeps one in the GPUJob's status and adds the windows it reads from the monitor sidecars' logs.

Each window is weighted by its GPU-samples. ``util_p95_pct`` is approximate: the sample-weighted 95th
percentile of the windows' p95 values (raw samples are not kept). The totals keep one weight per
distinct p95 value (NVML reports whole percents, so at most 101 of them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.contract import (
    UNAVAILABLE_KIND,
    WINDOW_KIND,
    WindowSummary,
    monitor_unavailable,
    summary_record,
    window_summary,
)

__all__ = [
    "NO_NVML_MESSAGE",
    "UNAVAILABLE_KIND",
    "WINDOW_KIND",
    "GpuUsage",
    "UsageTotals",
    "UsageWindow",
    "aggregate",
    "from_summary",
    "summary_line_record",
    "unavailable_message",
    "usage_window",
]
NO_NVML_MESSAGE = "GPU monitor: no NVML on this machine; utilization not measured"


@dataclass(frozen=True)
class GpuUsage:
    """What the monitors measured for one job, over all its nodes and attempts."""

    windows: int
    samples: int
    """GPU-samples (one per GPU per tick)."""
    model: str
    monitors: int
    """Monitors (one per node, or per node and attempt) that had windows."""
    util_mean_pct: float
    util_p95_pct: float
    util_max_pct: float
    mem_peak_bytes: int
    mem_total_bytes: int
    mem_peak_fraction: float
    sm_activity_mean: float | None
    idle_gpu_hours: float
    measured_gpu_hours: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class UsageWindow:
    """The fields of one window summary that the aggregate needs; ``source`` names its monitor."""

    source: str
    start: float
    duration_s: float
    gpus: int
    model: str
    samples: int
    util_mean_pct: float
    util_p95_pct: float
    util_max_pct: float
    mem_used_max_bytes: int
    mem_total_bytes: int
    sm_activity_mean: float | None
    idle_seconds: float

    @property
    def mem_peak_fraction(self) -> float:
        return self.mem_used_max_bytes / self.mem_total_bytes if self.mem_total_bytes else 0.0


def usage_window(source: str, record: Mapping[str, Any]) -> UsageWindow:
    """The window of a summary line; raises :class:`~orchestrator.contract.BadRecord` (a ValueError)
    for one that is not valid (:func:`orchestrator.contract.window_summary`)."""
    return from_summary(source, window_summary(record))


def from_summary(source: str, window: WindowSummary) -> UsageWindow:
    """The fields of a valid window that the aggregate needs."""
    return UsageWindow(
        source=source,
        start=window.start,
        duration_s=window.duration_s,
        gpus=window.gpus,
        model=window.model,
        samples=window.samples,
        util_mean_pct=window.util_mean_pct,
        util_p95_pct=window.util_p95_pct,
        util_max_pct=window.util_max_pct,
        mem_used_max_bytes=window.mem_used_max_bytes,
        mem_total_bytes=window.mem_total_bytes,
        sm_activity_mean=window.sm_activity_mean,
        idle_seconds=window.idle_seconds,
    )


def unavailable_message(record: Mapping[str, Any]) -> str:
    """The one-line message for an ``unavailable`` summary line (the monitor could not sample)."""
    notice = monitor_unavailable(record)
    if notice.reason == "no_nvml":
        return NO_NVML_MESSAGE
    return f"GPU monitor: {notice.message or 'not running'}; utilization not measured"


def summary_line_record(line: str | bytes) -> dict[str, Any] | None:
    """The JSON object of one summary line; None for a blank line or anything that is not an object."""
    return summary_record(line)


@dataclass
class UsageTotals:
    """Running sums over window summaries; :meth:`add` one window at a time, :meth:`usage` at any point.

    ``monitors`` is counted by the caller (it knows which windows came from a new monitor)."""

    windows: int = 0
    samples: int = 0
    monitors: int = 0
    util_pct_sum: float = 0.0
    """Sum over windows of mean utilization x GPU-samples."""
    util_max_pct: float = 0.0
    util_p95_samples: dict[float, int] = field(default_factory=dict)
    """GPU-samples per window p95 value."""
    mem_peak_bytes: int = 0
    peak_model: str = ""
    peak_mem_used_bytes: int = 0
    peak_mem_total_bytes: int = 0
    """The window with the highest peak memory fraction (the first of equals)."""
    sm_activity_sum: float = 0.0
    sm_samples: int = 0
    idle_seconds: float = 0.0
    gpu_seconds: float = 0.0

    def add(self, window: UsageWindow) -> None:
        peak = self.peak_mem_used_bytes / self.peak_mem_total_bytes if self.peak_mem_total_bytes else 0.0
        if self.windows == 0 or window.mem_peak_fraction > peak:
            self.peak_model = window.model
            self.peak_mem_used_bytes = window.mem_used_max_bytes
            self.peak_mem_total_bytes = window.mem_total_bytes
        self.windows += 1
        self.samples += window.samples
        self.util_pct_sum += window.util_mean_pct * window.samples
        self.util_max_pct = (
            max(self.util_max_pct, window.util_max_pct) if self.windows > 1 else window.util_max_pct
        )
        self.util_p95_samples[window.util_p95_pct] = (
            self.util_p95_samples.get(window.util_p95_pct, 0) + window.samples
        )
        self.mem_peak_bytes = max(self.mem_peak_bytes, window.mem_used_max_bytes)
        if window.sm_activity_mean is not None:
            self.sm_activity_sum += window.sm_activity_mean * window.samples
            self.sm_samples += window.samples
        self.idle_seconds += window.idle_seconds
        self.gpu_seconds += window.duration_s * window.gpus

    def _util_p95(self) -> float:
        rank = max(math.ceil(0.95 * sum(self.util_p95_samples.values())), 1)
        seen = 0
        ordered = sorted(self.util_p95_samples.items())
        for value, weight in ordered:
            seen += weight
            if seen >= rank:
                return value
        return ordered[-1][0]

    def usage(self) -> GpuUsage | None:
        """The aggregate so far; None before the first window."""
        if self.windows == 0 or self.samples == 0:
            return None
        total = self.peak_mem_total_bytes
        return GpuUsage(
            windows=self.windows,
            samples=self.samples,
            model=self.peak_model,
            monitors=self.monitors,
            util_mean_pct=round(self.util_pct_sum / self.samples, 3),
            util_p95_pct=self._util_p95(),
            util_max_pct=self.util_max_pct,
            mem_peak_bytes=self.mem_peak_bytes,
            mem_total_bytes=total,
            mem_peak_fraction=round(self.peak_mem_used_bytes / total, 4) if total else 0.0,
            sm_activity_mean=round(self.sm_activity_sum / self.sm_samples, 4) if self.sm_samples else None,
            idle_gpu_hours=round(self.idle_seconds / 3600.0, 6),
            measured_gpu_hours=round(self.gpu_seconds / 3600.0, 6),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able (the p95 weights become ``[{"pct": value, "samples": n}]``, lowest first)."""
        data = asdict(self)
        data["util_p95_samples"] = [
            {"pct": value, "samples": weight} for value, weight in sorted(self.util_p95_samples.items())
        ]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UsageTotals:
        """The totals saved by :meth:`to_dict`; raises KeyError, TypeError or ValueError if malformed."""
        values = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        values["util_p95_samples"] = {
            float(entry["pct"]): int(entry["samples"]) for entry in data.get("util_p95_samples") or []
        }
        totals = cls(**values)
        for name in ("windows", "samples", "monitors", "mem_peak_bytes", "peak_mem_used_bytes",
                     "peak_mem_total_bytes", "sm_samples"):  # fmt: skip
            setattr(totals, name, int(getattr(totals, name)))
        for name in ("util_pct_sum", "util_max_pct", "sm_activity_sum", "idle_seconds", "gpu_seconds"):
            setattr(totals, name, float(getattr(totals, name)))
        totals.peak_model = str(totals.peak_model)
        return totals


def aggregate(windows: list[UsageWindow]) -> GpuUsage | None:
    """The aggregate of all ``windows`` (``monitors``: their distinct sources); None for none."""
    totals = UsageTotals(monitors=len({w.source for w in windows}))
    for window in windows:
        totals.add(window)
    return totals.usage()
