"""One reconcile pass of a GPUJob against the API server: read, decide (pure), apply, write status.

The decision is one call: :func:`operators.kubernetes.step.step`, which runs gpuctl's controller
reconcile step on the job's status and pods; the monitors' GPU use is read from the pods' sidecar logs
(:mod:`operators.kubernetes.gpu_usage`). Kept apart from the kopf handlers so anything can call it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from operators.kubernetes.admission import admission_refusal, first_sight, refused_status
from operators.kubernetes.gpu_usage import collect_gpu_usage
from operators.kubernetes.step import Decision, placement_from, set_condition, step
from orchestrator.backends.base import Placement
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.config import PRICE_CATALOG_ENV, KubeConfig
from orchestrator.backends.kubernetes.manifests import (
    Owner,
    build_pod,
    build_service,
    check_kube_env,
    derived_name,
    service_name,
)
from orchestrator.controller.placement import catalog_candidates
from orchestrator.errors import NotFoundError, SpecError, UserError
from orchestrator.spec import JobSpec
from orchestrator.spec.model import NAME_PATTERN
from orchestrator.state.status import FailureReason, JobStatus

OBJECT_NAME_MAX = 253
OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""A DNS-1123 subdomain: what the API server accepts as a GPUJob's name."""


def job_spec(name: str, namespace: str, spec: Mapping[str, Any]) -> JobSpec:
    """The JobSpec of a GPUJob.

    ``name`` must be a Kubernetes object name (the pods' and Service's names are derived from it); it
    is the spec's name too unless ``spec.name`` is given (a name that is no DNS label gives a derived
    one). ``user`` is always the namespace, whatever ``spec.user`` says: cost goes to who the cluster
    says created the job."""
    if len(name) > OBJECT_NAME_MAX or not OBJECT_NAME.fullmatch(name):
        raise SpecError(
            f"GPUJob {namespace}/{name}",
            [
                f"metadata.name: '{name[:80]}' is not a Kubernetes object name. To fix: recreate the "
                "GPUJob with a name of lowercase letters, digits, '-' and '.', starting and ending with "
                f"a letter or digit, at most {OBJECT_NAME_MAX} characters"
            ],
        )
    default_name = name if re.fullmatch(NAME_PATTERN, name) else derived_name(name)
    data = {"name": default_name, **dict(spec), "user": namespace}
    try:
        job = JobSpec.model_validate(data)
    except ValidationError as exc:
        problems = [f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise SpecError(f"GPUJob {namespace}/{name}", problems) from None
    check_kube_env(job, f"GPUJob {namespace}/{name}")  # from_env: only secretKeyRef reaches pods
    return job


def failed_status(status: Mapping[str, Any], reason: str, message: str, now: datetime) -> dict[str, Any]:
    """``status`` turned FAILED for a reason no retry mends (a bad spec, a name taken by another)."""
    failed = {**status, "state": str(JobStatus.FAILED), "failureReason": reason, "message": message}
    failed["conditions"] = [dict(c) for c in status.get("conditions", [])]
    set_condition(failed, "Failed", True, "Failed", message, now)
    set_condition(failed, "Running", False, "Failed", message, now)
    return failed


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
    except UserError as err:  # the job's own data: FAILED once; API errors propagate and kopf retries
        return _fail(name, namespace, status, str(FailureReason.INVALID_SPEC), err.message, now, api)
    if refused is not None:  # refused at admission: FAILED once, one event; never looked at again
        failed = refused_status(status, refused, now)
        client.patch_gpujob_status(name, namespace, status_patch(status, failed), api)
        return Decision(failed, events=(f"{JobStatus.FAILED} ({refused.reason}): {failed['message']}",))
    owner = Owner(name=name, uid=str(body["metadata"].get("uid", "")))
    pods = client.list_job_pods(name, namespace, api, owner.uid)  # only this GPUJob's pods, ever
    nodes = client.list_node_names(api)
    decision = step(
        spec, status, pods, nodes, candidates, name, _created_at(body, now), now, config.regrow_after_s
    )
    decision = replace(decision, status={**decision.status, "user": spec.user})
    uids = {str(p["metadata"]["name"]): p["metadata"].get("uid") for p in pods}
    for pod_to_delete in decision.delete:
        if pod_to_delete in uids:  # never a pod of that name that is not this job's
            client.delete_pod(pod_to_delete, namespace, api=api, uid=uids[pod_to_delete])
    placement = placement_from(decision.status.get("placement"))
    if decision.create and placement is not None:
        try:
            _launch(spec, placement, decision, owner, namespace, config, api)
        except UserError as err:  # rejected or name taken: retrying cannot help
            cleanup_job(name, namespace, api, owner.uid)
            return _fail(name, namespace, status, str(FailureReason.BACKEND_ERROR), err.message, now, api)
    # The monitors' windows up to now, in the same status patch (the pods of an ending job are still listed).
    with_usage, usage_events = collect_gpu_usage(decision.status, pods, namespace, now, api)
    decision = replace(decision, status=with_usage, events=decision.events + usage_events)
    if decision.status != status:
        client.patch_gpujob_status(name, namespace, status_patch(status, decision.status), api)
    return decision


def _launch(
    spec: JobSpec,
    placement: Placement,
    decision: Decision,
    owner: Owner,
    namespace: str,
    config: KubeConfig,
    api: Any | None,
) -> None:
    client.ensure_service(build_service(owner.name, namespace, config, owner), api, owner.uid)
    attempt = int(decision.status.get("attempt", 1))
    for index in decision.create:
        pod = build_pod(
            spec,
            placement,
            job=owner.name,
            namespace=namespace,
            attempt=attempt,
            node_index=index,
            config=config,
            owner=owner,
        )
        client.create_pod(pod, api, owner.uid)


def _fail(
    name: str,
    namespace: str,
    status: dict[str, Any],
    reason: str,
    message: str,
    now: datetime,
    api: Any | None,
) -> Decision:
    failed = {**failed_status(status, reason, message, now), "user": namespace}
    client.patch_gpujob_status(name, namespace, status_patch(status, failed), api)
    return Decision(failed, events=(message,))


def cleanup_job(name: str, namespace: str, api: Any | None = None, owner_uid: str | None = None) -> int:
    """Delete the job's pods and rendezvous Service (those of the GPUJob ``owner_uid`` only, when
    given); returns how many pods were deleted."""
    pods = client.list_job_pods(name, namespace, api, owner_uid)
    for pod in pods:
        meta = pod["metadata"]
        client.delete_pod(meta["name"], namespace, grace_s=None, api=api, uid=meta.get("uid"))
    client.delete_service(service_name(name), namespace, api, job=name, owner_uid=owner_uid)
    return len(pods)
