"""Talking to a Kubernetes API server with the official ``kubernetes`` client.

Used by ``gpuctl submit --backend kubernetes`` (GPUJob functions) and by the operator (pods,
services, nodes).
Every :class:`ApiException` is mapped to :mod:`orchestrator.errors` here, at the boundary.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from orchestrator import extras
from orchestrator.backends.kubernetes.cluster_zones import NODEPOOL_GROUP, NODEPOOL_PLURAL, NODEPOOL_VERSION
from orchestrator.backends.kubernetes.crd import API_VERSION, CANCEL_FIELD, GROUP, KIND, PLURAL, VERSION
from orchestrator.backends.kubernetes.manifests import ANNOTATION_JOB, LABEL_ATTEMPT, LABEL_JOB, job_label
from orchestrator.errors import (
    GpuctlError,
    InternalError,
    NotFoundError,
    PermanentError,
    TemporaryError,
    UserError,
)
from orchestrator.spec import JobSpec

try:
    import kubernetes.client as k8s
    import kubernetes.config as k8s_config
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError as Urllib3Error

    HAVE_CLIENT = True
except ImportError:  # pragma: no cover - depends on the installation
    HAVE_CLIENT = False


def _require_client() -> None:
    if not HAVE_CLIENT:
        raise extras.missing("kubernetes", "the Kubernetes backend")


def _custom_api(api: Any | None) -> Any:
    """The custom-objects API on ``api``, or on a client from :func:`api_client`."""
    _require_client()
    return k8s.CustomObjectsApi(api or api_client())


def _core_api(api: Any | None) -> Any:
    """The core/v1 API on ``api``, or on a client from :func:`api_client`."""
    _require_client()
    return k8s.CoreV1Api(api or api_client())


def api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ApiClient from in-cluster credentials, else from kubeconfig (``$KUBECONFIG`` or ~/.kube)."""
    _require_client()
    configuration = k8s.Configuration()
    try:
        if kubeconfig is None and context is None:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
                return k8s.ApiClient(configuration)
            except k8s_config.ConfigException:
                pass
        # $KUBECONFIG is read now: the client library fixes its default when it is first imported.
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig or os.environ.get("KUBECONFIG"),
            context=context,
            client_configuration=configuration,
        )
    except (k8s_config.ConfigException, OSError) as exc:
        raise UserError(
            f"cannot load Kubernetes credentials: {exc}",
            "set KUBECONFIG or run inside a cluster (check `kubectl config current-context`)",
        ) from exc
    return k8s.ApiClient(configuration)


def api_client_for(host: str) -> Any:
    """An ApiClient for a plain URL without credentials (tests, `kubectl proxy`)."""
    _require_client()
    configuration = k8s.Configuration(host=host)
    return k8s.ApiClient(configuration)


def map_api_error(exc: Exception, what: str) -> GpuctlError:
    """The gpuctl error for a failed API call; ``what`` names the operation ("create GPUJob x")."""
    if isinstance(exc, ApiException):
        reason = exc.reason
        with suppress(ValueError, AttributeError):
            reason = json.loads(exc.body or "{}").get("message", reason)
        status = exc.status or 0
        if status == 404:
            return NotFoundError(f"cannot {what}: not found ({reason})", "check the name and namespace")
        if status == 409:
            return UserError(f"cannot {what}: it already exists ({reason})", "pick another name or delete it")
        if status in (401, 403):
            return PermanentError(
                f"cannot {what}: access denied ({reason})",
                "check the service account / kubeconfig user and the chart's RBAC rules",
            )
        if status in (400, 422):
            return UserError(f"cannot {what}: the API server rejected it ({reason})", "fix the named field")
        if status == 429 or status >= 500:
            return TemporaryError(f"cannot {what}: API server busy ({status} {reason})", "retry later")
        return PermanentError(f"cannot {what}: HTTP {status} {reason}")
    return TemporaryError(
        f"cannot {what}: Kubernetes API not reachable ({exc})",
        "check the cluster address and network (kubectl cluster-info)",
    )


@contextmanager
def _mapped(what: str) -> Iterator[None]:
    try:
        yield
    except (ApiException, Urllib3Error) as exc:
        raise map_api_error(exc, what) from exc


