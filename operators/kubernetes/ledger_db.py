"""The operator's writes to the ledger database (when one is configured), and the store its reads use.

With ``GPUCTL_DATABASE_URL`` in the operator's environment (the chart's ``database.existingSecret``),
every GPUJob's record goes to that database (:func:`orchestrator.state.external_jobs.record_external_job`:
a ``jobs`` row keyed by the GPUJob's uid, its segments keyed by (uid, index)), so its cost outlives it:

* after a pass that changed what the ledger holds of the job (a segment opened or closed, its state,
  failure reason, attempts, preemptions or restarts): :meth:`LedgerWrites.after_pass`. What was last
  written is kept in memory (a fingerprint per GPUJob), so a steady pass writes nothing. A database that
  cannot be reached then is logged and tried again on the next pass (the GPUJob's status holds it all
  meanwhile);
* when the GPUJob is deleted, before its finalizer is removed: :meth:`LedgerWrites.on_delete`. Its open
  segment is closed when the operator deletes its pods (the nodes ran until then) with end reason
  ``deleted``; a job that had not ended is recorded ``CANCELLED``. A database that cannot be reached
  raises :class:`~orchestrator.errors.TemporaryError`: the delete handler fails, kopf keeps the finalizer
  and tries again, so nothing is lost.

Without the setting the operator writes nothing (the GPUJobs' statuses are the only record). Budgets
and user limits read the database through :func:`ledger_store` and
:class:`orchestrator.controller.kube_spend.KubeSpend` (the sums ``gpuctl submit`` checks too).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from orchestrator.backends.kubernetes.ledger import cluster_name
from orchestrator.controller import actions as act
from orchestrator.controller import engine
from orchestrator.controller.kube_spend import gpujob_ledger_id
from orchestrator.costs.budgets import gpujob_team, gpujob_user
from orchestrator.home import home_dir
from orchestrator.state.database_url import URL_ENV, database_url
from orchestrator.state.external_jobs import ExternalJob, record_external_job
from orchestrator.state.job_state import JobState, SegmentState
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.times import parse_iso_or_none

BACKEND = "kubernetes"
DELETED = "deleted"
"""The end reason of a segment closed because its GPUJob was deleted."""
DELETED_MESSAGE = "the GPUJob was deleted"

log = logging.getLogger(__name__)


def ledger_url() -> str | None:
    """The ledger database's URL from the operator's environment (checked), None without one."""
    if not os.environ.get(URL_ENV, "").strip():
        return None
    return database_url(home_dir())


def ledger_record(
    body: Mapping[str, Any], state: JobState, now: datetime, cluster: str
) -> tuple[ExternalJob, tuple[SegmentState, ...]]:
    """GPUJob ``body``'s record with its state ``state``, as of ``now``, on ``cluster``."""
    meta = body.get("metadata") or {}
    created = parse_iso_or_none(str(meta.get("creationTimestamp") or "")) or now
    job = ExternalJob(
        id=gpujob_ledger_id(body), name=str(meta.get("name") or ""), user=gpujob_user(body), team=gpujob_team(body),
        backend=BACKEND, cluster=cluster, namespace=str(meta.get("namespace") or "default"),
        status=state.status, failure_reason=state.failure_reason, message=state.message,
        spec_json=json.dumps(dict(body.get("spec") or {}), sort_keys=True, default=str),
        submitted_at=min(created, now), updated_at=now, deadline=state.deadline, attempts=state.attempt,
        preemptions=state.preemptions, restarts=state.restarts,
    )  # fmt: skip
    return job, state.segments


def closed_by_deletion(state: JobState, now: datetime, job_id: str) -> JobState:
    """``state`` as a deletion at ``now`` ends it, through the engine: its open segment closed
    (``deleted``), and a job that had not ended ``CANCELLED``."""
    actions: list[act.Action] = []
    if state.open_segment is not None:
        actions.append(act.CloseSegment(DELETED))
    if not state.status.terminal:
        actions.append(act.Transition(JobStatus.CANCELLED, DELETED_MESSAGE))
    if not actions:
        return state
    start = state.open_segment.started_at if state.open_segment is not None else now
    return engine.apply(actions, state, job_id, (), max(now, start)).state


def _fingerprint(job: ExternalJob, segments: tuple[SegmentState, ...]) -> tuple[object, ...]:
    """What a write changes in the ledger, less the time of the write."""
    return (
        job.status, job.failure_reason, job.attempts, job.preemptions, job.restarts, job.team, job.user,
        tuple((s.attempt, s.nodes, s.started_at, s.ended_at, s.end_reason, s.placement) for s in segments),
    )  # fmt: skip


_stores: dict[str, JobStore] = {}
_stores_lock = threading.Lock()


def ledger_store() -> JobStore | None:
    """The ledger database as the job store reads it (opened once per URL), None without one."""
    url = ledger_url()
    if url is None:
        return None
    with _stores_lock:
        store = _stores.get(url)
        if store is None:
            store = _stores[url] = JobStore(home_dir(), read_only=True, url=url)
        return store


class LedgerWrites:
    """The operator's ledger writes, with what it last wrote of each GPUJob (by uid)."""

    def __init__(self) -> None:
        self._written: dict[str, tuple[object, ...]] = {}
        self._deleted_at: dict[str, datetime] = {}
        self._lock = threading.Lock()

    def after_pass(self, body: Mapping[str, Any], status: Mapping[str, Any], now: datetime) -> bool:
        """Write the GPUJob's record when it differs from what was last written (``status``: its
        status after the pass); returns whether it wrote. Database errors propagate (the caller logs
        them; nothing is remembered, so the next pass writes again)."""
        url = ledger_url()
        if url is None or not status.get("state"):
            return False
        try:
            state = JobState.from_status(status)
        except ValueError:  # a status no gpuctl wrote (the pass itself says so): nothing to record
            return False
        job, segments = ledger_record(body, state, now, cluster_name())
        mark = _fingerprint(job, segments)
        with self._lock:
            if self._written.get(job.id) == mark:
                return False
        record_external_job(url, job, segments)
        with self._lock:
            self._written[job.id] = mark
        return True

    def on_delete(self, body: Mapping[str, Any], now: datetime) -> bool:
        """Write the deleted GPUJob's outcome (its open segment closed at ``now``); returns whether a
        database is configured. Database errors propagate: the caller keeps the finalizer."""
        url = ledger_url()
        if url is None:
            return False
        uid = gpujob_ledger_id(body)
        with self._lock:  # a retry closes the segment when the first try did: the pods were deleted then
            now = self._deleted_at.setdefault(uid, now)
        try:
            state = JobState.from_status(dict(body.get("status") or {}))
        except ValueError:  # a status no gpuctl wrote: the job's record without its segments
            log.warning("GPUJob %s: its status cannot be read; recording it without segments", uid)
            state = JobState()
        job, segments = ledger_record(body, closed_by_deletion(state, now, uid), now, cluster_name())
        record_external_job(url, job, segments)
        with self._lock:
            self._written.pop(uid, None)
            self._deleted_at.pop(uid, None)
        return True
