"""One status document for every backend (``gpuctl status/list -o json``), and its JSON Schema.

The document has the same keys on local, SLURM and Kubernetes: what a backend cannot know is present
and null, and what only one backend has goes under ``backend_details``. Keys are snake_case; money is
a number of US dollars (rounded to 6 decimals). ``gpuctl spec status-schema`` prints the schema.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.backends.base import Progress
from orchestrator.backends.kubernetes.status_model import Condition, GpuJobStatus
from orchestrator.backends.slurm import SlurmJobStatus
from orchestrator.state.forecast import Forecast
from orchestrator.state.gpu_usage import GpuUsage
from orchestrator.state.job_state import JobState, SegmentState
from orchestrator.state.progress_state import ProgressState
from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.status import JobStatus
from orchestrator.times import iso_z, parse_iso

SCHEMA_ID = "https://gpuctl.dev/schemas/status-document.json"


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SegmentDoc(_Part):
    """A span of time on one set of nodes of one GPU type, market and zone: what the ledger prices."""

    attempt: int | None = Field(description="the attempt this segment belongs to (1, 2, ...)")
    gpu_type: str | None
    market: str | None = Field(description="spot or on_demand (SLURM: the partition's market)")
    instance_type: str | None
    cloud: str | None
    zone: str | None = Field(description="cloud zone; SLURM: the node list")
    nodes: int
    gpus_per_node: int | None
    started_at: str = Field(description="ISO 8601")
    ended_at: str | None = Field(description="ISO 8601; null while the segment is open")
    end_reason: str | None
    node_price_usd_per_hour: float | None
    price_source: str | None
    cost_usd: float


class ProgressDoc(_Part):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    step: int
    total_steps: int | None
    loss: float | None
    world_size: int | None


class ForecastDoc(_Part):
    """From the measured step rate of the open segment and the steps left (running jobs only)."""

    finish_at: str = Field(description="ISO 8601: the expected finish")
    eta_seconds: float
    steps_per_second: float
    cost_to_finish_usd: float = Field(description="the time left at the current market's price")
    cost_to_finish_on_demand_usd: float = Field(description="the time left at the on-demand price")
    projected_cost_usd: float = Field(description="spent so far plus the cost to finish")
    deadline_at_risk: bool | None = Field(
        default=None, description="finishes after the deadline; null without one"
    )
    budget_at_risk: bool | None = Field(
        default=None, description="projected cost above budget_usd; null without one"
    )

    @classmethod
    def of(cls, found: Forecast) -> ForecastDoc:
        return cls(
            finish_at=iso_z(found.finish_at), eta_seconds=round(found.eta_seconds, 3),
            steps_per_second=found.steps_per_second, cost_to_finish_usd=_money(found.cost_to_finish_usd),
            cost_to_finish_on_demand_usd=_money(found.cost_to_finish_on_demand_usd),
            projected_cost_usd=_money(found.projected_cost_usd), deadline_at_risk=found.deadline_at_risk,
            budget_at_risk=found.budget_at_risk,
        )  # fmt: skip


class StatusDocument(_Part):
    """``gpuctl status JOB -o json`` on every backend."""

    id: str
    name: str
    user: str | None
    team: str | None
    backend: str = Field(description="local, slurm or kubernetes")
    state: JobStatus
    failure_reason: str | None = Field(description="why a FAILED job failed, e.g. too_many_restarts")
    message: str | None
    waiting_reason: str | None = Field(
        default=None, description="why a job that is neither running nor ended waits, with its evidence"
    )
    waiting_since: str | None = Field(default=None, description="ISO 8601: since when it waits for that")
    forecast: ForecastDoc | None = Field(
        default=None, description="expected finish and cost to finish of a running job; null when unknown"
    )
    managed: bool | None = Field(
        default=None,
        description="a gpuctl controller manages the job now; false: none runs for it, so it does not "
        "advance (start one: `gpuctl controller run --detach`); null for an ended job and where gpuctl "
        "cannot see its manager (Kubernetes: the operator; SLURM asked directly)",
    )
    controller: str | None = Field(
        default=None,
        description="the controller ticking the job now (host:pid:random, from its lease in the job store); "
        "null when none holds it, for an ended job, and on Kubernetes",
    )
    submitted_at: str | None = Field(description="ISO 8601")
    updated_at: str | None = Field(description="ISO 8601")
    attempts: int
    preemptions: int
    restarts: int
    nodes: int | None = Field(description="nodes running now (the open segment's), null when unknown")
    cost_usd: float
    on_demand_equivalent_usd: float | None = Field(description="the same GPU-hours at on-demand prices")
    savings_usd: float | None
    gpu_hours: float | None
    cost_is_simulated: bool = Field(description="local nodes are priced as the instance they stand for")
    segments: list[SegmentDoc]
    progress: ProgressDoc | None = Field(description="the newest training progress line, if any")
    metrics: dict[str, Any] | None = Field(description="final metrics the training script reported")
    gpu_usage: GpuUsage | None = Field(description="what the GPU monitors measured; null until a window")
    avoidable: dict[str, Any] | None = Field(
        default=None,
        description="`gpuctl status JOB` of a stored job: its diagnosis findings priced in USD (fixes, "
        "avoidable_remaining_usd, avoidable_month_usd, measured, not_measured; see docs/monitor.md); "
        "null where not computed (`gpuctl list`, SLURM asked directly, Kubernetes)",
    )
    backend_details: dict[str, Any] = Field(description="what only this backend has (see docs/output.md)")

    def as_json(self) -> dict[str, Any]:
        """The document as JSON-ready data (enums as their values)."""
        return self.model_dump(mode="json")


def status_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of :class:`StatusDocument`."""
    schema = StatusDocument.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