def is_api_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the ``kubernetes`` client's own (an HTTP status, a connection failure) that
    reached the caller unmapped: a fault around the job, never one in its data."""
    return HAVE_CLIENT and isinstance(exc, ApiException | Urllib3Error)


def check_finite(body: Any, what: str, path: str = "") -> None:
    """Refuse a body holding a float that is NaN or infinite (JSON has none: the ``kubernetes``
    client would send the invalid token ``NaN``): :class:`InternalError` naming the field. Every
    body this module sends is checked, so a non-finite number never reaches the API server."""
    if isinstance(body, float) and not math.isfinite(body):
        raise InternalError(f"cannot {what}: {path or 'the body'} is {body!r}, which JSON cannot hold")
    if isinstance(body, dict):
        for key, value in body.items():
            check_finite(value, what, f"{path}.{key}" if path else str(key))
    elif isinstance(body, list | tuple):
        for index, value in enumerate(body):
            check_finite(value, what, f"{path}[{index}]")


def _call(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    with _mapped(what):
        return fn(*args, **kwargs)


def _dict(api: Any, obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = api.sanitize_for_serialization(obj)
    return out


def gpujob_manifest(spec: JobSpec, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": spec.name, "namespace": namespace, "labels": dict(spec.labels)},
        "spec": spec.to_dict(),
    }


def create_gpujob(spec: JobSpec, namespace: str, api: Any | None = None) -> dict[str, Any]:
    api = api or api_client()
    body = gpujob_manifest(spec, namespace)
    check_finite(body, f"create GPUJob {spec.name}")
    custom = k8s.CustomObjectsApi(api)
    created: dict[str, Any] = _call(
        f"create GPUJob {spec.name}",
        custom.create_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        body,
    )
    return created


def get_gpujob(name: str, namespace: str, api: Any | None = None) -> dict[str, Any]:
    custom = _custom_api(api)
    obj: dict[str, Any] = _call(
        f"get GPUJob {name}", custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name
    )
    return obj


def list_gpujobs(namespace: str, api: Any | None = None) -> list[dict[str, Any]]:
    custom = _custom_api(api)
    listing = _call("list GPUJobs", custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL)
    return list(listing.get("items", []))


def list_gpujobs_everywhere(api: Any | None = None) -> list[dict[str, Any]]:
    """The GPUJobs of every namespace (needs ``list`` on gpujobs cluster-wide)."""
    custom = _custom_api(api)
    listing = _call(
        "list GPUJobs in all namespaces", custom.list_cluster_custom_object, GROUP, VERSION, PLURAL
    )
    return list(listing.get("items", []))


def list_namespace_names(api: Any | None = None) -> list[str]:
    """The cluster's namespaces (PermanentError: this account may not list them)."""
    core = _core_api(api)
    return [str(n.metadata.name) for n in _call("list namespaces", core.list_namespace).items]


def current_context() -> str | None:
    """The name of the kubeconfig's current context (``$KUBECONFIG`` or ~/.kube/config); None without one."""
    _require_client()
    try:
        _, active = k8s_config.list_kube_config_contexts(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]
    except (k8s_config.ConfigException, OSError):
        return None
    return str(active["name"]) if active and active.get("name") else None


def request_gpujob_cancel(name: str, namespace: str, api: Any | None = None) -> None:
    """Mark the GPUJob cancelled (``spec.cancel: true``, a merge patch): the operator's next pass
    cancels it through the engine; the GPUJob stays."""
    custom = _custom_api(api)
    _call(
        f"cancel GPUJob {name}",
        custom.patch_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        {"spec": {CANCEL_FIELD: True}},
    )


def delete_gpujob(name: str, namespace: str, api: Any | None = None) -> None:
    custom = _custom_api(api)
    _call(
        f"delete GPUJob {name}",
        custom.delete_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
    )


def patch_gpujob_status(name: str, namespace: str, status: dict[str, Any], api: Any | None = None) -> None:
    """Merge-patch the GPUJob's ``.status``; a non-finite number in it is refused (:func:`check_finite`)."""
    what = f"update status of GPUJob {name}"
    check_finite({"status": status}, what)
    custom = _custom_api(api)
    _call(
        what,
        custom.patch_namespaced_custom_object_status,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        {"status": status},
    )


def belongs_to(obj: dict[str, Any], job: str, owner_uid: str | None) -> bool:
    """Whether a pod or Service is the job's: its job label, and owned by the GPUJob of ``owner_uid``
    (``None``: a job without a GPUJob, whose objects have no owner)."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(LABEL_JOB) != job_label(job):
        return False
    uids = {str(ref.get("uid")) for ref in meta.get("ownerReferences") or []}
    return owner_uid in uids if owner_uid is not None else not uids


def list_job_pods(
    job: str, namespace: str, api: Any | None = None, owner_uid: str | None = None
) -> list[dict[str, Any]]:
    """The job's pods (:func:`belongs_to`; ``owner_uid=None`` also accepts owned pods with the label).

    Filters on the client too: some API emulators ignore selectors."""
    api = api or api_client()
    core = k8s.CoreV1Api(api)
    label = job_label(job)
    listing = _call(
        f"list pods of {job}", core.list_namespaced_pod, namespace, label_selector=f"{LABEL_JOB}={label}"
    )
    pods = [_dict(api, p) for p in listing.items]
    if owner_uid is not None:
        return [p for p in pods if belongs_to(p, job, owner_uid)]
    return [p for p in pods if (p.get("metadata", {}).get("labels") or {}).get(LABEL_JOB) == label]


def list_gpuctl_pods(namespace: str, api: Any | None = None) -> list[dict[str, Any]]:
    """Every gpuctl job's pods of ``namespace`` (those with the job label), in one LIST."""
    api = api or api_client()
    core = k8s.CoreV1Api(api)
    listing = _call(
        f"list pods of {namespace}", core.list_namespaced_pod, namespace, label_selector=LABEL_JOB
    )
    return [
        p for p in (_dict(api, p) for p in listing.items) if LABEL_JOB in (p["metadata"].get("labels") or {})
    ]


