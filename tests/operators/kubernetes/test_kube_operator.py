"""The real operator (kopf handlers, kubernetes client) against kmock's HTTP emulator of the API."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio

_saved_interval = os.environ.get("GPUCTL_RECONCILE_INTERVAL_S")
os.environ["GPUCTL_RECONCILE_INTERVAL_S"] = "0.3"  # read when the handlers module is imported

import kmock  # noqa: E402
import kopf  # noqa: E402
import kubernetes.client as k8s  # noqa: E402

import operators.kubernetes.handlers  # noqa: E402, F401  (registers the handlers)
from orchestrator.backends.kubernetes.crd import GROUP, PLURAL, VERSION  # noqa: E402

if _saved_interval is None:
    os.environ.pop("GPUCTL_RECONCILE_INTERVAL_S")
else:
    os.environ["GPUCTL_RECONCILE_INTERVAL_S"] = _saved_interval

pytestmark = pytest.mark.asyncio

NS = "default"
JOB_RES = f"{GROUP}/{VERSION}/{PLURAL}"
VERBS = {"list", "watch", "get", "create", "patch", "update", "delete"}


class Cluster:
    def __init__(self, emulator: kmock.KubernetesEmulator, url: str) -> None:
        self.emulator = emulator
        self.api = k8s.ApiClient(k8s.Configuration(host=url))
        self.core = k8s.CoreV1Api(self.api)
        self.custom = k8s.CustomObjectsApi(self.api)

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def pods(self) -> list[dict[str, Any]]:
        listing = await self.call(self.core.list_namespaced_pod, NS)
        return [self.api.sanitize_for_serialization(p) for p in listing.items]

    async def job(self, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = await self.call(
            self.custom.get_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, name
        )
        return obj

    async def wait_for(self, what: str, check: Callable[[], Any], timeout: float = 15.0) -> Any:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            result = await check()
            if result:
                return result
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.1)


@pytest_asyncio.fixture
async def cluster(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Cluster]:
    emulator = kmock.KubernetesEmulator()
    emulator.resources["v1/namespaces"] = kmock.ResourceInfo(kind="Namespace", verbs={"list", "watch", "get"})
    emulator.resources["v1/pods"] = kmock.ResourceInfo(
        kind="Pod", namespaced=True, verbs=VERBS, subresources={"status"}
    )
    emulator.resources["v1/services"] = kmock.ResourceInfo(kind="Service", namespaced=True, verbs=VERBS)
    emulator.resources["v1/nodes"] = kmock.ResourceInfo(kind="Node", namespaced=False, verbs=VERBS)
    emulator.resources["v1/events"] = kmock.ResourceInfo(kind="Event", namespaced=True, verbs={"create"})
    emulator.resources[JOB_RES] = kmock.ResourceInfo(
        kind="GPUJob", namespaced=True, verbs=VERBS, subresources={"status"}, shortnames={"gj"}
    )
    async with emulator, kmock.Server(emulator) as server:
        url = str(server.url).rstrip("/")
        monkeypatch.setenv("GPUCTL_KUBE_API_URL", url)
        stop = asyncio.Event()
        ready = asyncio.Event()
        task = asyncio.create_task(
            kopf.operator(clusterwide=True, standalone=True, stop_flag=stop, ready_flag=ready)
        )
        await asyncio.wait_for(ready.wait(), 10)
        try:
            yield Cluster(emulator, url)
        finally:
            stop.set()
            task.cancel()  # kmock's watch streams never end by themselves; no graceful wait needed
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(task, 5)


def gpujob(name: str, nodes: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUJob",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {
            "command": "train.py --epochs 3",
            "image": "example.com/train:1",
            "resources": {"gpu_types": ["H100"], "gpus_per_node": 8, "nodes": nodes},
            "market": {"mode": "spot"},
            "checkpoint": {"notice_grace_seconds": 45},
        },
    }


async def pods_when(cluster: Cluster, check: Callable[[list[dict[str, Any]]], bool]) -> Any:
    async def probe() -> list[dict[str, Any]] | None:
        pods = await cluster.pods()
        return pods if check(pods) else None

    return await cluster.wait_for("pods", probe)


async def job_when(cluster: Cluster, name: str, check: Callable[[dict[str, Any]], bool]) -> Any:
    async def probe() -> dict[str, Any] | None:
        job = await cluster.job(name)
        return job if check(job.get("status") or {}) else None

    return await cluster.wait_for(f"status of {name}", probe)


def names(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


async def create_job(cluster: Cluster, name: str, nodes: Any) -> None:
    body = gpujob(name, nodes)
    await cluster.call(cluster.custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, body)


async def set_pod_status(
    cluster: Cluster, name: str, status: dict[str, Any], node: str | None = None
) -> None:
    if node is not None:
        await cluster.call(cluster.core.patch_namespaced_pod, name, NS, {"spec": {"nodeName": node}})
    await cluster.call(cluster.core.patch_namespaced_pod_status, name, NS, {"status": status})


RUNNING = {"phase": "Running"}


def condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), None)


async def test_create_makes_pods_with_placement_and_sidecar(cluster: Cluster) -> None:
    await create_job(cluster, "a", 2)
    pods = await pods_when(cluster, lambda ps: len(ps) == 2)
    assert names(pods) == ["a-n0", "a-n1"]
    pod = next(p for p in pods if p["metadata"]["name"] == "a-n0")
    spec = pod["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    exprs = {e["key"]: e for e in terms[0]["matchExpressions"]}
    assert "NVIDIA-H100-80GB-HBM3" in exprs["nvidia.com/gpu.product"]["values"]
    assert exprs["karpenter.sh/capacity-type"]["values"] == ["spot"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    trainer = spec["containers"][0]
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert spec["terminationGracePeriodSeconds"] == 45
    assert spec["initContainers"][0]["name"] == "monitor"
    assert spec["initContainers"][0]["restartPolicy"] == "Always"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "GPUJob"
    services = await cluster.call(cluster.core.list_namespaced_service, NS)
    assert [s.metadata.name for s in services.items] == ["a-rdzv"]

    for p in pods:
        await set_pod_status(cluster, p["metadata"]["name"], RUNNING)
    job = await job_when(cluster, "a", lambda st: st.get("state") == "RUNNING")
    assert job["status"]["nodes"] == 2
    assert condition(job["status"], "Running")["status"] == "True"
    assert condition(job["status"], "Placed")["reason"] == "Placed"


async def test_evicted_pod_recovers_the_job(cluster: Cluster) -> None:
    await create_job(cluster, "b", 2)
    pods = await pods_when(cluster, lambda ps: len(ps) == 2)
    for p in pods:
        await set_pod_status(cluster, p["metadata"]["name"], RUNNING)
    await job_when(cluster, "b", lambda st: st.get("state") == "RUNNING")
    await set_pod_status(cluster, "b-n1", {"phase": "Failed", "reason": "Evicted"})

    job = await job_when(cluster, "b", lambda st: st.get("attempt") == 2)
    assert job["status"]["preemptions"] == 1
    assert condition(job["status"], "Preempted")["status"] == "True"
    assert job["status"]["segments"][0]["endReason"] == "preempted"
    pods = await pods_when(
        cluster,
        lambda ps: len(ps) == 2 and all(p["metadata"]["labels"]["gpuctl.dev/attempt"] == "2" for p in ps),
    )
    assert names(pods) == ["b-n0", "b-n1"]


async def test_lost_node_rescales_an_elastic_job(cluster: Cluster) -> None:
    for node in ("node-1", "node-2", "node-3"):
        await cluster.call(cluster.core.create_node, {"metadata": {"name": node}})
    await create_job(cluster, "c", {"min": 2, "max": 3})
    pods = await pods_when(cluster, lambda ps: len(ps) == 3)
    for i, p in enumerate(sorted(pods, key=lambda p: p["metadata"]["name"])):
        await set_pod_status(cluster, p["metadata"]["name"], RUNNING, node=f"node-{i + 1}")
    await job_when(cluster, "c", lambda st: st.get("state") == "RUNNING" and st.get("nodes") == 3)
    await cluster.call(cluster.core.delete_node, "node-3")

    job = await job_when(cluster, "c", lambda st: condition(st, "Rescaled") is not None)
    status = job["status"]
    assert status["desiredNodes"] == 2 and status["nodes"] == 2 and status["attempt"] == 1
    assert condition(status, "Rescaled")["status"] == "True"
    assert [s["nodes"] for s in status["segments"]] == [3, 2]
    pods = await pods_when(cluster, lambda ps: len(ps) == 2)
    assert names(pods) == ["c-n0", "c-n1"]


async def test_all_pods_succeeded_finishes_the_job(cluster: Cluster) -> None:
    await create_job(cluster, "d", 1)
    await pods_when(cluster, lambda ps: len(ps) == 1)
    await set_pod_status(cluster, "d-n0", RUNNING)
    await job_when(cluster, "d", lambda st: st.get("state") == "RUNNING")
    await set_pod_status(cluster, "d-n0", {"phase": "Succeeded"})
    job = await job_when(cluster, "d", lambda st: st.get("state") == "SUCCEEDED")
    assert condition(job["status"], "Succeeded")["status"] == "True"
    assert job["status"]["costUsd"] >= 0


async def test_delete_cleans_up_pods_and_service(cluster: Cluster) -> None:
    await create_job(cluster, "e", 2)
    await pods_when(cluster, lambda ps: len(ps) == 2)
    await cluster.call(cluster.custom.delete_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, "e")

    async def no_pods() -> bool:
        return not await cluster.pods()

    await cluster.wait_for("no pods", no_pods)
    services = await cluster.call(cluster.core.list_namespaced_service, NS)
    assert services.items == []

    async def gone() -> bool:
        try:
            await cluster.job("e")
        except k8s.ApiException as exc:
            return exc.status == 404
        return False

    await cluster.wait_for("GPUJob e deleted (finalizer released)", gone)
