"""One reconcile pass of a GPUJob against the API server: the host of the one controller engine.

The GPUJob's ``.status`` is the job's store, pods are the engine's effects. The decision is one call,
:func:`operators.kubernetes.step.step` (gpuctl's reconcile and :func:`orchestrator.controller.engine.apply`
on the job's status and pods); the training progress and the GPU use are read from the pods' sidecar
logs (:mod:`operators.kubernetes.progress`, :mod:`operators.kubernetes.gpu_usage`). Kept apart from
the kopf handlers so anything can call it.

One GPUJob's error stays that GPUJob's (:func:`reconcile_isolated`, the rule of the local controller's
:func:`orchestrator.controller.loop.permanent_failure`): an error in the job itself (an unexpected
exception: a gpuctl bug, or data it did not expect, such as a progress value no number can hold) ends
it ``FAILED`` (``internal_error``) through the engine, its pods deleted and one Event saying why; a
fault around it (the API server busy or unreachable: :class:`~orchestrator.errors.GpuctlError`,
``OSError``, the ``kubernetes`` client's errors) propagates, and kopf retries the pass.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, assert_never

from pydantic import ValidationError

from operators.kubernetes.admission import admission_refusal, first_sight, refused_status
from operators.kubernetes.gpu_usage import collect_gpu_usage, read_monitor_logs
from operators.kubernetes.progress import with_progress
from operators.kubernetes.rightsize import measurements, same_job, sized_spec, with_throughput
from operators.kubernetes.step import (
    Decision,
    being_deleted,
    fail,
    leftover_pods,
    load_state,
    pod_attempt,
    pods_of,
    set_condition,
    step,
    with_state,
)
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.config import PRICE_CATALOG_ENV, KubeConfig
from orchestrator.backends.kubernetes.manifests import (
    Owner,
    build_pod,
    build_service,
    check_kube_env,
    derived_name,
    pod_name,
    service_name,
)
from orchestrator.controller import engine
from orchestrator.controller.placement import Candidates, catalog_candidates
from orchestrator.errors import GpuctlError, InternalError, NotFoundError, SpecError, UserError
from orchestrator.policies import GpuMeasurement
from orchestrator.spec import JobSpec
from orchestrator.spec import RightSize as RightSizeMode
from orchestrator.spec.model import NAME_PATTERN
from orchestrator.state.job_state import JobState, NodeLaunch
from orchestrator.state.status import FailureReason, JobStatus

log = logging.getLogger(__name__)

MESSAGE_MAX = 500
"""The longest ``status.message`` (and Event) an unexpected error gives."""

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


def _candidates(spec: JobSpec) -> Candidates:
    """Each allowed zone's spot placement and the on-demand one; from the chart's price catalog when
    one is mounted."""
    return catalog_candidates(spec, os.environ.get(PRICE_CATALOG_ENV))


def _created_at(body: Mapping[str, Any], now: datetime) -> datetime:
    text = body.get("metadata", {}).get("creationTimestamp")
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else now


def reconcile_job(
    name: str, namespace: str, config: KubeConfig, now: datetime, api: Any | None = None
) -> Decision | None:
    """Reconcile one GPUJob; ``None`` when it is gone. Errors from the API propagate (kopf retries).

    The order makes it crash safe, as the local driver's: (a) finish what an interrupted pass left
    (create the pods of nodes recorded as intents, delete those of nodes recorded as ended); (b, c)
    observe and decide (:func:`step`: reconcile and the engine, pure); (d) write the status; (e) only
    then carry out the engine's effects, recording created pods as launched in a second patch. A crash
    anywhere leaves a status from which the next pass creates each node's pod exactly once."""
    try:
        body = client.get_gpujob(name, namespace, api)
    except NotFoundError:
        return None
    if body.get("metadata", {}).get("deletionTimestamp"):
        return None  # being deleted: the delete handler cleans up; never create pods again
    status = dict(body.get("status") or {})
    if status.get("state") and JobStatus(status["state"]).terminal:
        _delete_leftovers(name, namespace, body, status, api)
        return None
    try:
        spec = job_spec(name, namespace, body.get("spec") or {})
        refused = admission_refusal(spec, namespace, now, api) if first_sight(status) else None
        placed = sized_spec(spec, load_state(status, name))  # right-size (auto) picked its GPU type
        candidates = _candidates(placed) if refused is None else Candidates({}, None)
    except UserError as err:  # the job's own data: FAILED once; API errors propagate and kopf retries
        return _fail(name, namespace, status, str(FailureReason.INVALID_SPEC), err.message, now, api)
    if refused is not None:  # refused at admission: FAILED once, one event; never looked at again
        failed = refused_status(status, refused, now)
        client.patch_gpujob_status(name, namespace, status_patch(status, failed), api)
        return Decision(failed, events=(f"{JobStatus.FAILED} ({refused.reason}): {failed['message']}",))
    owner = Owner(name=name, uid=str(body["metadata"].get("uid", "")))
    pods = client.list_job_pods(name, namespace, api, owner.uid)  # only this GPUJob's pods, ever
    nodes = client.list_node_names(api)
    pods_host = _Pods(placed, owner, namespace, config, api)
    try:
        # (a) what a crash interrupted
        state, acted = pods_host.finish_interrupted(load_state(status, name), pods)
        if acted:  # observe what it made of the pods
            pods = client.list_job_pods(name, namespace, api, owner.uid)
        # (b, c) observe (the monitors' logs, read once: training progress and GPU use) and decide
        logs = read_monitor_logs(status, pods, namespace, now, api)
        seen = with_throughput(with_progress(with_state(status, state), logs.values()), state)
        measured = _measured(spec, seen, state, name, namespace, api)
        decision = step(
            spec, seen, pods, nodes, candidates, name, _created_at(body, now), now,
            config.regrow_after_s, config.spot_shortage_after_s, measured,
        )  # fmt: skip
        # The monitors' windows up to now, in the same status patch (the pods of an ending job are still listed).
        written, usage_events = collect_gpu_usage({**decision.status, "user": spec.user}, pods, logs)
        # (d) the status first
        if written != status:
            client.patch_gpujob_status(name, namespace, status_patch(status, written), api)
        # (e) then the effects
        written = pods_host.carry_out(decision, written, pods)
    except UserError as err:  # a pod rejected, or its name taken by another: retrying cannot help
        return _fail_launch(name, namespace, pods_host, err.message, now)
    return replace(decision, status=written, events=decision.events + usage_events)