def _not_ours(kind: str, name: str, job: str) -> UserError:
    return UserError(
        f"a {kind} named {name} already exists and does not belong to job {job}",
        f"delete or rename that {kind}, or give the job another name",
    )


def create_pod(pod: dict[str, Any], api: Any | None = None, owner_uid: str | None = None) -> None:
    """Create a pod; one of that name that exists already is fine only if it is the same job's
    (label and owner uid) and the same attempt's, else an error: :class:`UserError` for someone else's
    pod (a 409 on it is no success), :class:`TemporaryError` for one of the job's older attempts that
    still holds the name (a pass that listed the pods before it was made; the next pass waits for it
    to go)."""
    api = api or api_client()
    core = k8s.CoreV1Api(api)
    meta = pod["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    job = str(
        (meta.get("annotations") or {}).get(ANNOTATION_JOB) or (meta.get("labels") or {}).get(LABEL_JOB, "")
    )
    check_finite(pod, f"create pod {name}")
    try:
        _call(f"create pod {name}", core.create_namespaced_pod, namespace, pod)
    except UserError as err:
        if "already exists" not in err.what:
            raise
        existing = _dict(api, _call(f"read pod {name}", core.read_namespaced_pod, name, namespace))
        if not belongs_to(existing, job, owner_uid):
            raise _not_ours("pod", name, job) from None
        attempt = (meta.get("labels") or {}).get(LABEL_ATTEMPT)
        if (existing["metadata"].get("labels") or {}).get(LABEL_ATTEMPT) != attempt:
            raise TemporaryError(
                f"cannot create pod {name} of attempt {attempt}: an older attempt's pod still has the name",
                "nothing: the next pass creates it once that pod is gone",
            ) from None


def delete_pod(
    name: str,
    namespace: str,
    grace_s: float | None = None,
    api: Any | None = None,
    uid: str | None = None,
) -> None:
    """Delete a pod; one that is already gone is fine. ``uid``: only that very pod (a precondition)."""
    core = _core_api(api)
    kwargs: dict[str, Any] = {}
    if grace_s is not None:
        kwargs["grace_period_seconds"] = int(grace_s)
    if uid:
        kwargs["body"] = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=uid))
    with suppress(NotFoundError):
        _call(f"delete pod {name}", core.delete_namespaced_pod, name, namespace, **kwargs)


