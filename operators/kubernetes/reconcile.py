"""One reconcile pass of a GPUJob against the API server: the one host's tick on Kubernetes.

:class:`ApiJob` is the host's side for a GPUJob (:mod:`orchestrator.controller.host`): its state is
the GPUJob's ``.status`` (read and written as :class:`~operators.kubernetes.step.StatusJob` does, in one
status patch), its nodes are pods (created and deleted by a
:class:`~orchestrator.backends.kubernetes.pods.PodWriter`), and what the monitors send
(training progress, GPU use: :mod:`orchestrator.backends.kubernetes.progress`, :mod:`orchestrator.backends.kubernetes.gpu_usage`)
is read in :meth:`ApiJob.observe` and written in :meth:`ApiJob.persist`. Admission refusals and failures
are the engine's (:func:`~operators.kubernetes.step.refuse`, :func:`~operators.kubernetes.step.fail`),
and so is a cancel: a GPUJob's ``spec.cancel: true`` is the observation's ``cancel_requested``, as a
local job's cancel flag is (:mod:`orchestrator.backends.kubernetes.gpujob`).
Kept apart from the kopf handlers so anything can call it.

One GPUJob's error stays that GPUJob's (:func:`reconcile_isolated`, the rule of every backend:
:func:`orchestrator.controller.host.permanent_failure`): an error in the job itself (an unexpected
exception: a gpuctl bug, or data it did not expect, such as a progress value no number can hold) ends
it ``FAILED`` (``internal_error``) through the engine, its pods deleted and one Event saying why; a
fault around it (the API server busy or unreachable: :class:`~orchestrator.errors.GpuctlError`,
``OSError``, the ``kubernetes`` client's errors) propagates, and kopf retries the pass.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, assert_never

from operators.kubernetes.admission import admission_refusal, first_sight, user_standing
from operators.kubernetes.rightsize import measurements, same_job, sized_spec
from operators.kubernetes.spot_market import TIMER_S
from operators.kubernetes.step import Decision, StatusJob, decision, fail, load_state, refuse, with_state
from operators.kubernetes.zones import cluster_candidates, cluster_of, narrowed
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.cluster_zones import ClusterZones
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.backends.kubernetes.gpu_usage import collect_gpu_usage
from orchestrator.backends.kubernetes.gpujob import cancel_requested, job_spec, status_patch
from orchestrator.backends.kubernetes.intake import monitor_texts
from orchestrator.backends.kubernetes.listing import ClusterView
from orchestrator.backends.kubernetes.manifests import (
    Owner,
)
from orchestrator.backends.kubernetes.pods import (
    PodWriter,
    being_deleted,
    cleanup_job,
    delete_pods,
    leftover_pods,
    pods_of,
)
from orchestrator.backends.kubernetes.progress import progress_of, with_progress
from orchestrator.controller import engine, host
from orchestrator.controller.placement import Candidates, NoPlacement
from orchestrator.errors import GpuctlError, NotFoundError, UserError
from orchestrator.policies import GpuMeasurement
from orchestrator.spec import JobSpec
from orchestrator.spec import RightSize as RightSizeMode
from orchestrator.state.job_state import JobState, NodeLaunch
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.times import parse_iso

log = logging.getLogger(__name__)

MESSAGE_MAX = 500
"""The longest ``status.message`` (and Event) an unexpected error gives."""


def _candidates(spec: JobSpec, cluster: ClusterZones) -> Candidates:
    """Each allowed zone's spot placement and the on-demand one, of the offers the cluster can run
    (:mod:`operators.kubernetes.zones`); from the chart's price catalog when one is mounted. None when
    the cluster no longer has any zone the job allows (admission refused it if it never had): the
    market policy then finds no capacity when the job must be placed."""
    try:
        return cluster_candidates(spec, cluster)
    except NoPlacement:
        return Candidates({}, None)


def _created_at(body: Mapping[str, Any], now: datetime) -> datetime:
    text = body.get("metadata", {}).get("creationTimestamp")
    return parse_iso(str(text)) if text else now


def reconcile_job(
    name: str,
    namespace: str,
    config: KubeConfig,
    now: datetime,
    api: Any | None = None,
    view: ClusterView | None = None,
    body: Mapping[str, Any] | None = None,
    interval_s: float = TIMER_S,
) -> Decision | None:
    """Reconcile one GPUJob; ``None`` when it is gone (``interval_s``: the operator's timer interval,
    the least the market policy's tick may be). Errors from the API propagate (kopf retries).

    The tick is the one host's (:func:`host.run_tick` on an :class:`ApiJob`), crash safe as on every
    backend: (a) finish what an interrupted pass left (create the pods of nodes recorded as intents,
    delete those of nodes recorded as ended); (b, c) observe and decide (reconcile and the engine,
    pure); (d) write the status; (e) only then carry out the engine's effects, recording created pods
    as launched in a second patch. A crash anywhere leaves a status from which the next pass creates
    each node's pod exactly once.

    ``view``: what the operator's passes share (:class:`ClusterView`): the pods and nodes as listed for
    all passes (one LIST per namespace and interval), and the status this job's previous pass wrote;
    ``body``: the GPUJob as kopf's watch delivered it, taken when its status is that one (else, and
    without a view, the GPUJob is read, and the pass lists the pods and nodes itself). A steady pass
    then costs one request: its status patch, or none when nothing changed."""
    known = view.begin(name, namespace) if view is not None else None
    if body is not None and known is not None and dict(body.get("status") or {}) == known:
        body = copy.deepcopy(dict(body))  # what this process wrote last: as good as a read
    else:
        try:
            body = client.get_gpujob(name, namespace, api)
        except NotFoundError:
            return None
    if body.get("metadata", {}).get("deletionTimestamp"):
        return None  # being deleted: the delete handler cleans up; never create pods again
    status = dict(body.get("status") or {})
    if status.get("state") and JobStatus(status["state"]).terminal:
        _delete_leftovers(name, namespace, body, status, api, view)
        if view is not None:
            view.wrote_status(name, namespace, status)
        return None
    try:
        spec = job_spec(name, namespace, body.get("spec") or {})
        cancel = cancel_requested(body.get("spec") or {})  # a job cancelled before it is seen: not admitted
        cluster = cluster_of(name, namespace, config, api, view)  # the zones it has, this round
        admitting = first_sight(status) and not cancel
        refused = admission_refusal(spec, namespace, now, api, cluster) if admitting else None
        placed = sized_spec(spec, load_state(status, name))  # right-size (auto) picked its GPU type
        candidates = _candidates(placed, cluster) if refused is None else Candidates({}, None)
        placed = narrowed(placed, candidates)  # on-demand pods ask only for zones the cluster has
    except UserError as err:  # the job's own data: FAILED once; API errors propagate and kopf retries
        return _write_ended(name, namespace, status, fail(status, name, INVALID, err.message, now), api)
    if refused is not None:  # refused at admission: FAILED once, one event; never looked at again
        return _write_ended(name, namespace, status, refuse(status, name, refused, now), api)
    side = ApiJob(spec, placed, body, namespace, candidates, config, now, api, view, interval_s)
    try:
        tick = host.run_tick(side, now)
    except UserError as err:  # a pod rejected, or its name taken by another: retrying cannot help
        return _fail_launch(name, namespace, side.pods_host, err.message, now)
    if view is not None:
        view.wrote_status(name, namespace, side.written)
    made = decision(tick, side.written)
    return replace(made, events=made.events + side.usage_events)


INVALID = FailureReason.INVALID_SPEC


class ApiJob(StatusJob):
    """One GPUJob against the API server: the host's :class:`~orchestrator.controller.host.JobSide`
    on Kubernetes. State: the GPUJob's ``.status``; nodes: its pods (``placed``: the spec its pods
    are made of, the GPU type right-size picked)."""

    def __init__(
        self,
        spec: JobSpec,
        placed: JobSpec,
        body: Mapping[str, Any],
        namespace: str,
        candidates: Candidates,
        config: KubeConfig,
        now: datetime,
        api: Any | None,
        view: ClusterView | None = None,
        interval_s: float = TIMER_S,
    ) -> None:
        meta = body["metadata"]
        self.name, self.namespace, self.api, self.view = str(meta["name"]), namespace, api, view
        self.meta = {**meta, "namespace": namespace}
        self.owner = Owner(name=self.name, uid=str(meta.get("uid", "")))
        self.read = dict(body.get("status") or {})
        """The status as read (what the patch turns into the new one)."""
        pods = self._list_pods()  # only this GPUJob's pods, ever
        listed = view.nodes(self.name, namespace, api) if view else client.list_nodes(api)
        nodes = client.node_names(listed)
        super().__init__(
            spec, self.read, pods, nodes, candidates, self.name,
            _created_at(body, now), config.regrow_after_s, config.spot_shortage_after_s,
            cancel_requested=cancel_requested(body.get("spec") or {}), interval_s=interval_s,
        )  # fmt: skip
        self.pods_host = _Pods(placed, self.owner, self.namespace, config, api, view)
        self.logs: dict[str, str] = {}
        self.usage_events: tuple[str, ...] = ()

    def _list_pods(self) -> list[dict[str, Any]]:
        if self.view is not None:
            return self.view.job_pods(self.name, self.namespace, self.owner.uid, self.api)
        return list(client.list_job_pods(self.name, self.namespace, self.api, self.owner.uid))

    def finish_interrupted(self, state: JobState, now: datetime) -> JobState:
        """(a) what a crash interrupted; the pods listed again when any was created or deleted."""
        state, acted = self.pods_host.finish_interrupted(state, self.pods)
        if acted:
            self.pods = self._list_pods()
        return state

    def observe(self, state: JobState, now: datetime) -> host.Observation:
        """(b) the pods, and what the monitors sent (training progress and GPU use, read once)."""
        self.logs = monitor_texts(self.read, self.pods, self.namespace, self.owner, now, self.api)
        seen = with_state(self.read, state)
        self.status = with_progress(seen, self.logs.values())
        measured = with_state(self.status, state.with_progress(host.progress_state(progress_of(self.status))))
        self.measurements = _measured(self.spec, measured, state, self.name, self.namespace, self.api)
        user = user_standing(self.spec, {"metadata": self.meta}, now, self.api)  # its per-user limits
        return replace(super().observe(state, now), user=user)

    def persist(self, tick: host.Tick, now: datetime) -> None:
        """(d) the status first, with the monitors' windows up to now (the pods of an ending job are
        still listed), in one patch."""
        super().persist(tick, now)
        written, self.usage_events = collect_gpu_usage(
            {**self.written, "user": self.spec.user}, self.pods, self.logs
        )
        if written != self.read:
            client.patch_gpujob_status(self.name, self.namespace, status_patch(self.read, written), self.api)
        self.written = written

    def carry_out(self, tick: host.Tick) -> None:
        """(e) then the effects."""
        self.written = self.pods_host.carry_out(tick.state, tick.effects, self.written, self.pods)


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


class _Pods(PodWriter):
    """The engine's effects on Kubernetes, carried out by a :class:`PodWriter` for the one GPUJob."""

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
        self,
        state: JobState,
        effects: Sequence[engine.Effect],
        written: dict[str, Any],
        pods: Sequence[Mapping[str, Any]],
    ) -> dict[str, Any]:
        """The engine's effects, in order, after the status was written; returns the status written."""
        for effect in effects:
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


