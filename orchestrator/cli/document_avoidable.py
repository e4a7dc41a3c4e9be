"""Avoidable spend of a job that no local job store holds: a GPUJob (`gpuctl status --backend kubernetes`)
or a SLURM job asked directly (`gpuctl status --backend slurm`). It is priced from its status document
(orchestrator/cli/status_document.py), the same shape for every backend: the GPU monitors' aggregate
(``gpu_usage``, as the operator writes ``status.gpuUsage``) stands for the monitor windows, the segments
give the last 30 days' spend and the forecast the cost of the remaining work. Neither carries per-step
timings, so step timings are "not measured" there; with no GPU use either, the job is "not measured"."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from orchestrator.cli.avoidable_view import gpu_context
from orchestrator.costs.avoidable import MONTH, JobAvoidable, job_fixes, price
from orchestrator.monitor.diagnosis import diagnose
from orchestrator.state.status import JobStatus
from orchestrator.times import parse_iso, parse_iso_or_none


def usage_window(usage: dict[str, Any]) -> dict[str, Any]:
    """The monitors' aggregate (a document's ``gpu_usage``) as one window summary for the diagnosis:
    its measured GPU-hours as GPU-seconds on one GPU, its peaks and means as the window's (no
    throttling share: the aggregate does not keep it)."""
    seconds = float(usage.get("measured_gpu_hours") or 0.0) * 3600.0
    return {
        "gpus": 1,
        "duration_s": seconds,
        "model": str(usage.get("model") or ""),
        "util_mean_pct": float(usage["util_mean_pct"]),
        "util_p95_pct": float(usage["util_p95_pct"]),
        "mem_used_max_bytes": int(usage["mem_peak_bytes"]),
        "mem_total_bytes": int(usage["mem_total_bytes"]),
        "idle_seconds": float(usage.get("idle_gpu_hours") or 0.0) * 3600.0,
        "sm_activity_mean": usage.get("sm_activity_mean"),
    }


def _overlap_hours(segment: dict[str, Any], start: datetime, now: datetime) -> float:
    begin = max(parse_iso(segment["started_at"]), start)
    end = min(parse_iso_or_none(segment.get("ended_at")) or now, now)
    return max(0.0, (end - begin).total_seconds() / 3600.0)


def document_avoidable(doc: dict[str, Any], now: datetime | None = None) -> JobAvoidable:
    """The findings a status document supports, priced like a stored job's
    (:func:`orchestrator.cli.avoidable_view.diagnose_job`)."""
    now = now or datetime.now(UTC)
    segments = list(doc.get("segments") or [])
    gpu_type = next((s["gpu_type"] for s in reversed(segments) if s.get("gpu_type")), None)
    memory, candidates = gpu_context(gpu_type)
    usage = doc.get("gpu_usage")
    windows = [usage_window(usage)] if usage else []
    why = (doc.get("backend_details") or {}).get("gpu_monitor_message")
    findings = diagnose(windows, (), memory, candidates, unmeasured_reason=why, gpu_type=gpu_type)
    gpu_hours = sum(_overlap_hours(s, datetime.min.replace(tzinfo=UTC), now) * s["nodes"] * (s.get("gpus_per_node") or 1)
                    for s in segments)  # fmt: skip
    measured = float(usage.get("measured_gpu_hours") or 0.0) if usage else 0.0
    coverage = min(1.0, measured / gpu_hours) if gpu_hours > 0 else (1.0 if measured else 0.0)
    fixes = job_fixes(findings, False, coverage)
    month = sum(_overlap_hours(s, now - MONTH, now) * s["nodes"] * (s.get("node_price_usd_per_hour") or 0.0)
                for s in segments)  # fmt: skip
    open_price = [
        s["nodes"] * (s.get("node_price_usd_per_hour") or 0.0) for s in segments if not s.get("ended_at")
    ]
    state = JobStatus(doc["state"])
    forecast = doc.get("forecast") or {}
    to_finish = 0.0 if state.terminal else forecast.get("cost_to_finish_usd")
    return price(str(doc.get("id") or ""), str(doc.get("team") or ""), fixes, month, to_finish, None,
                 sum(open_price) if open_price else None)  # fmt: skip