def _measured(
    spec: JobSpec, status: Mapping[str, Any], state: JobState, name: str, namespace: str, api: Any | None
) -> tuple[GpuMeasurement, ...]:
    """What this job's runs measured per GPU type, this GPUJob's and those of the namespace's other
    GPUJobs of the same name and team; read only when right-size is on and the job may be placed in
    this pass (not while it launches or runs: right-size acts when a job is placed, as locally)."""
    settled = state.status in (JobStatus.LAUNCHING, JobStatus.RUNNING) or state.status.terminal
    if spec.policies.right_size is RightSizeMode.OFF or settled:
        return ()
    others = [
        dict(job.get("status") or {})
        for job in client.list_gpujobs(namespace, api)
        if (job.get("metadata") or {}).get("name") != name and same_job(spec, job)
    ]
    return measurements([status, *others])


class _Pods:
    """The engine's effects on Kubernetes: a node is a pod, created and deleted for the one GPUJob."""

    def __init__(
        self, spec: JobSpec, owner: Owner, namespace: str, config: KubeConfig, api: Any | None
    ) -> None:
        self.spec, self.owner, self.namespace, self.config, self.api = spec, owner, namespace, config, api

    def finish_interrupted(self, state: JobState, pods: Sequence[Mapping[str, Any]]) -> tuple[JobState, bool]:
        """Create the pods of nodes recorded as intents (idempotent), and delete the pods the
        controller is done with that are not being deleted yet. Returns the state with the created
        nodes recorded launched (written with the pass's status patch), and whether any pod was
        created or deleted."""
        leftovers = [p for p in leftover_pods(state, pods) if not being_deleted(p)]
        for pod in leftovers:
            self.delete(pod)
        intents = state.node_ids(NodeLaunch.INTENT)
        if not intents or state.status.terminal:
            return state, bool(leftovers)
        created = self.create(state, intents, pods)
        return engine.mark_launched(state, created), bool(leftovers) or bool(created)

    def carry_out(
        self, decision: Decision, written: dict[str, Any], pods: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """The engine's effects, in order, after the status was written; returns the status written."""
        assert decision.state is not None
        state = decision.state
        for effect in decision.effects:
            if isinstance(effect, engine.LaunchNodes):
                launched = engine.mark_launched(state, self.create(state, effect.node_ids, pods))
                if launched != state:
                    new = with_state(written, launched)
                    client.patch_gpujob_status(
                        self.owner.name, self.namespace, status_patch(written, new), self.api
                    )
                    state, written = launched, new
            elif isinstance(effect, engine.StopNodes | engine.ReleaseNodes):
                # The pods' terminationGracePeriodSeconds is the spec's notice grace (StopNodes' grace_s).
                for pod in pods_of(effect.attempt, effect.node_ids, pods).values():
                    if not being_deleted(pod):
                        self.delete(pod)
            else:
                assert_never(effect)
        return written

    def create(
        self, state: JobState, node_ids: Sequence[str], pods: Sequence[Mapping[str, Any]]
    ) -> list[str]:
        """Create the pods of ``node_ids`` (a pod of the attempt that exists already counts as created;
        a name still held by an older attempt's pod waits for the next pass). Returns the created."""
        placement = engine.placement_of(state.placement)
        assert placement is not None, "nodes are launched on the attempt's placement"
        by_name = {str(p["metadata"]["name"]): p for p in pods}
        created: list[str] = []
        service = False
        for node in node_ids:
            index = engine.node_index(node)
            existing = by_name.get(pod_name(self.owner.name, index))
            if existing is not None:
                if pod_attempt(existing) == state.attempt:
                    created.append(node)
                continue
            if not service:
                config, owner = self.config, self.owner
                client.ensure_service(
                    build_service(owner.name, self.namespace, config, owner), self.api, owner.uid
                )
                service = True
            pod = build_pod(
                self.spec,
                placement,
                job=self.owner.name,
                namespace=self.namespace,
                attempt=state.attempt,
                node_index=index,
                config=self.config,
                owner=self.owner,
                attempt_nodes=len(state.attempt_nodes),
            )
            client.create_pod(pod, self.api, self.owner.uid)
            created.append(node)
        return created

    def delete(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]  # one of this GPUJob's pods (listed by owner uid): that very pod only
        client.delete_pod(str(meta["name"]), self.namespace, api=self.api, uid=meta.get("uid"))


def _delete_leftovers(
    name: str, namespace: str, body: Mapping[str, Any], status: Mapping[str, Any], api: Any | None
) -> None:
    """An ended job's pods that a pass interrupted after its status patch left behind: deleted."""
    if not int(status.get("attempt") or 0):
        return  # never placed (refused at admission, say): it has no pods
    _delete_pods(name, namespace, body, api)


def _delete_pods(name: str, namespace: str, body: Mapping[str, Any], api: Any | None) -> None:
    """Delete the GPUJob's pods not being deleted yet (each with its own grace period: a checkpoint)."""
    uid = str(body["metadata"].get("uid", ""))
    for pod in client.list_job_pods(name, namespace, api, uid):
        meta = pod["metadata"]
        if not being_deleted(pod):
            client.delete_pod(str(meta["name"]), namespace, api=api, uid=meta.get("uid"))


def reconcile_isolated(
    name: str, namespace: str, config: KubeConfig, now: datetime, api: Any | None = None
) -> Decision | None:
    """:func:`reconcile_job`, whatever this GPUJob's data does: an error in the job itself
    (:func:`permanent_failure`) ends it FAILED through the engine (:func:`fail_unexpected`); a fault
    around it propagates (the caller retries the pass)."""
    try:
        return reconcile_job(name, namespace, config, now, api)
    except Exception as exc:  # one GPUJob's data must not freeze it, nor stop the others
        reason = permanent_failure(exc)
        if reason is None:
            raise
        return fail_unexpected(name, namespace, reason, exc, now, api)


def permanent_failure(exc: BaseException) -> FailureReason | None:
    """The failure reason when ``exc`` is an error in the job itself; None for a fault around it. The
    local controller's rule (:func:`orchestrator.controller.loop.permanent_failure`), with the API
    server's errors for the cluster manager's: a :class:`~orchestrator.errors.GpuctlError` (each
    ``ApiException`` is mapped to one), ``OSError`` or an unmapped ``kubernetes`` client error is
    transient; an :class:`InternalError` or any other exception (``ValueError``, ``OverflowError``,
    ``TypeError``, ``KeyError``, ...: gpuctl's own code met data it cannot handle) is not."""
    if isinstance(exc, SpecError):
        return FailureReason.INVALID_SPEC
    if isinstance(exc, InternalError):
        return FailureReason.INTERNAL_ERROR
    if isinstance(exc, GpuctlError | OSError) or client.is_api_error(exc):
        return None
    return FailureReason.INTERNAL_ERROR


def fail_unexpected(
    name: str, namespace: str, reason: FailureReason, exc: BaseException, now: datetime, api: Any | None
) -> Decision | None:
    """End a GPUJob whose pass met an error in its own data: FAILED with ``reason`` through the engine
    (:func:`~operators.kubernetes.step.fail`: its nodes ended, its open segment closed, a ``Failed``
    condition, one event) from the status as stored, then its pods deleted, so it is billed no more.
    A stored status the engine cannot read is failed from an empty one (its keys are removed). An
    ended or deleted GPUJob keeps its status (its pods are deleted); returns None then."""
    log.error("GPUJob %s/%s: unexpected error; failing the job", namespace, name, exc_info=exc)
    what = exc.what if isinstance(exc, GpuctlError) else str(exc)
    message = _clip(f"gpuctl could not handle this job ({type(exc).__name__}: {what}); please report it")
    try:
        body = client.get_gpujob(name, namespace, api)
    except NotFoundError:
        return None
    if body.get("metadata", {}).get("deletionTimestamp"):
        return None  # the delete handler cleans up
    status = dict(body.get("status") or {})
    if _ended(status):
        _delete_pods(name, namespace, body, api)
        return None
    try:
        failed = fail(status, name, reason, message, now)
    except Exception:  # the stored state itself is what cannot be read
        log.warning(
            "GPUJob %s/%s: its status cannot be read; failing it afresh", namespace, name, exc_info=True
        )
        failed = fail({}, name, reason, message, now)
    final = {**failed.status, "user": namespace}
    client.patch_gpujob_status(name, namespace, status_patch(status, final), api)
    _delete_pods(name, namespace, body, api)
    return replace(failed, status=final)


def _ended(status: Mapping[str, Any]) -> bool:
    state = status.get("state")
    return isinstance(state, str) and state in {str(s) for s in JobStatus if s.terminal}


def _clip(text: str, limit: int = MESSAGE_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fail_launch(name: str, namespace: str, pods_host: _Pods, message: str, now: datetime) -> Decision:
    """A pod could not be created: the job's pods and Service go, and the job FAILED (backend_error)
    through the engine, from the status as written now."""
    api = pods_host.api
    cleanup_job(name, namespace, api, pods_host.owner.uid)
    status = dict(client.get_gpujob(name, namespace, api).get("status") or {})
    failed = fail(status, name, FailureReason.BACKEND_ERROR, message, now)
    final = {**failed.status, "user": pods_host.spec.user}
    client.patch_gpujob_status(name, namespace, status_patch(status, final), api)
    return replace(failed, status=final)


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
