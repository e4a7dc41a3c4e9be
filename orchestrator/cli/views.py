"""What the CLI shows of a job: the JSON status document, the live panel and the final summary."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.table import Table
from rich.text import Text

from orchestrator.backends.base import Progress
from orchestrator.spec import format_duration
from orchestrator.state.gpu_usage import GpuUsage
from orchestrator.state.records import JobRecord, SegmentRecord

SIMULATED_NOTE = "costs are simulated: local nodes are priced as the cloud instance they stand for"


def job_document(job: JobRecord, segments: list[SegmentRecord], progress: Progress | None,
                 summary: dict[str, Any], now: datetime | None = None,
                 gpu_usage: GpuUsage | None = None) -> dict[str, Any]:  # fmt: skip
    """The stable machine-readable status (``gpuctl status JOB -o json``); ``gpu_usage`` is null until
    a GPU monitor window was stored."""
    now = now or datetime.now(UTC)
    cost = sum(s.cost_usd(now) for s in segments)
    on_demand = sum(s.on_demand_equivalent_usd(now) for s in segments)
    doc: dict[str, Any] = {
        "id": job.id,
        "name": job.name,
        "user": job.user,
        "team": job.team,
        "backend": job.backend,
        "state": job.status.value,
        "failure_reason": job.failure_reason.value if job.failure_reason else None,
        "message": job.message,
        "submitted_at": job.submitted_at.isoformat(),
        "updated_at": job.updated_at.isoformat(),
        "attempts": job.attempts,
        "preemptions": job.preemptions,
        "restarts": job.restarts,
        "cost_usd": round(cost, 6),
        "on_demand_equivalent_usd": round(on_demand, 6),
        "savings_usd": round(on_demand - cost, 6),
        "gpu_hours": round(sum(s.hours(now) * s.gpus for s in segments), 6),
        "cost_is_simulated": job.backend == "local",
        "segments": [
            {
                "attempt": s.attempt,
                "gpu_type": s.gpu_type,
                "market": s.market,
                "instance_type": s.instance_type,
                "cloud": s.cloud,
                "zone": s.zone,
                "nodes": s.nodes,
                "gpus_per_node": s.gpus_per_node,
                "started_at": s.started_at.isoformat(),
                "ended_at": s.ended_at.isoformat() if s.ended_at else None,
                "end_reason": s.end_reason,
                "node_price_usd_per_hour": s.node_price_usd_per_hour,
                "price_source": s.price_source,
                "cost_usd": round(s.cost_usd(now), 6),
            }
            for s in segments
        ],
    }
    doc["gpu_usage"] = gpu_usage.to_dict() if gpu_usage is not None else None
    if progress is not None:
        doc["progress"] = {
            "step": progress.step,
            "total_steps": progress.total_steps,
            "loss": progress.loss,
            "world_size": progress.world_size,
        }
    if summary.get("metrics"):
        doc["metrics"] = summary["metrics"]
    elif progress is not None and progress.metrics:
        doc["metrics"] = dict(progress.metrics)
    return doc


def live_table(doc: dict[str, Any], waiting_reason: str | None) -> Table:
    # every value is a Text: a name or message is shown as it is, never read as markup
    title = Text(f"gpuctl job {doc['id']}", style="table.title")
    table = Table(title=title, show_header=False, expand=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    state = doc["state"]
    if waiting_reason:
        state += f" ({waiting_reason})"
    table.add_row("state", Text(state))
    progress = doc.get("progress")
    if progress:
        total = f"/{progress['total_steps']}" if progress.get("total_steps") else ""
        loss = f"{progress['loss']:.4f}" if progress.get("loss") is not None else "-"
        table.add_row(
            "step", Text(f"{progress['step']}{total}   loss {loss}   world size {progress.get('world_size')}")
        )
    seg = doc["segments"][-1] if doc["segments"] else None
    if seg:
        where = (
            f"{seg['nodes']} x {seg['gpu_type']} {seg['market']} in {seg['zone']} ({seg['instance_type']})"
        )
        table.add_row("running on", Text(where if not seg["ended_at"] else f"(last) {where}"))
    table.add_row("attempts", f"{doc['attempts']}   preemptions {doc['preemptions']}")
    table.add_row(
        "cost so far",
        Text(
            f"{doc['cost_usd']:.4f} USD (on-demand would be {doc['on_demand_equivalent_usd']:.4f} USD)"
            + ("  [simulated]" if doc["cost_is_simulated"] else "")
        ),
    )
    return table


def summary_lines(doc: dict[str, Any]) -> list[str]:
    lines = [f"job {doc['id']} {doc['state']}: {doc['message']}"]
    metrics = doc.get("metrics") or {}
    if metrics:
        lines.append("final metrics: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
    lines.append(f"attempts {doc['attempts']}, preemptions {doc['preemptions']}, restarts {doc['restarts']}")
    cost, od = doc["cost_usd"], doc["on_demand_equivalent_usd"]
    saved = f" ({100 * (od - cost) / od:.0f}% saved)" if od > 0 else ""
    lines.append(f"cost {cost:.4f} USD; the same GPU-hours on-demand: {od:.4f} USD{saved}")
    if doc.get("gpu_usage"):
        lines.append(gpu_use_line(doc["gpu_usage"]))
    if doc["cost_is_simulated"]:
        lines.append(f"note: {SIMULATED_NOTE}")
    for seg in doc["segments"]:
        span = "-"
        if seg["ended_at"]:
            start = datetime.fromisoformat(seg["started_at"])
            span = format_duration((datetime.fromisoformat(seg["ended_at"]) - start).total_seconds())
        lines.append(
            f"  attempt {seg['attempt']}: {seg['nodes']} x {seg['gpu_type']} {seg['market']} {seg['zone']}"
            f" for {span}, {seg['cost_usd']:.4f} USD ({seg['end_reason'] or 'open'})"
        )
    return lines


def gpu_use_line(usage: dict[str, Any]) -> str:
    """One line of what the GPU monitors measured (the ``gpu_usage`` of a status document)."""
    total_gib = usage["mem_total_bytes"] / 2**30
    sm = f", SM activity {usage['sm_activity_mean']:.2f}" if usage.get("sm_activity_mean") is not None else ""
    return (
        f"GPU use: utilization mean {usage['util_mean_pct']:.0f}% (p95 {usage['util_p95_pct']:.0f}%), "
        f"peak memory {100 * usage['mem_peak_fraction']:.0f}% of {total_gib:.0f} GiB{sm}, "
        f"idle {usage['idle_gpu_hours']:.3f} GPU-h, {usage['samples']} samples ({usage['model']})"
    )
