"""How the dashboard writes a status document's values as text: one place, used by the server-rendered
pages and by the JSON the pages poll (the script only puts these strings into the page, as text).

Money is :func:`orchestrator.cli.output.usd` (USD, 4 decimals), as ``gpuctl status`` and ``list``
print it; the forecast and GPU-use lines are the CLI's own (:mod:`orchestrator.cli.views`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestrator.cli.output import usd
from orchestrator.cli.views import SIMULATED_NOTE, forecast_line, gpu_use_line, unmanaged_line
from orchestrator.spec import format_duration

NOT_MEASURED = "not measured"
ROW_FIELDS = ("id", "name", "team", "user", "state", "step", "throughput", "eta", "cost", "projected",
              "savings", "waiting", "gpu")  # fmt: skip


def when(text: str | None) -> str:
    """An ISO 8601 time as ``2026-11-22 12:00:05`` (UTC as stored), '-' when unknown."""
    return text[:19].replace("T", " ") if text else "-"


def state_text(doc: dict[str, Any]) -> str:
    """The state, with why a failed job failed, and "not managed" when no controller drives the job."""
    state = f"{doc['state']} ({doc['failure_reason']})" if doc.get("failure_reason") else str(doc["state"])
    return f"{state}, not managed" if doc.get("managed") is False else state


def bucket_text(seconds: float) -> str:
    """A time bucket of the cost report: ``10 min``, ``1 h``, ``1 day``."""
    for size, unit in ((86400, "day"), (3600, "h"), (60, "min")):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}" + ("s" if unit == "day" and count > 1 else "")
    return format_duration(seconds)


def step_text(doc: dict[str, Any]) -> str:
    progress = doc.get("progress")
    if not progress:
        return "-"
    total = f"/{progress['total_steps']}" if progress.get("total_steps") else ""
    return f"{progress['step']}{total}"


def savings_text(doc: dict[str, Any]) -> str:
    saved, on_demand = doc.get("savings_usd"), doc.get("on_demand_equivalent_usd")
    if saved is None:
        return "-"
    share = f" ({100 * saved / on_demand:.0f}%)" if on_demand else ""
    return f"{usd(saved)}{share}"


def gpu_text(doc: dict[str, Any]) -> str:
    usage = doc.get("gpu_usage")
    if not usage:
        return NOT_MEASURED
    return f"{usage['util_mean_pct']:.0f}% (p95 {usage['util_p95_pct']:.0f}%)"


def job_row(doc: dict[str, Any]) -> dict[str, str]:
    """The jobs table's cells of one job."""
    found = doc.get("forecast")
    return {
        "id": doc["id"], "name": doc["name"], "team": doc["team"] or "-", "user": doc["user"] or "-",
        "state": state_text(doc), "step": step_text(doc),
        "throughput": f"{found['steps_per_second']:.3g} steps/s" if found else "-",
        "eta": format_duration(found["eta_seconds"]) if found else "-",
        "cost": usd(doc["cost_usd"]),
        "projected": usd(found["projected_cost_usd"]) if found else "-",
        "savings": savings_text(doc), "waiting": doc.get("waiting_reason") or "-", "gpu": gpu_text(doc),
    }  # fmt: skip


def job_summary(doc: dict[str, Any]) -> dict[str, str]:
    """The job page's summary: the row, and what only the page shows."""
    found = doc.get("forecast")
    return {
        **job_row(doc),
        "message": doc.get("message") or "-",
        "attempts": f"{doc['attempts']} (preemptions {doc['preemptions']}, restarts {doc['restarts']})",
        "nodes": str(doc["nodes"]) if doc.get("nodes") is not None else "-",
        "on_demand": usd(doc.get("on_demand_equivalent_usd")),
        "gpu_hours": f"{doc['gpu_hours']:.4f}" if doc.get("gpu_hours") is not None else "-",
        "forecast": forecast_line(found) if found else "-",
        "gpu_detail": gpu_use_line(doc["gpu_usage"]) if doc.get("gpu_usage") else NOT_MEASURED,
        "waiting_since": when(doc.get("waiting_since")),
        "submitted": when(doc.get("submitted_at")),
        "updated": when(doc.get("updated_at")),
        "note": SIMULATED_NOTE if doc.get("cost_is_simulated") else "",
        "managed": unmanaged_line(doc["backend"]) if doc.get("managed") is False else "",
    }  # fmt: skip


def segment_rows(doc: dict[str, Any]) -> list[dict[str, str]]:
    """The segments table: where each span ran, at what price, for how long, what it cost."""
    rows = []
    for seg in doc["segments"]:
        end = datetime.fromisoformat(seg["ended_at"]) if seg["ended_at"] else None
        span = (
            format_duration((end - datetime.fromisoformat(seg["started_at"])).total_seconds())
            if end
            else "open"
        )
        price = seg.get("node_price_usd_per_hour")
        rows.append({
            "attempt": str(seg["attempt"] or "-"), "gpu": f"{seg['nodes']} x {seg['gpu_type'] or '-'}",
            "market": seg["market"] or "-", "zone": seg["zone"] or "-", "instance": seg["instance_type"] or "-",
            "price": f"{usd(price)} /node-h" if price is not None else "-", "source": seg.get("price_source") or "-",
            "started": when(seg["started_at"]), "span": span, "cost": usd(seg["cost_usd"]),
            "end": seg["end_reason"] or ("ended" if end else "running"),
        })  # fmt: skip
    return rows
