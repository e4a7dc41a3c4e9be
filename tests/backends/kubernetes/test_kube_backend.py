"""KubernetesBackend (the Backend protocol) against kmock's emulated API server."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import kmock
import kubernetes.client as k8s
import pytest
import pytest_asyncio

from orchestrator.backends.base import Backend, LaunchRequest, NodePhase, Placement
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.backend import KubernetesBackend, pod_name_for
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.catalog.offers import MarketKind
from orchestrator.errors import NotFoundError, PermanentError, TemporaryError, UserError
from orchestrator.spec import JobSpec

VERBS = {"list", "watch", "get", "create", "patch", "delete"}


@pytest_asyncio.fixture
async def api() -> AsyncIterator[k8s.ApiClient]:
    emulator = kmock.KubernetesEmulator()
    emulator.resources["v1/pods"] = kmock.ResourceInfo(kind="Pod", namespaced=True, verbs=VERBS)
    emulator.resources["v1/services"] = kmock.ResourceInfo(kind="Service", namespaced=True, verbs=VERBS)
    emulator.resources["v1/nodes"] = kmock.ResourceInfo(kind="Node", namespaced=False, verbs=VERBS)
    emulator.resources["gpuctl.dev/v1alpha1/gpujobs"] = kmock.ResourceInfo(
        kind="GPUJob", namespaced=True, verbs=VERBS
    )
    async with emulator, kmock.Server(emulator) as server:
        yield k8s.ApiClient(k8s.Configuration(host=str(server.url).rstrip("/")))


def request(node_ids: list[str]) -> LaunchRequest:
    spec = JobSpec.model_validate({"name": "job1", "command": "t.py", "resources": {"nodes": 2}})
    placement = Placement("V100", MarketKind.SPOT, "aws", "r", "z", "p3", 1, 1.0, 3.0, "test")
    return LaunchRequest("job1", 1, spec, placement, node_ids, 2, 2, "/checkpoints/job1", Path("/tmp/job1"))


@pytest.mark.asyncio
async def test_launch_observe_stop(api: k8s.ApiClient) -> None:
    backend: Backend = KubernetesBackend(KubeConfig(namespace="ml"), api)
    ids = ["job1-a1-n0", "job1-a1-n1"]
    await asyncio.to_thread(backend.launch, request(ids))
    await asyncio.to_thread(backend.launch, request(ids))  # idempotent
    core = k8s.CoreV1Api(api)
    pods = (await asyncio.to_thread(core.list_namespaced_pod, "ml")).items
    assert sorted(p.metadata.name for p in pods) == ["job1-a1-n0", "job1-a1-n1"]

    await asyncio.to_thread(
        core.patch_namespaced_pod_status, "job1-a1-n0", "ml", {"status": {"phase": "Running"}}
    )
    await asyncio.to_thread(
        core.patch_namespaced_pod_status,
        "job1-a1-n1",
        "ml",
        {"status": {"phase": "Failed", "reason": "Evicted"}},
    )
    seen = await asyncio.to_thread(backend.observe, "job1", 1, ids)
    assert [(n.node_id, n.phase) for n in seen.nodes] == [
        (ids[0], NodePhase.RUNNING),
        (ids[1], NodePhase.PREEMPTED),
    ]

    await asyncio.to_thread(backend.stop, "job1", 1, [], 30.0)
    assert (await asyncio.to_thread(core.list_namespaced_pod, "ml")).items == []
    seen = await asyncio.to_thread(backend.observe, "job1", 1, ids)
    assert {n.phase for n in seen.nodes} == {NodePhase.LOST}


def test_pod_names_are_dns_labels() -> None:
    assert pod_name_for("job1-a2-n0") == "job1-a2-n0"  # a DNS label already: kept
    odd = ["Job_1/Attempt 2.node-0", "job_1/attempt 2.node-0", "x" * 100, "x" * 100 + "y", "1job"]
    names = [pod_name_for(n) for n in odd]
    for name in names:
        assert len(name) <= 63 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name), name
    assert len(set(names)) == len(odd)  # ids that differ only by case or past the cut stay apart
    assert names[0].startswith("job-1-attempt-2-node-0-") and names == [pod_name_for(n) for n in odd]


@pytest.mark.asyncio
async def test_a_foreign_pod_with_the_name_is_neither_adopted_nor_deleted(api: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(api)
    other_owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "someone-else"}
    labels = {"gpuctl.dev/job": "job1"}  # our label, copied: still not ours
    meta = {"name": "job1-a1-n0", "namespace": "ml", "labels": labels, "ownerReferences": [other_owner]}
    foreign = {"metadata": meta}
    await asyncio.to_thread(core.create_namespaced_pod, "ml", foreign)
    backend = KubernetesBackend(KubeConfig(namespace="ml"), api)
    with pytest.raises(UserError, match="job1-a1-n0 already exists and does not belong to job job1"):
        await asyncio.to_thread(backend.launch, request(["job1-a1-n0"]))
    seen = await asyncio.to_thread(backend.observe, "job1", 1, ["job1-a1-n0"])
    assert [n.phase for n in seen.nodes] == [NodePhase.LOST]  # not counted as the job's node
    await asyncio.to_thread(backend.stop, "job1", 1, ["job1-a1-n0"], 30.0)
    await asyncio.to_thread(backend.stop, "job1", 1, [], 30.0)
    pods = (await asyncio.to_thread(core.list_namespaced_pod, "ml")).items
    assert [(p.metadata.name, p.metadata.owner_references[0].uid) for p in pods] == [
        ("job1-a1-n0", "someone-else")
    ]


@pytest.mark.asyncio
async def test_gpujob_client_functions(api: k8s.ApiClient) -> None:
    spec = JobSpec.model_validate({"name": "job2", "command": "t.py", "labels": {"team": "a"}})
    await asyncio.to_thread(client.create_gpujob, spec, "ml", api)
    with pytest.raises(UserError, match="already exists"):
        await asyncio.to_thread(client.create_gpujob, spec, "ml", api)
    got = await asyncio.to_thread(client.get_gpujob, "job2", "ml", api)
    assert got["kind"] == "GPUJob" and got["metadata"]["labels"] == {"team": "a"}
    assert got["spec"]["command"] == "t.py" and got["spec"]["resources"]["nodes"] == 1
    assert [j["metadata"]["name"] for j in await asyncio.to_thread(client.list_gpujobs, "ml", api)] == [
        "job2"
    ]
    await asyncio.to_thread(client.delete_gpujob, "job2", "ml", api)
    with pytest.raises(NotFoundError):
        await asyncio.to_thread(client.get_gpujob, "job2", "ml", api)
    with pytest.raises(NotFoundError, match="no pods"):
        await asyncio.to_thread(client.pod_logs, "job2", "ml", None, None, api)


def test_api_errors_map_to_gpuctl_errors() -> None:
    def err(status: int) -> Exception:
        return client.map_api_error(k8s.ApiException(status=status, reason="x"), "create GPUJob j")

    assert isinstance(err(404), NotFoundError)
    assert isinstance(err(403), PermanentError) and "RBAC" in str(err(403))
    assert isinstance(err(422), UserError)
    assert isinstance(err(503), TemporaryError)
    assert isinstance(client.map_api_error(OSError("refused"), "list pods"), TemporaryError)
