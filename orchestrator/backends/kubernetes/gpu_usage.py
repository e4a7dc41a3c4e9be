"""GPU use of a GPUJob: the monitor sidecars' window summaries, read from their container logs.

Each pod's monitor sidecar prints every window summary as one JSON line on stdout
(``--summary-stdout``; its own messages go to stderr, which the log interleaves and the parser skips).
On every reconcile the operator takes the lines each started pod's monitor pushed to its intake
(:mod:`orchestrator.backends.kubernetes.intake`), or reads the pod's ``monitor`` log when it must
(:func:`read_monitor_logs`: no intake, the catch-up after a start, a monitor that does not push); the
progress lines go to :mod:`orchestrator.backends.kubernetes.progress`, and the windows not taken yet are added to
running totals kept in the GPUJob's status. Status keys:

- ``gpuUsage``: the aggregate, the same fields as ``gpu_usage`` of a local job (``gpuctl status``);
- ``gpuUsageTotals``: the running sums it follows from (:class:`~orchestrator.state.gpu_usage.UsageTotals`);
- ``gpuMonitors``: per monitor (pod name and uid) the end time of the last window taken;
- ``gpuMonitorMessage``: why a monitor measures nothing (e.g. no NVML on the node), once one said so;
- ``gpuActivity``: when the job's GPUs were last measured and last busy (``measuredUntil``,
  ``busyUntil``, epoch seconds; ``utilPct`` of the newest window), for the idle watchdog
  (:func:`gpu_activity`), as :meth:`UsageStore.activity <orchestrator.state.usage.UsageStore.activity>`
  gives it on the other backends.

Nothing counts twice: a window counts only if it ends after its monitor's last taken window, and the
totals and those end times are written in one status patch. A restarted operator, or one whose patch
failed, carries on from the status. Logs are read with ``sinceSeconds`` reaching back to the last taken
window plus :data:`CLOCK_SKEW_MARGIN_S` (window times come from the node's clock); lines read again are
dropped by the end-time check. Windows are lost, not double counted, when a pod is deleted before its
last lines are read, when the kubelet rotated the log past unread lines, or when the sidecar restarted
(only the current container's log is read).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.manifests import LABEL_ATTEMPT, MONITOR
from orchestrator.errors import GpuctlError, NotFoundError
from orchestrator.state.gpu_usage import (
    UNAVAILABLE_KIND,
    WINDOW_KIND,
    UsageTotals,
    summary_line_record,
    unavailable_message,
    usage_window,
)
from orchestrator.state.watch import IDLE_UTIL_PCT, GpuActivity

log = logging.getLogger(__name__)

CLOCK_SKEW_MARGIN_S = 60
"""Extra seconds of log read before the last taken window's end (node and operator clocks differ)."""
LOGGED_PHASES = frozenset({"Running", "Succeeded", "Failed"})
"""Pod phases whose containers have started, so a log exists."""
STATUS_KEYS = ("gpuUsage", "gpuUsageTotals", "gpuMonitors", "gpuMonitorMessage", "gpuActivity")


def monitor_key(pod: Mapping[str, Any]) -> str:
    """Which monitor a pod's sidecar is: the pod's name and uid (names repeat across attempts)."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid") or f"attempt-{(meta.get('labels') or {}).get(LABEL_ATTEMPT, '0')}"
    return f"{meta.get('name')}/{uid}"


def since_seconds(last_end: float | None, now: datetime) -> int | None:
    """How far back to read a monitor's log: to its last taken window and the margin; None: all."""
    if last_end is None:
        return None
    return max(math.ceil(now.timestamp() - last_end), 1) + CLOCK_SKEW_MARGIN_S


