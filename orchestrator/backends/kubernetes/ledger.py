"""The ledger that the GPUJobs that exist hold: the job and segment records a cost report reads.

Without a ledger database, ``gpuctl cost report --backend kubernetes`` reads the GPUJobs (each keeps
its segments in ``status.segments``) and turns them into the records the job store gives a report
(:class:`~orchestrator.state.records.JobRecord`, :class:`~orchestrator.state.records.SegmentRecord`),
so the report is built the same way from either source. A GPUJob deleted before the report was read
is missing from it: :data:`DELETED_MISSING_NOTE` says so in every format.

A job's id is ``NAMESPACE/NAME`` (unique in a cluster); its user is who the operator charges (its
namespace), its team the spec's (``default`` when unset), its cluster the name
:func:`~orchestrator.backends.kubernetes.client.cluster_name` gives.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.status_model import GpuJobStatus
from orchestrator.errors import PermanentError, UserError
from orchestrator.state.job_state import JobState, SegmentState
from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.status import JobStatus
from orchestrator.times import parse_iso_or_none

CLUSTER_NAME_ENV = "GPUCTL_CLUSTER_NAME"
"""The cluster's name in reports and the ledger (the chart sets it from its ``clusterName`` value)."""
IN_CLUSTER = "in-cluster"
"""The cluster's name inside a pod when ``$GPUCTL_CLUSTER_NAME`` is not set."""
DELETED_MISSING_NOTE = (
    "read from the GPUJobs that exist now: deleted GPUJobs and their cost are missing from this report "
    "(a ledger database keeps them: docs/kube.md)"
)


@dataclass(frozen=True)
class GpuJobLedger:
    """The records of some GPUJobs, with the job store's two read methods (a report's ledger source:
    :class:`orchestrator.costs.inputs.LedgerSource`) and their GPU use (idle and measured GPU-hours)."""

    jobs: tuple[JobRecord, ...]
    segment_records: tuple[SegmentRecord, ...]
    idle: Mapping[str, float]
    measured: Mapping[str, float]
    to_finish: Mapping[str, float]
    """Running job id -> its forecast cost to finish (``status.forecast``)."""

    def list_jobs(self) -> Sequence[JobRecord]:
        return self.jobs

    def segments(self, job_id: str | None = None, since: datetime | None = None) -> Sequence[SegmentRecord]:
        """Segments (of one job, or all) that may overlap ``since``..now, as the job store gives them."""
        return [
            s
            for s in self.segment_records
            if (job_id is None or s.job_id == job_id)
            and (since is None or s.ended_at is None or s.ended_at >= since)
        ]

    def idle_gpu_hours(self) -> Mapping[str, float]:
        return self.idle

    def measured_gpu_hours(self) -> Mapping[str, float]:
        return self.measured


def gpujob_ledger(gpujobs: Iterable[Mapping[str, Any]], cluster: str) -> GpuJobLedger:
    """The job and segment records of ``gpujobs`` (as the API server lists them) on ``cluster``. A
    status field this version cannot read is left out (:meth:`GpuJobStatus.read`), never an error."""
    jobs: list[JobRecord] = []
    segments: list[SegmentRecord] = []
    idle: dict[str, float] = {}
    measured: dict[str, float] = {}
    to_finish: dict[str, float] = {}
    for obj in gpujobs:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        found = GpuJobStatus.read(obj.get("status") or {})
        job = _job(meta, spec if isinstance(spec, Mapping) else {}, found, cluster)
        jobs.append(job)
        segments += _segments(job.id, found.state, start=len(segments) + 1)
        usage = found.display.gpu_usage
        if usage is not None and usage.measured_gpu_hours > 0:
            idle[job.id], measured[job.id] = usage.idle_gpu_hours, usage.measured_gpu_hours
        forecast = found.display.forecast
        if forecast is not None and job.status is JobStatus.RUNNING:
            to_finish[job.id] = forecast.cost_to_finish_usd
    return GpuJobLedger(tuple(jobs), tuple(segments), idle, measured, to_finish)


def _job(meta: Mapping[str, Any], spec: Mapping[str, Any], found: GpuJobStatus, cluster: str) -> JobRecord:
    state = found.state
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    created = parse_iso_or_none(str(meta.get("creationTimestamp") or "")) or datetime.min.replace(tzinfo=UTC)
    ended = [s.ended_at for s in state.segments if s.ended_at is not None]
    return JobRecord(
        id=f"{namespace}/{name}", name=name, user=found.display.user or namespace,
        team=str(spec.get("team") or "default"), backend="kubernetes", status=state.status,
        failure_reason=state.failure_reason, message=state.message, spec_json="{}", submitted_at=created,
        deadline=state.deadline, updated_at=max(ended, default=created), attempts=state.attempt,
        preemptions=state.preemptions, restarts=state.restarts, cluster=cluster, namespace=namespace,
    )  # fmt: skip


def _segments(job_id: str, state: JobState, start: int) -> list[SegmentRecord]:
    return [_segment(start + i, job_id, seg) for i, seg in enumerate(state.segments)]


def _segment(number: int, job_id: str, seg: SegmentState) -> SegmentRecord:
    p = seg.placement
    return SegmentRecord(
        id=number, job_id=job_id, attempt=seg.attempt, gpu_type=p.gpu_type, instance_type=p.instance_type,
        market=str(p.market), cloud=p.cloud, region=p.region, zone=p.zone, nodes=seg.nodes,
        gpus_per_node=p.gpus_per_node, started_at=seg.started_at, ended_at=seg.ended_at,
        node_price_usd_per_hour=p.node_price_usd_per_hour,
        on_demand_node_price_usd_per_hour=p.on_demand_node_price_usd_per_hour, price_source=p.price_source,
        end_reason=seg.end_reason,
    )  # fmt: skip


def cluster_name() -> str:
    """The name of the cluster the API client talks to: ``$GPUCTL_CLUSTER_NAME`` when set (the chart's
    ``clusterName``), else inside a pod ``in-cluster``, else the kubeconfig's current context."""
    named = os.environ.get(CLUSTER_NAME_ENV, "").strip()
    if named:
        return named
    if os.environ.get("KUBERNETES_SERVICE_HOST"):  # the client uses the pod's own credentials then
        return IN_CLUSTER
    return client.current_context() or IN_CLUSTER


def read_gpujobs(namespace: str | None, api: Any | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The GPUJobs of ``namespace``, or (None) of every namespace this account may list, and notes on
    the namespaces left out (not allowed). Without the right to list GPUJobs cluster-wide, each
    namespace is listed by itself; without the right to list namespaces either: a :class:`UserError`."""
    if namespace is not None:
        return client.list_gpujobs(namespace, api), []
    try:
        return client.list_gpujobs_everywhere(api), []
    except PermanentError as everywhere:
        try:
            names = client.list_namespace_names(api)
        except PermanentError:
            raise UserError(
                f"{everywhere.what}, and listing namespaces is not allowed either",
                "name the namespace to report on: -n NAMESPACE",
            ) from everywhere
    found: list[dict[str, Any]] = []
    denied: list[str] = []
    for name in names:
        try:
            found += client.list_gpujobs(name, api)
        except PermanentError:
            denied.append(name)
    notes = (
        [f"GPUJobs of namespaces this account may not list are missing: {', '.join(denied)}"]
        if denied
        else []
    )
    return found, notes
