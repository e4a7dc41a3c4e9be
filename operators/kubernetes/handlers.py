"""kopf handlers of the GPUJob operator. Run: ``kopf run -m operators.kubernetes.handlers``.

Stateless: every decision takes the GPUJob's state from its ``.status`` (as kopf's watch delivers it,
or read), its pods and the nodes from listings shared by all passes
(:class:`~orchestrator.backends.kubernetes.listing.ClusterView`), and writes the job's state back into
``.status``; a restarted operator simply carries on. Settings come from the environment
(the Helm chart sets them):

- ``GPUCTL_OPERATOR_CONFIG``: JSON of :class:`~orchestrator.backends.kubernetes.config.KubeConfig`;
- ``GPUCTL_RECONCILE_INTERVAL_S``: seconds between checks of each job (default 10);
- ``GPUCTL_METRICS_PORT``: serve Prometheus metrics on this port;
- ``GPUCTL_INTAKE_PORT``, ``GPUCTL_INTAKE_KEY``: serve the monitors' intake (:mod:`orchestrator.backends.kubernetes.intake`);
- ``GPUCTL_PRICE_CATALOG``: a price catalog CSV replacing the built-in prices;
- ``GPUCTL_KUBE_API_URL``: talk to this URL without credentials (tests, ``kubectl proxy``);
- ``GPUCTL_DATABASE_URL``: the ledger database every job's record and cost is written to
  (:mod:`operators.kubernetes.ledger_db`), ``GPUCTL_CLUSTER_NAME`` naming this cluster in it.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from operators.kubernetes import admission, metrics, notify
from operators.kubernetes.ledger_db import LedgerWrites, ledger_url
from operators.kubernetes.reconcile import reconcile_isolated
from operators.kubernetes.spot_market import TIMER_S
from operators.kubernetes.step import Decision
from orchestrator.backends.kubernetes import client, intake
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.backends.kubernetes.crd import GROUP, PLURAL, VERSION
from orchestrator.backends.kubernetes.listing import ClusterView
from orchestrator.backends.kubernetes.pods import cleanup_job
from orchestrator.errors import GpuctlError, NotFoundError
from orchestrator.state.status import JobStatus

INTERVAL_S = float(os.environ.get("GPUCTL_RECONCILE_INTERVAL_S", str(TIMER_S)))
CANCELLATION_POLLING_S = 0.5  # how soon a deletion goes on once a running tick has ended
FINALIZER = "gpuctl.dev/cleanup"
_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
"""One reconcile at a time per job (create and timer handlers may otherwise overlap)."""
_errors: dict[tuple[str, str], str] = {}
_ledger_errors: dict[tuple[str, str], str] = {}
"""Job -> the ledger database error its passes meet now (logged once, until it changes or clears)."""
ledger = LedgerWrites()
"""What the operator last wrote of each GPUJob to the ledger database (:mod:`operators.kubernetes.ledger_db`)."""
"""Job -> the transient error its passes meet now (posted as an Event once, until it changes or clears)."""
view = ClusterView()
"""The pods and nodes as listed for all passes: one LIST per namespace (pods) and one of nodes per interval."""


def wall_clock() -> datetime:
    return datetime.now(UTC)


clock: Callable[[], datetime] = wall_clock
"""The operator's time, read once per reconcile pass, inside the job's lock. Tests set a simulated
cluster's clock here (:meth:`orchestrator.testing.kube_cluster.SimulatedKubeCluster.operator_clock`)."""


def load_config() -> KubeConfig:
    return KubeConfig.from_env()


def _api() -> Any:
    url = os.environ.get("GPUCTL_KUBE_API_URL")
    return client.api_client_for(url) if url else client.api_client()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.posting.level = 20  # logging.INFO: job events become Kubernetes Events (see _reconcile)
    # A GPUJob deleted while its tick runs waits for the tick to end; kopf checks again only after
    # this polling time (60 s by default), so `kubectl delete` would hang a minute for nothing.
    settings.background.cancellation_polling = CANCELLATION_POLLING_S
    view.clear()  # a started operator knows nothing yet: its first passes read and list
    load_config()  # fail at startup, not at the first job, on bad settings
    admission.check_settings()  # and on a bad budget or price in the chart's values
    notify.start(_api)  # and on a bad notify: section in $GPUCTL_HOME/config.yaml
    port = os.environ.get("GPUCTL_METRICS_PORT")
    if port:
        metrics.serve(int(port))
    intake.serve_from_env()  # monitors push their records (GPUCTL_INTAKE_PORT, GPUCTL_INTAKE_KEY)


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    url = os.environ.get("GPUCTL_KUBE_API_URL")
    if url:
        return kopf.ConnectionInfo(server=url, insecure=True)
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def event_reason(message: str) -> str:
    """The Event's reason: what a job event starts with (``FAILED (over_budget): ...`` -> ``FAILED``)."""
    head = message.split(":", 1)[0].split(" (", 1)[0]
    return head if head and " " not in head and len(head) <= 128 else "GPUJob"


