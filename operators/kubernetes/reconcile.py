"""One reconcile pass of a GPUJob against the API server: read, decide (pure), apply, write status.

The decision is one call: :func:`operators.kubernetes.step.step`, which runs gpuctl's controller
reconcile step on the job's status and pods; the monitors' GPU use is read from the pods' sidecar logs
(:mod:`operators.kubernetes.gpu_usage`). Kept apart from the kopf handlers so anything can call it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from operators.kubernetes.admission import admission_refusal, first_sight, refused_status
from operators.kubernetes.gpu_usage import collect_gpu_usage
from operators.kubernetes.step import Decision, placement_from, step
from orchestrator.backends.base import Placement
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.config import PRICE_CATALOG_ENV, KubeConfig
from orchestrator.backends.kubernetes.manifests import Owner, build_pod, build_service, service_name
from orchestrator.controller.placement import catalog_candidates
from orchestrator.errors import NotFoundError, SpecError, UserError
from orchestrator.spec import JobSpec
from orchestrator.state.status import JobStatus


def job_spec(name: str, namespace: str, spec: Mapping[str, Any]) -> JobSpec:
    """The JobSpec of a GPUJob: ``name`` defaults to the resource's name, ``user`` to its namespace."""
    data = {"name": name, "user": namespace, **dict(spec)}
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        problems = [f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise SpecError(f"GPUJob {namespace}/{name}", problems) from None


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch turning ``old`` into ``new`` (removed keys become ``null``)."""
    patch: dict[str, Any] = {k: None for k in old if k not in new}
    patch.update(new)
    return patch


def _candidates(spec: JobSpec) -> tuple[Placement | None, Placement | None]:
    """Cheapest (spot, on-demand) placements; from the chart's price catalog when one is mounted."""
    found = catalog_candidates(spec, os.environ.get(PRICE_CATALOG_ENV))
    return found.cheapest_spot, found.on_demand


def _created_at(body: Mapping[str, Any], now: datetime) -> datetime:
    text = body.get("metadata", {}).get("creationTimestamp")
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else now


def reconcile_job(
    name: str, namespace: str, config: KubeConfig, now: datetime, api: Any | None = None
) -> Decision | None:
    """Reconcile one GPUJob; ``None`` when it is gone. Errors from the API propagate (kopf retries)."""
    try:
        body = client.get_gpujob(name, namespace, api)
    except NotFoundError:
        return None
    if body.get("metadata", {}).get("deletionTimestamp"):
        return None  # being deleted: the delete handler cleans up; never create pods again
    status = dict(body.get("status") or {})
    if status.get("state") and JobStatus(status["state"]).terminal:
        return None
    try:
        spec = job_spec(name, namespace, body.get("spec") or {})
        refused = admission_refusal(spec, namespace, now, api) if first_sight(status) else None
        candidates = _candidates(spec) if refused is None else (None, None)
    except UserError as err:
        failed = {**status, "state": str(JobStatus.FAILED), "message": err.message}
        client.patch_gpujob_status(name, namespace, status_patch(status, failed), api)
        return Decision(failed, events=(err.message,))
    if refused is not None:  # refused at admission: FAILED once, one event; never looked at again
        failed = refused_status(status, refused, now)
        client.patch_gpujob_status(name, namespace, status_patch(status, failed), api)
        return Decision(failed, events=(f"{JobStatus.FAILED} ({refused.reason}): {failed['message']}",))
    pods = client.list_job_pods(name, namespace, api)
    nodes = client.list_node_names(api)
    decision = step(
        spec, status, pods, nodes, candidates, name, _created_at(body, now), now, config.regrow_after_s
    )
    for pod_to_delete in decision.delete:
        client.delete_pod(pod_to_delete, namespace, api=api)
    placement = placement_from(decision.status.get("placement"))
    if decision.create and placement is not None:
        owner = Owner(name=name, uid=str(body["metadata"].get("uid", "")))
        client.ensure_service(build_service(name, namespace, config, owner), api)
        attempt = int(decision.status.get("attempt", 1))
        for index in decision.create:
            pod = build_pod(
                spec,
                placement,
                job=name,
                namespace=namespace,
                attempt=attempt,
                node_index=index,
                config=config,
                owner=owner,
            )
            client.create_pod(pod, api)
    # The monitors' windows up to now, in the same status patch (the pods of an ending job are still listed).
    with_usage, usage_events = collect_gpu_usage(decision.status, pods, namespace, now, api)
    decision = replace(decision, status=with_usage, events=decision.events + usage_events)
    if decision.status != status:
        client.patch_gpujob_status(name, namespace, status_patch(status, decision.status), api)
    return decision


def cleanup_job(name: str, namespace: str, api: Any | None = None) -> int:
    """Delete the job's pods and rendezvous Service; returns how many pods were deleted."""
    pods = client.list_job_pods(name, namespace, api)
    for pod in pods:
        client.delete_pod(pod["metadata"]["name"], namespace, grace_s=None, api=api)
    client.delete_service(service_name(name), namespace, api)
    return len(pods)
