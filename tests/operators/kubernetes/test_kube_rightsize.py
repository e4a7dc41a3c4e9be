"""Right-size on Kubernetes, with the real operator on the testing kit's simulated cluster.

A GPUJob with ``policies.right_size: auto`` starts on the cheaper A100s; its progress lines measure its
throughput there (``status.gpuMeasurements``). A profiling run of the same job (another GPUJob, same
``name`` and team) measured H100s ten times faster. When the spot node is reclaimed, the job is placed
again: right-size picks the H100 (cheaper per step), and the new pods ask for H100 nodes only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio

from operators.kubernetes.step import iso
from orchestrator.backends.kubernetes.config import DEFAULT_GPU_PRODUCTS
from orchestrator.backends.kubernetes.crd import GROUP, PLURAL, VERSION
from orchestrator.testing import FakeClock
from orchestrator.testing.kube_cluster import NodeShape, SimulatedKubeCluster
from tests.operators.kubernetes.operator_handlers import handlers

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]  # slow: the real kopf operator against an API emulator

ZONE = "use1-az1"  # the built-in catalog: A100 spot $6.79 a node, H100 spot $30.33 (8 GPUs each)
A100, H100 = DEFAULT_GPU_PRODUCTS["A100"][0], DEFAULT_GPU_PRODUCTS["H100"][0]


@pytest_asyncio.fixture
async def cluster(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SimulatedKubeCluster]:
    monkeypatch.delenv("GPUCTL_PRICE_CATALOG", raising=False)
    monkeypatch.delenv("GPUCTL_OPERATOR_CONFIG", raising=False)
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
    shape = NodeShape(region="us-east-1", cloud="aws")
    async with SimulatedKubeCluster(clock, shape=shape) as sim:
        await sim.add_node("a100-spot", ZONE, spot=True, product=A100)
        await sim.add_node("h100-spot", ZONE, spot=True, product=H100)
        monkeypatch.setenv("GPUCTL_KUBE_API_URL", sim.url)
        monkeypatch.setattr(handlers, "clock", sim.operator_clock)
        await sim.start_operator()
        yield sim


def gpujob(name: str, now: datetime) -> dict[str, Any]:
    meta = {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1",
            "creationTimestamp": iso(now)}  # fmt: skip
    spec = {
        "name": "train",
        "command": "train.py",
        "image": "example.com/train:1",
        "resources": {"gpu_types": ["A100", "H100"], "gpus_per_node": 8, "nodes": 1},
        "market": {"mode": "spot", "zones": [ZONE]},
        "policies": {"right_size": "auto"},
    }
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUJob", "metadata": meta, "spec": spec}


def required_products(pod: dict[str, Any]) -> list[str]:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    exprs = {e["key"]: e["values"] for e in terms["nodeSelectorTerms"][0]["matchExpressions"]}
    return list(exprs["nvidia.com/gpu.product"])


async def test_right_size_auto_moves_the_job_to_the_gpu_type_cheaper_per_step(
    cluster: SimulatedKubeCluster,
) -> None:
    await cluster.create_job(gpujob("train", cluster.clock.now()))
    await cluster.settle()
    [pod] = await cluster.pods()
    assert pod["spec"]["nodeName"] == "a100-spot" and A100 in required_products(pod)
    status = (await cluster.job("train"))["status"]
    assert status["gpuType"] == "A100" and "rightSize" not in status  # nothing measured yet

    # The trainer's progress: 60 steps a minute on the A100 node (8 GPUs: 0.125 steps/s/GPU).
    for minute in range(3):
        cluster.write_progress("train-n0", 60 * minute, total_steps=100_000)
        await cluster.settle()
        await cluster.advance(60)
    await cluster.settle()
    measured = (await cluster.job("train"))["status"]["gpuMeasurements"]["byGpuType"]
    assert measured == {"A100": {"steps": 120, "gpuSeconds": 960.0, "seconds": 120.0}}

    # Yesterday's profiling run of the same job, on H100: ten times the A100's throughput.
    done = {"state": "SUCCEEDED", "attempt": 1, "segments": [],
            "gpuMeasurements": {"byGpuType": {"H100": {"steps": 1200, "gpuSeconds": 960.0, "seconds": 120.0}}}}  # fmt: skip
    profile = {**gpujob("train-h100-profile", cluster.clock.now()), "status": done}  # ended: never placed
    await cluster.create_job(profile)
    await cluster.call(cluster.custom.patch_namespaced_custom_object_status, GROUP, VERSION, "default",
                       PLURAL, "train-h100-profile", {"status": done})  # fmt: skip

    # The A100 spot node is reclaimed: the job is placed again, and right-size picks the H100.
    await cluster.reclaim("a100-spot")
    await cluster.advance(1)
    await cluster.settle()
    status = (await cluster.job("train"))["status"]
    assert status["rightSize"] == {"gpuType": "H100", "apply": True}, status.get("message")
    assert status["attempt"] == 2 and status["gpuType"] == "H100" and status["state"] == "LAUNCHING"
    [pod] = await cluster.pods()
    assert pod["metadata"]["labels"]["gpuctl.dev/attempt"] == "2"
    assert set(required_products(pod)) == set(DEFAULT_GPU_PRODUCTS["H100"])  # the sized type only
    assert pod["spec"]["nodeName"] == "h100-spot"
    events = [r.data.get("message", "") for r in list(cluster.emulator) if r.method == "POST"
              and r.url.path.endswith("/events")]  # fmt: skip
    assert any(m.startswith("right_size: right-size (auto): H100") for m in events), events