def _reconcile(name: str, namespace: str, body: Any, logger: Any) -> None:
    """One pass of the job, given the GPUJob as kopf's watch has it (taken when its status is the one
    this process last wrote, else read again: :func:`~operators.kubernetes.reconcile.reconcile_job`).
    An error in the job's own data ends it FAILED (internal_error) inside
    :func:`~operators.kubernetes.reconcile.reconcile_isolated`; a fault around it (the API server)
    is a ``kopf.TemporaryError``: kopf retries the pass after the reconcile interval."""
    key = (namespace, name)
    try:
        with _locks[key]:
            now = clock()
            decision = reconcile_isolated(name, namespace, load_config(), now, _api(), view, body, INTERVAL_S)
            _record(key, body, decision, now, logger)
    except Exception as exc:
        raise _retry_later(key, exc, body, logger) from exc
    if _errors.pop(key, None) is not None:
        logger.info("passes work again")
    if decision is not None:
        metrics.record(namespace, name, decision.status)
        notify.send_later(decision.notifications, body.get("spec") or {}, namespace, datetime.now(UTC))
    for message in decision.events if decision else ():
        logger.info(message)
        # One Kubernetes Event per job event (kopf posts log messages only with posting.loggers,
        # which would post its own per-handler messages too).
        kopf.info(body, reason=event_reason(message), message=message)


def _record(key: tuple[str, str], body: Any, decision: Decision | None, now: datetime, logger: Any) -> None:
    """The job's record in the ledger database, when one is configured and the pass changed it
    (:meth:`~operators.kubernetes.ledger_db.LedgerWrites.after_pass`); an ended job's status as kopf
    has it when the pass had nothing to do. A database that cannot be reached is logged once while it
    lasts, and the next pass writes again (the status keeps everything meanwhile)."""
    status = decision.status if decision is not None else dict(body.get("status") or {})
    meta = body.get("metadata") or {}
    if decision is None and (meta.get("deletionTimestamp") or not _ended(status)):
        return  # gone or being deleted (the delete handler writes), or a pass with nothing to write
    try:
        ledger.after_pass(body, status, now)
    except GpuctlError as err:
        if _ledger_errors.get(key) != err.what:
            _ledger_errors[key] = err.what
            logger.warning(
                f"cannot write the job's record to the ledger database (tried again each pass): {err.message}"
            )
        return
    if _ledger_errors.pop(key, None) is not None:
        logger.info("the job's record is written to the ledger database again")


def _ended(status: Mapping[str, Any]) -> bool:
    state = status.get("state")
    return isinstance(state, str) and state in {str(s) for s in JobStatus if s.terminal}


def _retry_later(key: tuple[str, str], exc: Exception, body: Any, logger: Any) -> kopf.TemporaryError:
    """A transient fault of a pass: logged, and posted as one Event while the same message lasts."""
    text = exc.message if isinstance(exc, GpuctlError) else f"{type(exc).__name__}: {exc}"
    first_line = text.splitlines()[0][:500] if text else type(exc).__name__
    if _errors.get(key) != first_line:
        _errors[key] = first_line
        logger.warning(f"pass failed, retried every {INTERVAL_S:g} s: {text}")
        kopf.warn(body, reason="ControllerError", message=first_line)
    return kopf.TemporaryError(first_line, delay=INTERVAL_S)


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
def start(*, name: str, namespace: str | None, body: Any, logger: Any, **_: Any) -> None:
    _reconcile(name, namespace or "default", body, logger)


@kopf.timer(GROUP, VERSION, PLURAL, interval=INTERVAL_S, initial_delay=INTERVAL_S)
def tick(*, name: str, namespace: str | None, body: Any, logger: Any, **_: Any) -> None:
    _reconcile(name, namespace or "default", body, logger)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def stop(*, name: str, namespace: str | None, uid: str | None, body: Any, logger: Any, **_: Any) -> None:
    """The GPUJob's pods and Service deleted, then (with a ledger database) its outcome written, its
    open segment closed when the pods were deleted; kopf removes the finalizer only once both are
    done: a database that cannot be reached is a ``kopf.TemporaryError``, and kopf tries again."""
    ns = namespace or "default"
    with _locks[(ns, name)]:
        now = clock()
        count = cleanup_job(name, ns, _api(), owner_uid=uid or "")
        _record_deletion(name, ns, body, now, logger)
    _locks.pop((ns, name), None)
    view.forget(name, ns)
    _errors.pop((ns, name), None)
    _ledger_errors.pop((ns, name), None)
    metrics.forget(ns, name)
    logger.info(f"deleted {count} pod(s) and the rendezvous service")


def _record_deletion(name: str, namespace: str, body: Any, now: datetime, logger: Any) -> None:
    """The deleted GPUJob's outcome in the ledger database (as its status is now), when one is configured."""
    if ledger_url() is None:
        return
    try:
        current = client.get_gpujob(name, namespace, _api())
    except NotFoundError:
        current = body
    try:
        ledger.on_delete(current, now)
    except GpuctlError as err:
        logger.warning(
            f"cannot write the deleted job's record to the ledger database; kept until it is written: {err.message}"
        )
        raise kopf.TemporaryError(
            f"the job's record is not in the ledger database yet: {err.what}", delay=INTERVAL_S
        ) from err
    logger.info("the job's record and cost are written to the ledger database")