def _iso(t: datetime | None) -> str | None:
    return iso_z(t) if t is not None else None


def _money(x: float) -> float:
    return round(x, 6)


def _open_nodes(segments: list[SegmentDoc]) -> int | None:
    return segments[-1].nodes if segments and segments[-1].ended_at is None else None


def _record_segment(s: SegmentRecord, now: datetime) -> SegmentDoc:
    return SegmentDoc(
        attempt=s.attempt, gpu_type=s.gpu_type, market=s.market, instance_type=s.instance_type,
        cloud=s.cloud, zone=s.zone, nodes=s.nodes, gpus_per_node=s.gpus_per_node,
        started_at=iso_z(s.started_at), ended_at=_iso(s.ended_at), end_reason=s.end_reason,
        node_price_usd_per_hour=s.node_price_usd_per_hour, price_source=s.price_source,
        cost_usd=_money(s.cost_usd(now)),
    )  # fmt: skip


def _ledger_totals(segments: list[SegmentRecord], now: datetime) -> dict[str, Any]:
    cost = sum(s.cost_usd(now) for s in segments)
    on_demand = sum(s.on_demand_equivalent_usd(now) for s in segments)
    return {
        "cost_usd": _money(cost),
        "on_demand_equivalent_usd": _money(on_demand),
        "savings_usd": _money(on_demand - cost),
        "gpu_hours": _money(sum(s.hours(now) * s.gpus for s in segments)),
    }


def local_document(job: JobRecord, segments: list[SegmentRecord], progress: Progress | None,
                   summary: dict[str, Any], now: datetime | None = None,
                   gpu_usage: GpuUsage | None = None, state: JobState | None = None,
                   forecast: Forecast | None = None, managed: bool | None = None) -> StatusDocument:  # fmt: skip
    """A job of the controller's store (local, or SLURM run by a controller); ``state``: its engine
    state (why it waits), ``forecast``: its forecast when running, ``managed``: whether a controller
    runs for it (None: not asked)."""
    now = now or datetime.now(UTC)
    waiting = state.waiting if state is not None and not job.status.terminal else None
    docs = [_record_segment(s, now) for s in segments]
    metrics = finite_metrics(summary.get("metrics")) or finite_metrics(progress.metrics if progress else None)
    return StatusDocument(
        id=job.id, name=job.name, user=job.user, team=job.team, backend=job.backend, state=job.status,
        failure_reason=job.failure_reason.value if job.failure_reason else None, message=job.message,
        waiting_reason=waiting.message if waiting else None, waiting_since=_iso(waiting.since if waiting else None),
        forecast=ForecastDoc.of(forecast) if forecast is not None and job.status is JobStatus.RUNNING else None,
        managed=None if job.status.terminal else managed, submitted_at=iso_z(job.submitted_at), updated_at=iso_z(job.updated_at),
        attempts=job.attempts, preemptions=job.preemptions, restarts=job.restarts,
        nodes=_open_nodes(docs), **_ledger_totals(segments, now), cost_is_simulated=job.backend == "local",
        segments=docs, progress=_progress(progress), metrics=metrics, gpu_usage=gpu_usage,
        backend_details={},
    )  # fmt: skip


def finite_metrics(metrics: Any) -> dict[str, Any] | None:
    """The entries of stored metrics that strict JSON can carry as they are (strings, booleans, whole
    numbers and finite numbers); None when there are none."""
    if not isinstance(metrics, Mapping):
        return None
    kept = {str(k): v for k, v in metrics.items() if isinstance(v, str | int) or _finite(v)}
    return kept or None


def _finite(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value)


def _progress(progress: Progress | None) -> ProgressDoc | None:
    if progress is None:
        return None
    return ProgressDoc(
        step=progress.step,
        total_steps=progress.total_steps,
        loss=progress.loss,
        world_size=progress.world_size,
    )


