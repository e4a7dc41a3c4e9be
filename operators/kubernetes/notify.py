"""Notifications from the operator: the engine's notifications of a pass, sent in the background.

After a pass has written the GPUJob's status, :func:`send_later` adds the pass's notifications
(:attr:`~operators.kubernetes.step.Decision.notifications`) for the job's targets (its spec's
``notify`` and its team's in ``$GPUCTL_HOME/config.yaml``, if the operator has one) to the operator's
outbox, a SQLite file (``GPUCTL_NOTIFY_OUTBOX``, default in the temporary folder: put it on a volume to
keep what waits across a restart of the operator's pod). A delivery worker thread sends them; one
that cannot be delivered becomes a ``notify_failed`` Kubernetes Event of the GPUJob.

Secret references: ``{secret: NAME, key: KEY}`` is the key of the Secret NAME in the job's namespace
(the operator's service account needs ``get`` on secrets there); ``{from_env: ...}`` is refused, as
in a job's ``env`` on Kubernetes.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from orchestrator.backends.kubernetes.crd import API_VERSION, KIND
from orchestrator.errors import UserError
from orchestrator.home import home_dir
from orchestrator.notify import (
    DeliveryWorker,
    Notification,
    NotifyConfig,
    Outbox,
    Pending,
    RetryPolicy,
    Sender,
    addressed,
    load_notify_config,
)
from orchestrator.spec.env import FromEnv, SecretRef
from orchestrator.spec.notify import NotifyTarget, NotifyTargets
from orchestrator.times import iso_z

OUTBOX_ENV = "GPUCTL_NOTIFY_OUTBOX"
BACKEND = "kubernetes"
_TARGETS: TypeAdapter[list[NotifyTarget]] = TypeAdapter(NotifyTargets)
_worker: DeliveryWorker | None = None
_config = NotifyConfig()


def outbox_path() -> Path:
    return Path(os.environ.get(OUTBOX_ENV) or Path(tempfile.gettempdir()) / "gpuctl-operator-notify.db")


def start(api: Callable[[], Any], retry: RetryPolicy | None = None) -> DeliveryWorker:
    """Start the delivery worker (once per operator process); ``api``: an API client factory."""
    global _worker, _config
    if _worker is None:
        _config = load_notify_config(home_dir())
        outbox = Outbox.standalone(outbox_path(), BACKEND)
        sender = Sender(lambda ref, note: secret_value(ref, note, api()))
        _worker = DeliveryWorker(
            outbox, sender, lambda conn, item, msg: post_failure(api(), item, msg), retry
        )
        _worker.start()
    return _worker


def stop() -> None:
    global _worker
    if _worker is not None:
        _worker.stop()
        _worker = None


def job_targets(spec: Mapping[str, Any]) -> tuple[NotifyTarget, ...]:
    """The GPUJob's own targets (its spec was validated by the pass; an invalid list means none) and
    its team's."""
    try:
        own = _TARGETS.validate_python(spec.get("notify") or [])
    except ValidationError:
        own = []
    return _config.targets_for(str(spec.get("team") or "default"), own)


def send_later(notes: Sequence[Notification], spec: Mapping[str, Any], namespace: str, now: datetime) -> int:
    """Queue ``notes`` (of the GPUJob whose spec is ``spec``) for delivery; returns how many were queued."""
    if _worker is None or not notes:
        return 0
    notes = [dataclasses.replace(n, namespace=namespace) for n in notes]
    added = _worker.outbox.add(addressed(job_targets(spec), notes), now)
    if added:
        _worker.wake()
    return added


def secret_value(ref: SecretRef | FromEnv, note: Notification, api: Any) -> str:
    """The key of a Secret in the notification's namespace."""
    if isinstance(ref, FromEnv):
        raise UserError(
            f"{ref.describe()} is not available on Kubernetes",
            "keep the value in a Secret of the job's namespace and write {secret: NAME, key: KEY}",
        )
    from kubernetes import client as k8s  # the kubernetes extra: the operator has it

    from orchestrator.backends.kubernetes.client import map_api_error

    try:
        secret = k8s.CoreV1Api(api).read_namespaced_secret(ref.secret, note.namespace or "default")
    except Exception as exc:
        raise map_api_error(exc, f"read the Secret {ref.secret}") from None
    data = (secret.data or {}).get(ref.key)
    if data is None:
        raise UserError(f"the Secret {ref.secret} has no key '{ref.key}'", "add the key or fix the reference")
    try:  # errors say what is wrong, never a byte of the value
        return base64.b64decode(data, validate=True).decode("utf-8")
    except ValueError:  # binascii.Error, UnicodeDecodeError
        raise UserError(
            f"the key '{ref.key}' of the Secret {ref.secret} is not UTF-8 text",
            f"store the webhook URL or password as text: `kubectl create secret generic {ref.secret} "
            f"--from-literal={ref.key}=...`",
        ) from None


def post_failure(api: Any, item: Pending, message: str) -> None:
    """A ``notify_failed`` Warning Event of the GPUJob (an error leaves the notification in the outbox,
    and the worker tries again)."""
    from kubernetes import client as k8s

    note = item.notification
    namespace = note.namespace or "default"
    now = iso_z(datetime.now(UTC))
    event: Any = {
        "metadata": {"generateName": f"{note.job}."},
        "involvedObject": {"apiVersion": API_VERSION, "kind": KIND, "name": note.job, "namespace": namespace},
        "reason": "notify_failed", "message": message, "type": "Warning", "count": 1,
        "firstTimestamp": now, "lastTimestamp": now, "source": {"component": "gpuctl-operator"},
    }  # fmt: skip
    k8s.CoreV1Api(api).create_namespaced_event(namespace, event)
