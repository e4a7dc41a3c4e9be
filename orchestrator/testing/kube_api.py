"""An emulated Kubernetes API server (kmock) with what gpuctl's operator needs, and the operator on it.

:class:`KubeApi` serves namespaces, pods (with ``status``), Services, Nodes, Events, pod logs
(:class:`~orchestrator.testing.pod_logs.FakePodLogs`) and GPUJobs (with ``status``) over real HTTP,
so the real ``kubernetes`` client and kopf talk to it. It has no scheduler, kubelet or controllers:
pods stay as created until a test (or :class:`~orchestrator.testing.kube_cluster.SimulatedKubeCluster`)
changes them. ::

    from operators.kubernetes import handlers  # importing registers the operator's kopf handlers

    async with KubeApi() as api:
        monkeypatch.setenv("GPUCTL_KUBE_API_URL", api.url)  # the operator's API server
        await api.start_operator()
        ...
        pods = await api.wait_for("two pods", lambda: ..., timeout=60)

Needs kmock, kopf and kubernetes: ``pip install 'gpuctl[testing]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Self

from orchestrator.backends.kubernetes.crd import GROUP, PLURAL, VERSION
from orchestrator.extras import require
from orchestrator.testing.pod_logs import FakePodLogs

_NEEDED_FOR = "the simulated Kubernetes cluster of orchestrator.testing"
kmock = require("kmock", _NEEDED_FOR)
kopf = require("kopf", _NEEDED_FOR)
k8s = require("kubernetes.client", _NEEDED_FOR)

JOB_RESOURCE = f"{GROUP}/{VERSION}/{PLURAL}"
VERBS = frozenset({"list", "watch", "get", "create", "patch", "update", "delete"})
OPERATOR_STOP_TIMEOUT_S = 30.0
"""How long stopping the operator may take: kopf gives its tasks 5 s, a handler still running
finishes its API calls (the emulator answers until the operator is gone); only a hung one is cut."""
DEFAULT_TIMEOUT_S = 60.0
"""How long :meth:`KubeApi.wait_for` waits by default: generous, a busy machine only makes passing slower."""


_KmockEmulator: Any = kmock.KubernetesEmulator


def request_kind(method: str, path: str, query: Mapping[str, Any] | None = None) -> str:
    """A request's verb and resource, without names: ``GET pods/log``, ``LIST pods``, ``WATCH gpujobs``,
    ``PATCH gpujobs/status``, ``POST secrets`` (the resource is the path's last plural segment, with
    its subresource)."""
    parts = [p for p in path.split("/") if p]
    if "namespaces" in parts and parts.index("namespaces") + 2 < len(parts):
        parts = parts[parts.index("namespaces") + 2 :]  # past .../namespaces/NS
    else:
        parts = parts[2:] if parts[:1] == ["api"] else parts[3:]  # past /api/v1 or /apis/GROUP/VERSION
    verb = method.upper()
    if len(parts) == 1 and verb == "GET":
        verb = "WATCH" if str((query or {}).get("watch", "")).lower() in ("true", "1") else "LIST"
    resource = parts[0] if parts else "/"
    if len(parts) == 3:
        resource = f"{resource}/{parts[2]}"
    return f"{verb} {resource}"


class _Emulator(_KmockEmulator):  # type: ignore[misc]
    """kmock's emulator, naming created objects that only carry ``metadata.generateName`` as the API
    server does (kopf names its Events so): without it every such object after the first would be
    a 409 conflict. It hooks kmock's ``_handle`` (kmock 0.8), which every request passes through;
    tests/testing/test_kube_api.py fails if a kmock release changes that."""

    def __init__(self, history: bool = True) -> None:
        super().__init__()
        self._suffixes = itertools.count(1)
        self.history = history
        self.counts: Counter[str] = Counter()
        """Requests served, by :func:`request_kind`."""
        self.counts_created = 0
        """Create and delete requests served (the index of objects is rebuilt after one)."""
        self._index: dict[tuple[Any, str | None], list[tuple[Any, str, Any]]] = {}
        self._index_size, self._index_created = -1, -1

    async def _handle(self, request: Any) -> Any:
        self.counts[request_kind(request.method, request.url.path, request.url.query)] += 1
        if request.method in ("POST", "DELETE"):
            self.counts_created += 1
        if not self.history:
            # kmock finds a request's reaction by scanning every request served so far (once per
            # reaction): without the history a request costs the same at the 100,000th as at the first.
            self._requests[:] = [request]
        data = request.data if request.action == kmock.action.CREATE else None
        meta = data.get("metadata") if isinstance(data, dict) else None
        if isinstance(meta, dict) and not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{next(self._suffixes):05d}"
        return await super()._handle(request)

    def _KubernetesEmulator__get_objs(self, request: Any, strict: bool) -> list[Any]:
        """kmock's lookup of the objects a request addresses (kmock 0.8's private ``__get_objs``, which
        compares every stored object: a request cost as much as the whole store), answered from an
        index by resource and namespace, rebuilt when objects were added or removed."""
        store: dict[tuple[Any, str | None, str], Any] = self._objects._objects
        if self._index_size != len(store) or self._index_created != self.counts_created:
            self._index.clear()
            for (resource, namespace, name), obj in store.items():
                self._index.setdefault((_resource_key(resource), namespace), []).append((resource, name, obj))
            self._index_size, self._index_created = len(store), self.counts_created
        name, namespace = request.name, request.namespace
        found = []
        matches: dict[Any, bool] = {}
        for (key, obj_namespace), entries in self._index.items():
            if (strict or namespace is not None) and obj_namespace != namespace:
                continue
            for resource, obj_name, obj in entries:
                if name is not None and obj_name != name:
                    continue
                match = matches.get(key)
                if match is None:
                    match = matches[key] = bool(resource == request.resource)
                if not match:
                    break  # one resource per index entry
                found.append(obj)
        return found

    async def _serve_list(self, request: Any) -> Any:
        """kmock's list, filtered by ``labelSelector`` as the API server filters (kmock ignores it): a
        list by label costs what it costs on a cluster, however many other objects there are."""
        listing = await super()._serve_list(request)
        selector = dict(request.params).get("labelSelector")
        if selector:
            listing["items"] = [o for o in listing["items"] if selects(selector, o)]
        return listing


def _resource_key(resource: Any) -> tuple[Any, ...]:
    return (type(resource), *(getattr(resource, a, None) for a in ("group", "version", "plural")))


def selects(selector: str, obj: Mapping[str, Any]) -> bool:
    """Whether ``obj``'s labels match an equality-based label selector (``k=v``, ``k==v``, ``k!=v``,
    ``k``, ``!k``, comma-separated); set-based terms (``in``, ``notin``) are not modelled."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in (t.strip() for t in selector.split(",") if t.strip()):
        if " in " in term or " notin " in term:
            raise NotImplementedError(f"the API emulator does not model the selector {term!r}")
        if "!=" in term:
            key, value = (x.strip() for x in term.split("!=", 1))
            matched = labels.get(key) != value
        elif "=" in term:
            key, value = (x.strip() for x in term.replace("==", "=").split("=", 1))
            matched = labels.get(key) == value
        elif term.startswith("!"):
            matched = term[1:].strip() not in labels
        else:
            matched = term in labels
        if not matched:
            return False
    return True