@dataclass
class MonitorLedger:
    """The windows taken so far: their totals, each monitor's last window end, and a monitor's message."""

    totals: UsageTotals = field(default_factory=UsageTotals)
    last_ends: dict[str, float] = field(default_factory=dict)
    message: str | None = None
    activity: dict[str, float] = field(default_factory=dict)
    """``measuredUntil``, ``busyUntil`` (absent: never busy) and ``utilPct`` (see ``gpuActivity``)."""

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> MonitorLedger:
        """The ledger saved in a GPUJob status (an unreadable one starts over, with a warning)."""
        try:
            totals = UsageTotals.from_dict(dict(status.get("gpuUsageTotals") or {}))
            last_ends = {
                str(m["monitor"]): float(m["lastWindowEnd"]) for m in status.get("gpuMonitors") or []
            }
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("GPU usage in the GPUJob status is unreadable (%s); counting starts over", exc)
            totals, last_ends = UsageTotals(), {}
        message = status.get("gpuMonitorMessage")
        activity = status.get("gpuActivity")
        kept = (
            {k: float(v) for k, v in activity.items() if isinstance(v, int | float)}
            if isinstance(activity, Mapping)
            else {}
        )
        return cls(totals, last_ends, str(message) if message else None, kept)

    def take(self, monitor: str, log_text: str) -> int:
        """Add the windows of ``log_text`` that end after this monitor's last taken one; returns how many."""
        last_end = self.last_ends.get(monitor)
        taken = 0
        for line in log_text.splitlines():
            record = summary_line_record(line)
            if record is None:
                continue  # the sidecar's own messages (stderr) share the log
            if record.get("kind") == UNAVAILABLE_KIND and self.message is None:
                self.message = unavailable_message(record)
            if record.get("kind") != WINDOW_KIND:
                continue
            try:
                window = usage_window(monitor, record)  # checks every field first (contract.window_summary)
                end = float(record["end"])
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("monitor %s: skipping a malformed window summary (%s)", monitor, exc)
                continue
            if last_end is not None and end <= last_end:
                continue
            if monitor not in self.last_ends:
                self.totals.monitors += 1
            self.totals.add(window)
            self.last_ends[monitor] = last_end = end
            self._note_activity(end, window.util_mean_pct)
            taken += 1
        return taken

    def _note_activity(self, end: float, util_pct: float) -> None:
        newest = self.activity.get("measuredUntil")
        if newest is None or end > newest:
            self.activity.update(measuredUntil=end, utilPct=util_pct)
        elif end == newest:  # the same instant on another node: the highest counts
            self.activity["utilPct"] = max(self.activity.get("utilPct", 0.0), util_pct)
        if util_pct >= IDLE_UTIL_PCT and end > self.activity.get("busyUntil", -math.inf):
            self.activity["busyUntil"] = end

    def keep_only(self, monitors: set[str]) -> None:
        """Forget the last window ends of monitors whose pods are gone (their windows stay counted)."""
        self.last_ends = {m: end for m, end in self.last_ends.items() if m in monitors}

    def status_fields(self) -> dict[str, Any]:
        """The ledger's status keys (none of them before anything was seen)."""
        fields: dict[str, Any] = {}
        usage = self.totals.usage()
        if usage is not None:
            # null fields are left out: a merge patch would delete them, and the status would differ
            fields["gpuUsage"] = {k: v for k, v in usage.to_dict().items() if v is not None}
            fields["gpuUsageTotals"] = self.totals.to_dict()
        if self.last_ends or usage is not None:
            fields["gpuMonitors"] = [
                {"monitor": m, "lastWindowEnd": end} for m, end in sorted(self.last_ends.items())
            ]
        if self.message is not None:
            fields["gpuMonitorMessage"] = self.message
        if self.activity:
            fields["gpuActivity"] = dict(self.activity)
        return fields


def gpu_activity(status: Mapping[str, Any]) -> GpuActivity | None:
    """What the taken windows say of the job's GPUs lately (for the idle watchdog); None before any."""
    activity = MonitorLedger.from_status(status).activity
    if "measuredUntil" not in activity:
        return None
    busy = activity.get("busyUntil")
    return GpuActivity(
        measured_until=datetime.fromtimestamp(activity["measuredUntil"], UTC),
        busy_until=datetime.fromtimestamp(busy, UTC) if busy is not None else None,
        util_pct=activity.get("utilPct", 0.0),
    )


def read_monitor_logs(
    status: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], namespace: str, now: datetime, api: Any
) -> dict[str, str]:
    """The ``monitor`` log of each started pod, by :func:`monitor_key`, read once per pass: since its last
    window taken in ``status`` (and the margin), all of it before. A log that cannot be read is skipped
    this time, with a warning; its lines are read on a later pass."""
    last_ends = MonitorLedger.from_status(status).last_ends
    logs: dict[str, str] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") not in LOGGED_PHASES:
            continue
        name = str(pod["metadata"]["name"])
        monitor = monitor_key(pod)
        try:
            logs[monitor] = client.read_container_log(
                name, namespace, MONITOR, since_seconds(last_ends.get(monitor), now), api
            )
        except NotFoundError:
            continue  # deleted since it was listed
        except GpuctlError as err:
            log.warning("monitor log of pod %s not read this time: %s", name, err.message)
    return logs


def collect_gpu_usage(
    status: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], logs: Mapping[str, str]
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``status`` with the new windows of the monitor ``logs`` (:func:`read_monitor_logs`) taken, and
    events to post (a monitor's message, the first time)."""
    ledger = MonitorLedger.from_status(status)
    had_message = ledger.message
    for monitor, text in logs.items():
        ledger.take(monitor, text)
    ledger.keep_only({monitor_key(p) for p in pods})
    updated = {k: v for k, v in status.items() if k not in STATUS_KEYS}
    updated.update(ledger.status_fields())
    events = (ledger.message,) if ledger.message is not None and ledger.message != had_message else ()
    return updated, events