def slurm_document(found: SlurmJobStatus, now: datetime | None = None) -> StatusDocument:
    """What SLURM says of a job (``status_from_slurm``), without the controller's store."""
    now = now or datetime.now(UTC)
    job = found.slurm_job
    docs = [_record_segment(s, now) for s in found.segments]
    return StatusDocument(
        id=found.job_id, name=found.job_id, user=None, team=None, backend="slurm", state=found.status,
        failure_reason=str(found.failure) if found.failure else None, message=found.message,
        waiting_reason=f"queued in SLURM job {job.job_id} on partition {job.partition} (squeue reason: "
        f"{job.reason or 'none given'})" if job.state == "PENDING" else None,
        waiting_since=_iso(job.submit_time) if job.state == "PENDING" else None, forecast=None, managed=None,
        submitted_at=_iso(job.submit_time), updated_at=_iso(job.end_time or job.start_time or job.submit_time),
        attempts=found.attempts, preemptions=job.restarts, restarts=0, nodes=_open_nodes(docs),
        **_ledger_totals(found.segments, now), cost_is_simulated=False, segments=docs, progress=None,
        metrics=None, gpu_usage=None,
        backend_details={"slurm_job_id": job.job_id, "slurm_state": job.state, "partition": job.partition,
                         "node_list": job.nodes or None, "log": job.stdout or None},
    )  # fmt: skip


def _state_segment(seg: SegmentState, now: datetime) -> SegmentDoc:
    """A segment of a GPUJob's state; names the operator did not write (older versions) are null."""
    p = seg.placement
    return SegmentDoc(
        attempt=seg.attempt or None, gpu_type=p.gpu_type or None, market=str(p.market), instance_type=p.instance_type or None,
        cloud=p.cloud or None, zone=p.zone or None, nodes=seg.nodes, gpus_per_node=p.gpus_per_node or None,
        started_at=iso_z(seg.started_at), ended_at=_iso(seg.ended_at), end_reason=seg.end_reason,
        node_price_usd_per_hour=p.node_price_usd_per_hour, price_source=p.price_source or None,
        cost_usd=_money(seg.cost_usd(now)),
    )  # fmt: skip


def _sum_or_none(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return _money(sum(known)) if len(known) == len(values) else None


def gpujob_progress(written: ProgressState | None) -> tuple[ProgressDoc | None, dict[str, Any] | None]:
    """A GPUJob's ``status.progress``: the progress, and the final metrics once training finished;
    (None, None) before a progress line."""
    if written is None:
        return None, None
    doc = ProgressDoc(
        step=written.step, total_steps=written.total_steps, loss=written.loss, world_size=written.world_size
    )
    return doc, finite_metrics(written.metrics) if written.finished else None


def kubernetes_document(obj: dict[str, Any], now: datetime | None = None) -> StatusDocument:
    """A GPUJob resource, its ``.status`` read through :class:`GpuJobStatus` (what the operator writes)."""
    now = now or datetime.now(UTC)
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    found = GpuJobStatus.read(status)
    state, shown = found.state, found.display
    docs = [_state_segment(seg, now) for seg in state.segments]
    cost = _money(state.cost_usd(now))
    on_demand = _money(sum(seg.on_demand_equivalent_usd(now) for seg in state.segments))
    # segments of operators before the on-demand price was kept: no savings claimed, none shown
    od_known = bool(docs) and all("onDemandNodePriceUsdPerHour" in seg for seg in status.get("segments", []))
    gpus_known = bool(docs) and all(seg.placement.gpus_per_node for seg in state.segments)
    spec = obj.get("spec") or {}
    progress, metrics = gpujob_progress(state.progress)
    waiting = None if state.status.terminal or state.status is JobStatus.RUNNING else state.waiting
    forecast = shown.forecast if state.status is JobStatus.RUNNING else None
    conditions = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in shown.conditions or []]
    return StatusDocument(
        id=meta.get("name", ""), name=meta.get("name", ""), user=shown.user or meta.get("namespace"),
        team=spec.get("team") if isinstance(spec, dict) else None, backend="kubernetes",
        state=state.status, failure_reason=state.failure_reason,
        message=state.message or None, waiting_reason=waiting.message if waiting else None,
        waiting_since=iso_z(waiting.since) if waiting else None,
        forecast=ForecastDoc.model_validate(forecast.model_dump()) if forecast else None,
        submitted_at=meta.get("creationTimestamp"),
        updated_at=_last_transition(shown.conditions or []), attempts=state.attempt,
        preemptions=state.preemptions, restarts=state.restarts,
        nodes=shown.nodes, cost_usd=cost if docs else _money(shown.cost_usd or 0.0),
        on_demand_equivalent_usd=on_demand if od_known else None,
        savings_usd=_money(on_demand - cost) if od_known else None,
        gpu_hours=_money(sum(seg.hours(now) * seg.nodes * seg.placement.gpus_per_node for seg in state.segments))
        if gpus_known else None, cost_is_simulated=False, segments=docs,
        progress=progress, metrics=metrics, gpu_usage=_usage(shown.gpu_usage),
        backend_details={"namespace": meta.get("namespace"), "conditions": conditions,
                         "gpu_monitor_message": shown.gpu_monitor_message},
    )  # fmt: skip


def _usage(written: GpuUsage | None) -> GpuUsage | None:
    return None if written is None else GpuUsage(**asdict(written))


def _last_transition(conditions: list[Condition]) -> str | None:
    times = [c.last_transition_time for c in conditions if c.last_transition_time]
    return max(times, key=parse_iso) if times else None