class _OperatorThread:
    """kopf in an event loop of its own, in a thread, as in a real operator process.

    kopf takes every asyncio task created after it started for one of its own and cancels them all
    when it stops; in the test's event loop that would be the test's and its fixtures' tasks. Its
    sync handlers run in a pool of ours, so that stopping waits for the one still running while the
    emulator still answers (else it fails against a closed server after the test)."""

    def __init__(self) -> None:
        self._stop, self._ready = threading.Event(), threading.Event()
        self._handlers = ThreadPoolExecutor(thread_name_prefix="kopf-handler")
        self._thread = threading.Thread(target=self._run, name="kopf-operator", daemon=True)
        self._failure: BaseException | None = None

    def _run(self) -> None:
        settings = kopf.OperatorSettings()
        settings.execution.executor = self._handlers
        operator = kopf.operator(
            clusterwide=True, standalone=True, stop_flag=self._stop, ready_flag=self._ready, settings=settings
        )
        try:
            asyncio.run(operator)
        except BaseException as exc:  # raised again by start() or stop(), in the test
            self._failure = exc
            self._ready.set()

    async def start(self, ready_timeout_s: float) -> None:
        self._thread.start()
        ready = await asyncio.to_thread(self._ready.wait, ready_timeout_s)
        if self._failure is not None:
            raise self._failure
        if not ready:
            await self.stop()
            raise AssertionError(f"the operator was not ready after {ready_timeout_s:g} s")

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.to_thread(self._thread.join, OPERATOR_STOP_TIMEOUT_S)
        # No new handler starts once the pool is shut down; wait for the one running, if any.
        await asyncio.wait_for(asyncio.to_thread(self._handlers.shutdown, True), OPERATOR_STOP_TIMEOUT_S)
        if self._thread.is_alive():
            raise AssertionError(f"the operator did not stop in {OPERATOR_STOP_TIMEOUT_S:g} s")
        if self._failure is not None:
            raise self._failure