def _uid(body: Mapping[str, Any]) -> str:
    return str(body["metadata"].get("uid", ""))


def _delete_leftovers(
    name: str,
    namespace: str,
    body: Mapping[str, Any],
    status: Mapping[str, Any],
    api: Any | None,
    view: ClusterView | None,
) -> None:
    """An ended job's pods that a pass interrupted after its status patch left behind: deleted."""
    if not int(status.get("attempt") or 0):
        return  # never placed (refused at admission, say): it has no pods
    delete_pods(name, namespace, _uid(body), api, view)


def reconcile_isolated(
    name: str,
    namespace: str,
    config: KubeConfig,
    now: datetime,
    api: Any | None = None,
    view: ClusterView | None = None,
    body: Mapping[str, Any] | None = None,
    interval_s: float = TIMER_S,
) -> Decision | None:
    """:func:`reconcile_job`, whatever this GPUJob's data does: an error in the job itself
    (:func:`permanent_failure`) ends it FAILED through the engine (:func:`fail_unexpected`); a fault
    around it propagates (the caller retries the pass)."""
    try:
        return reconcile_job(name, namespace, config, now, api, view, body, interval_s)
    except Exception as exc:  # one GPUJob's data must not freeze it, nor stop the others
        reason = permanent_failure(exc)
        if reason is None:
            raise
        return fail_unexpected(name, namespace, reason, exc, now, api)


