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

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from orchestrator.backends.base import Progress
from orchestrator.backends.slurm import SlurmJobStatus
from orchestrator.state.forecast import Forecast
from orchestrator.state.gpu_usage import GpuUsage
from orchestrator.state.job_state import JobState
from orchestrator.state.records import JobRecord, SegmentRecord, segment_cost_usd
from orchestrator.state.status import JobStatus

SCHEMA_ID = "https://gpuctl.dev/schemas/status-document.json"
_GPU_USAGE = TypeAdapter(GpuUsage)


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
            finish_at=found.finish_at.isoformat(), eta_seconds=round(found.eta_seconds, 3),
            steps_per_second=found.steps_per_second, cost_to_finish_usd=_money(found.cost_to_finish_usd),
            cost_to_finish_on_demand_usd=_money(found.cost_to_finish_on_demand_usd),
            projected_cost_usd=_money(found.projected_cost_usd), deadline_at_risk=found.deadline_at_risk,
            budget_at_risk=found.budget_at_risk,
        )  # fmt: skip

    @classmethod
    def from_status(cls, written: Any) -> ForecastDoc | None:
        """The operator's ``status.forecast`` (camelCase); None when absent or unreadable."""
        if not isinstance(written, dict):
            return None
        try:
            return cls.model_validate({_snake(k): v for k, v in written.items()})
        except ValidationError:
            return None


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


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
    backend_details: dict[str, Any] = Field(description="what only this backend has (see docs/output.md)")

    def as_json(self) -> dict[str, Any]:
        """The document as JSON-ready data (enums as their values)."""
        return self.model_dump(mode="json")