def ensure_service(service: dict[str, Any], api: Any | None = None, owner_uid: str | None = None) -> None:
    """Create the rendezvous Service unless the job's exists; another's of that name is an error."""
    api = api or api_client()
    core = k8s.CoreV1Api(api)
    meta = service["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    check_finite(service, f"create service {name}")
    try:
        _call(f"create service {name}", core.create_namespaced_service, namespace, service)
    except UserError as err:
        if "already exists" not in err.what:
            raise
        existing = _dict(api, _call(f"read service {name}", core.read_namespaced_service, name, namespace))
        job = str(service["metadata"]["annotations"][ANNOTATION_JOB])
        if not belongs_to(existing, job, owner_uid):
            raise _not_ours("service", name, job) from None


def create_secret(secret: dict[str, Any], api: Any | None = None) -> None:
    """Create a Secret (one of that name already there: :class:`UserError` saying "already exists")."""
    core = _core_api(api)
    meta = secret["metadata"]
    _call(f"create secret {meta['name']}", core.create_namespaced_secret, meta["namespace"], secret)


def delete_service(
    name: str, namespace: str, api: Any | None = None, job: str | None = None, owner_uid: str | None = None
) -> None:
    """Delete a Service; with ``job``, only if it is that job's (:func:`belongs_to`)."""
    api = api or api_client()
    core = k8s.CoreV1Api(api)
    with suppress(NotFoundError):
        if job is not None:
            existing = _dict(
                api, _call(f"read service {name}", core.read_namespaced_service, name, namespace)
            )
            if not belongs_to(existing, job, owner_uid):
                return
        _call(f"delete service {name}", core.delete_namespaced_service, name, namespace)


def list_nodes(api: Any | None = None) -> list[dict[str, Any]] | None:
    """The cluster's nodes; ``None`` when this account may not list nodes."""
    core = _core_api(api)
    try:
        listing = _call("list nodes", core.list_node)
    except (PermanentError, NotFoundError):
        return None
    return [_dict(core.api_client, n) for n in listing.items]


def node_names(nodes: list[dict[str, Any]] | None) -> set[str] | None:
    """The names of ``nodes`` (``None``: not listable)."""
    return None if nodes is None else {str(n["metadata"]["name"]) for n in nodes}


def list_node_pools(api: Any | None = None) -> list[dict[str, Any]]:
    """The cluster's Karpenter NodePools (``karpenter.sh/v1``); none when the CRD is not installed
    (404) or this account may not list them."""
    return node_pools_if_listable(api) or []


def node_pools_if_listable(api: Any | None = None) -> list[dict[str, Any]] | None:
    """The cluster's Karpenter NodePools; none when the CRD is not installed (404), ``None`` when this
    account may not list them (a client, unlike the operator, often may not: then nothing is known)."""
    custom = _custom_api(api)
    try:
        listing = _call(
            "list NodePools",
            custom.list_cluster_custom_object,
            NODEPOOL_GROUP,
            NODEPOOL_VERSION,
            NODEPOOL_PLURAL,
        )
    except NotFoundError:
        return []
    except PermanentError:
        return None
    return list(listing.get("items", []))


def pod_logs(
    job: str,
    namespace: str,
    node_index: int | None = None,
    tail_lines: int | None = None,
    api: Any | None = None,
) -> str:
    """The trainer's output of the job's pods (all, or one node), each block headed by the pod name."""
    api = api or api_client()
    core = k8s.CoreV1Api(api)
    try:  # only the GPUJob's own pods, when the job is one
        owner_uid: str | None = str(get_gpujob(job, namespace, api)["metadata"].get("uid", ""))
    except NotFoundError:
        owner_uid = None
    pods = sorted(list_job_pods(job, namespace, api, owner_uid), key=lambda p: p["metadata"]["name"])
    if node_index is not None:
        pods = [p for p in pods if p["metadata"]["labels"].get("gpuctl.dev/node-index") == str(node_index)]
    if not pods:
        raise NotFoundError(f"job {job} has no pods in namespace {namespace}", "check `kubectl get gj -n NS`")
    parts = []
    for pod in pods:
        name = pod["metadata"]["name"]
        kwargs: dict[str, Any] = {"container": "trainer"}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        text = _call(f"read logs of {name}", core.read_namespaced_pod_log, name, namespace, **kwargs)
        parts.append(f"==> {name} <==\n{text}")
    return "\n".join(parts)


def read_container_log(
    pod: str,
    namespace: str,
    container: str,
    since_seconds: int | None = None,
    api: Any | None = None,
    timestamps: bool = False,
) -> str:
    """One container's log (``since_seconds``: only lines logged in that many seconds before now;
    ``timestamps``: each line headed by the time it was logged, RFC 3339 to the nanosecond, and a space).

    Read as raw bytes: older releases of the client (still allowed by pyproject) parse a log that is a
    single JSON document and return its Python ``str()`` instead of the text."""
    core = _core_api(api)
    kwargs: dict[str, Any] = {"container": container, "_preload_content": False}
    if since_seconds is not None:
        kwargs["since_seconds"] = since_seconds
    if timestamps:
        kwargs["timestamps"] = True
    what = f"read the {container} log of pod {pod}"
    with _mapped(what):
        response: Any = core.read_namespaced_pod_log(pod, namespace, **kwargs)  # a urllib3 response
        try:
            data: bytes = response.data
        finally:
            response.release_conn()
    return data.decode("utf-8", errors="replace")


def list_gpujob_events(job: str, namespace: str, api: Any | None = None) -> list[dict[str, Any]]:
    """The core/v1 Events about the GPUJob ``job`` (the operator's job events, posted by kopf). Filters
    on the client too (some API emulators ignore field selectors)."""
    core = k8s.CoreV1Api(api or api_client())
    selector = f"involvedObject.kind={KIND},involvedObject.name={job}"
    with _mapped(f"list events of GPUJob {job}"):
        response: Any = core.list_namespaced_event(namespace, field_selector=selector, _preload_content=False)
        try:
            items: list[dict[str, Any]] = json.loads(response.data or b"{}").get("items", [])
        finally:
            response.release_conn()
    about = [e for e in items if (e.get("involvedObject") or {}).get("kind") == KIND
             and (e.get("involvedObject") or {}).get("name") == job]  # fmt: skip
    return about


def event_time(event: dict[str, Any]) -> str:
    """When an Event happened last (ISO 8601), whichever of its time fields the poster filled."""
    meta = event.get("metadata") or {}
    return str(event.get("lastTimestamp") or event.get("eventTime") or meta.get("creationTimestamp") or "")