def permanent_failure(exc: BaseException) -> FailureReason | None:
    """The rule of every backend (:func:`host.permanent_failure`), with the API server's errors for the
    cluster manager's: an unmapped ``kubernetes`` client error is transient too."""
    return None if client.is_api_error(exc) else host.permanent_failure(exc)


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
        delete_pods(name, namespace, _uid(body), api)
        return None
    try:
        failed = fail(status, name, reason, message, now)
    except Exception:  # the stored state itself is what cannot be read
        log.warning(
            "GPUJob %s/%s: its status cannot be read; failing it afresh", namespace, name, exc_info=True
        )
        failed = fail({}, name, reason, message, now)
    written = _write_ended(name, namespace, status, failed, api)
    delete_pods(name, namespace, _uid(body), api)
    return written


def _ended(status: Mapping[str, Any]) -> bool:
    state = status.get("state")
    return isinstance(state, str) and state in {str(s) for s in JobStatus if s.terminal}


def _clip(text: str, limit: int = MESSAGE_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fail_launch(name: str, namespace: str, pods_host: _Pods, message: str, now: datetime) -> Decision:
    """A pod could not be created: the job's pods and Service go, and the job FAILED (backend_error)
    through the engine, from the status as written now."""
    api = pods_host.api
    try:
        cleanup_job(name, namespace, api, pods_host.owner.uid)
    finally:
        pods_host.wrote()
    status = dict(client.get_gpujob(name, namespace, api).get("status") or {})
    return _write_ended(
        name, namespace, status, fail(status, name, FailureReason.BACKEND_ERROR, message, now), api
    )


def _write_ended(
    name: str, namespace: str, status: dict[str, Any], ended: Decision, api: Any | None
) -> Decision:
    """A GPUJob ended through the engine (failed or refused): its status written, once (its cost goes
    to the namespace, as every pass writes)."""
    final = {**ended.status, "user": namespace}
    client.patch_gpujob_status(name, namespace, status_patch(status, final), api)
    return replace(ended, status=final)