def status_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of :class:`StatusDocument`."""
    schema = StatusDocument.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def _money(x: float) -> float:
    return round(x, 6)


def _open_nodes(segments: list[SegmentDoc]) -> int | None:
    return segments[-1].nodes if segments and segments[-1].ended_at is None else None


def _record_segment(s: SegmentRecord, now: datetime) -> SegmentDoc:
    return SegmentDoc(
        attempt=s.attempt, gpu_type=s.gpu_type, market=s.market, instance_type=s.instance_type,
        cloud=s.cloud, zone=s.zone, nodes=s.nodes, gpus_per_node=s.gpus_per_node,
        started_at=s.started_at.isoformat(), ended_at=_iso(s.ended_at), end_reason=s.end_reason,
        node_price_usd_per_hour=s.node_price_usd_per_hour, price_source=s.price_source,
        cost_usd=_money(s.cost_usd(now)),
    )  # fmt: skip


def _ledger_totals(segments: list[SegmentRecord], now: datetime) -> dict[str, float]:
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
        managed=None if job.status.terminal else managed, submitted_at=job.submitted_at.isoformat(), updated_at=job.updated_at.isoformat(),
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


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _gpujob_segment(seg: dict[str, Any], now: datetime) -> tuple[SegmentDoc, float | None, float | None]:
    """A segment of ``status.segments`` as written by the operator, with its on-demand cost and
    GPU-hours (None when the operator did not write what they need)."""
    start, end = _time(seg["start"]), _time(seg["end"]) if seg.get("end") else None
    hours = max(0.0, ((end or now) - start).total_seconds() / 3600.0)
    nodes = int(seg.get("nodes", 0))
    price = seg.get("nodePriceUsdPerHour")
    od_price, gpus = seg.get("onDemandNodePriceUsdPerHour"), seg.get("gpusPerNode")
    doc = SegmentDoc(
        attempt=seg.get("attempt"), gpu_type=seg.get("gpuType") or None, market=seg.get("market") or None,
        instance_type=seg.get("instanceType"), cloud=seg.get("cloud"), zone=seg.get("zone"), nodes=nodes,
        gpus_per_node=gpus, started_at=start.isoformat(), ended_at=_iso(end), end_reason=seg.get("endReason"),
        node_price_usd_per_hour=price, price_source=seg.get("priceSource"),
        cost_usd=_money(segment_cost_usd(hours, nodes, float(price or 0.0))),
    )  # fmt: skip
    on_demand = segment_cost_usd(hours, nodes, float(od_price)) if od_price is not None else None
    gpu_hours = hours * nodes * int(gpus) if gpus is not None else None
    return doc, on_demand, gpu_hours


def _sum_or_none(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return _money(sum(known)) if len(known) == len(values) else None


def gpujob_usage(written: Any) -> GpuUsage | None:
    """The operator's ``status.gpuUsage`` (null fields are left out there); None until a monitor
    window was read, or when the operator wrote something this version cannot read."""
    if not written:
        return None
    try:
        usage = _GPU_USAGE.validate_python({"sm_activity_mean": None, **written})
    except ValidationError:
        return None
    numbers = [v for v in asdict(usage).values() if isinstance(v, float)]
    return usage if all(math.isfinite(v) for v in numbers) else None


def gpujob_progress(written: Any) -> tuple[ProgressDoc | None, dict[str, Any] | None]:
    """The operator's ``status.progress`` (operators/kubernetes/progress.py): the progress, and the final
    metrics once training finished; (None, None) before a progress line, or when unreadable."""
    if not isinstance(written, dict):
        return None, None
    try:
        doc = ProgressDoc(
            step=written["step"],
            total_steps=written.get("totalSteps"),
            loss=written.get("loss"),
            world_size=written.get("worldSize"),
        )
    except (KeyError, ValidationError):
        return None, None
    metrics = finite_metrics(written.get("metrics"))
    return doc, metrics if written.get("finished") else None


def kubernetes_document(obj: dict[str, Any], now: datetime | None = None) -> StatusDocument:
    """A GPUJob resource, its ``.status`` as written by the operator (operators/kubernetes/step.py)."""
    now = now or datetime.now(UTC)
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    parts = [_gpujob_segment(seg, now) for seg in status.get("segments", [])]
    docs = [p[0] for p in parts]
    cost = _money(sum(d.cost_usd for d in docs))
    on_demand = _sum_or_none([p[1] for p in parts])
    spec = obj.get("spec") or {}
    progress, metrics = gpujob_progress(status.get("progress"))
    waiting = status.get("waiting") if isinstance(status.get("waiting"), dict) else None
    state = JobStatus(status.get("state", JobStatus.PENDING))
    if state.terminal or state is JobStatus.RUNNING:
        waiting = None
    return StatusDocument(
        id=meta.get("name", ""), name=meta.get("name", ""), user=status.get("user") or meta.get("namespace"),
        team=spec.get("team"), backend="kubernetes",
        state=state, failure_reason=status.get("failureReason"),
        message=status.get("message"), waiting_reason=waiting.get("message") if waiting else None,
        waiting_since=waiting.get("since") if waiting else None,
        forecast=ForecastDoc.from_status(status.get("forecast")) if state is JobStatus.RUNNING else None,
        submitted_at=meta.get("creationTimestamp"),
        updated_at=_last_transition(status), attempts=int(status.get("attempt", 0)),
        preemptions=int(status.get("preemptions", 0)), restarts=int(status.get("restarts", 0)),
        nodes=status.get("nodes"), cost_usd=cost if docs else _money(float(status.get("costUsd", 0.0))),
        on_demand_equivalent_usd=on_demand,
        savings_usd=_money(on_demand - cost) if on_demand is not None else None,
        gpu_hours=_sum_or_none([p[2] for p in parts]), cost_is_simulated=False, segments=docs,
        progress=progress, metrics=metrics, gpu_usage=gpujob_usage(status.get("gpuUsage")),
        backend_details={"namespace": meta.get("namespace"), "conditions": status.get("conditions", []),
                         "gpu_monitor_message": status.get("gpuMonitorMessage")},
    )  # fmt: skip


def _last_transition(status: dict[str, Any]) -> str | None:
    times = [c["lastTransitionTime"] for c in status.get("conditions", []) if c.get("lastTransitionTime")]
    return max(times, key=_time) if times else None
