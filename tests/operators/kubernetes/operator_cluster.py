"""The real operator on the testing kit's simulated cluster, for the emulator tests: the ``cluster``
fixture (registered for this folder in its conftest.py) and the helpers that create GPUJobs, set pod
phases and wait for what the operator does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from orchestrator.backends.kubernetes.crd import GROUP, PLURAL, VERSION
from orchestrator.backends.kubernetes.ledger import CLUSTER_NAME_ENV
from orchestrator.state.database_url import URL_ENV
from orchestrator.testing.kube_cluster import SimulatedKubeCluster
from tests.operators.kubernetes.operator_handlers import handlers

NS = "default"
CLUSTER = "prod-eu"
"""The cluster's name in the ledger (the ``ledger`` fixture)."""
RUNNING = {"phase": "Running"}

Cluster = SimulatedKubeCluster  # the testing kit's cluster; these tests play its scheduler by hand

__all__ = [
    "CLUSTER",
    "NS",
    "RUNNING",
    "Cluster",
    "cluster_fixture",
    "condition",
    "create_job",
    "gpujob",
    "handlers",
    "job_when",
    "ledger_fixture",
    "names",
    "pods_when",
    "posted_events",
    "set_pod_status",
    "start_running",
]  # fmt: skip


@pytest_asyncio.fixture(name="cluster")
async def cluster_fixture(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Cluster]:
    """kmock's API emulator with the real operator on it, on the wall clock, with no nodes: the tests
    set the pods' phases themselves."""
    async with SimulatedKubeCluster() as sim:
        monkeypatch.setenv("GPUCTL_KUBE_API_URL", sim.url)
        await sim.start_operator()
        yield sim


@pytest.fixture(name="ledger")
def ledger_fixture(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The operator's (and the CLI's) ledger database, this cluster named :data:`CLUSTER`."""
    monkeypatch.setenv(URL_ENV, database_url)
    monkeypatch.setenv(CLUSTER_NAME_ENV, CLUSTER)
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path / "home"))
    return database_url


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


async def start_running(cluster: Cluster, name: str, nodes: int) -> Any:
    """A GPUJob of ``nodes`` nodes created and its pods set running: the GPUJob once RUNNING."""
    await create_job(cluster, name, nodes)

    def mine(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [p for p in pods if p["metadata"]["name"].startswith(f"{name}-")]

    for pod in mine(await pods_when(cluster, lambda ps: len(mine(ps)) == nodes)):
        await set_pod_status(cluster, pod["metadata"]["name"], RUNNING)
    return await job_when(cluster, name, lambda st: st.get("state") == "RUNNING")


def condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), None)


def posted_events(cluster: Cluster, about: str) -> list[dict[str, Any]]:
    """The Events posted about GPUJob ``about`` (every POST, kept or not: kmock keeps one Event
    without a name, and kopf lets the server generate the names)."""
    return [
        r.data
        for r in list(cluster.emulator)
        if r.method == "POST" and r.url.path.endswith("/events")
        and (r.data or {}).get("involvedObject", {}).get("name") == about
    ]  # fmt: skip