class KubeApi:
    """kmock's Kubernetes emulator serving gpuctl's resources on a loopback port (an async context)."""

    def __init__(
        self, namespace: str = "default", logs: FakePodLogs | None = None, history: bool = True
    ) -> None:
        """``history=False``: keep no log of the requests served (:meth:`requests` still counts them;
        ``list(self.emulator)`` needs the log), for
        runs of many thousands of requests, whose every request would otherwise scan all before it."""
        self.namespace = namespace
        self.logs = logs or FakePodLogs()
        self.emulator = _Emulator(history)
        self._register(self.emulator)
        self.logs.install(self.emulator)
        self._stack = contextlib.AsyncExitStack()
        self.url = ""
        self.api: Any = None
        self.core: Any = None
        self.custom: Any = None
        self._operator: _OperatorThread | None = None

    @staticmethod
    def _register(emulator: Any) -> None:
        info = kmock.ResourceInfo
        emulator.resources["v1/namespaces"] = info(kind="Namespace", verbs={"list", "watch", "get"})
        emulator.resources["v1/pods"] = info(
            kind="Pod", namespaced=True, verbs=VERBS, subresources={"status"}
        )
        emulator.resources["v1/services"] = info(kind="Service", namespaced=True, verbs=VERBS)
        emulator.resources["v1/nodes"] = info(kind="Node", namespaced=False, verbs=VERBS)
        emulator.resources["v1/events"] = info(kind="Event", namespaced=True, verbs=VERBS)
        emulator.resources["v1/secrets"] = info(kind="Secret", namespaced=True, verbs=VERBS)
        emulator.resources[JOB_RESOURCE] = info(
            kind="GPUJob", namespaced=True, verbs=VERBS, subresources={"status"}, shortnames={"gj"}
        )

    async def __aenter__(self) -> Self:
        await self._stack.enter_async_context(self.emulator)
        server = await self._stack.enter_async_context(kmock.Server(self.emulator))
        self.url = str(server.url).rstrip("/")
        self.api = k8s.ApiClient(k8s.Configuration(host=self.url))
        self.core = k8s.CoreV1Api(self.api)
        self.custom = k8s.CustomObjectsApi(self.api)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop_operator()
        await self._stack.aclose()

    # --- the operator ----------------------------------------------------------------------------
    async def start_operator(self, ready_timeout_s: float = 10.0) -> None:
        """Run kopf with the handlers registered in this process (import ``operators.kubernetes.handlers``
        first). The operator finds the API server through ``GPUCTL_KUBE_API_URL``."""
        self._operator = _OperatorThread()
        await self._operator.start(ready_timeout_s)

    async def stop_operator(self) -> None:
        operator, self._operator = self._operator, None
        if operator is not None:
            await operator.stop()

    # --- requests --------------------------------------------------------------------------------
    def requests(self) -> Counter[str]:
        """Every request the API server answered so far, by :func:`request_kind` (``GET pods/log``,
        ``PATCH gpujobs/status``, ``LIST pods``, ``WATCH gpujobs``, ...): the tests' and benchmarks'
        measure of what the operator costs the API server (the tests' own requests count too)."""
        return Counter(self.emulator.counts)

    # --- reading and waiting ---------------------------------------------------------------------
    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A (blocking) kubernetes client call, in a thread so that the emulator keeps serving."""
        return await asyncio.to_thread(fn, *args, **kwargs)

    def as_dict(self, obj: Any) -> Any:
        return self.api.sanitize_for_serialization(obj)

    async def pods(self) -> list[dict[str, Any]]:
        listing = await self.call(self.core.list_namespaced_pod, self.namespace)
        return [self.as_dict(p) for p in listing.items]

    async def nodes(self) -> list[dict[str, Any]]:
        listing = await self.call(self.core.list_node)
        return [self.as_dict(n) for n in listing.items]

    async def job(self, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = await self.call(
            self.custom.get_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL, name
        )
        return obj

    async def jobs(self) -> list[dict[str, Any]]:
        listing = await self.call(
            self.custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL
        )
        return list(listing.get("items") or [])

    async def create_job(self, body: dict[str, Any]) -> None:
        await self.call(
            self.custom.create_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL, body
        )

    async def wait_for(
        self, what: str, check: Callable[[], Awaitable[Any]], timeout: float = DEFAULT_TIMEOUT_S
    ) -> Any:
        """``check()``'s first truthy result, polled every 0.1 s; AssertionError after ``timeout``."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            result = await check()
            if result:
                return result
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
            await asyncio.sleep(0.1)
