"""The testing kit's simulated Kubernetes cluster by itself (no operator): nodes follow the spot trace,
the scheduler binds a pod to a node that fits or leaves it Unschedulable, reclaims warn then delete."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.policies.traces import AvailabilityTrace
from orchestrator.testing import FakeClock
from orchestrator.testing.kube_cluster import NodeShape, SimulatedKubeCluster

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ZONES = ("zone-a", "zone-b")


def trace() -> AvailabilityTrace:
    counts = np.array([[1, 1, 0, 0], [0, 2, 2, 1]], dtype=np.int64)  # 60 s ticks
    return AvailabilityTrace(ZONES, 60 / 3600, counts)


def pod(name: str, market: str, zones: list[str], gpus: int = 8) -> dict[str, Any]:
    expressions = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [market]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones},
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]},
    ]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}  # fmt: skip
    container = {"name": "trainer", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {"metadata": {"name": name, "labels": {"gpuctl.dev/job": "j", "gpuctl.dev/attempt": "1"}},
            "spec": {"containers": [container], "affinity": affinity}}  # fmt: skip


def at(condition: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(condition["lastTransitionTime"].replace("Z", "+00:00"))


async def by_name(cluster: SimulatedKubeCluster) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in await cluster.pods()}


def scheduled(p: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")


@pytest.mark.asyncio
async def test_nodes_follow_the_trace_and_pods_bind_or_stay_unschedulable() -> None:
    clock = FakeClock(T0)
    async with SimulatedKubeCluster(clock, trace(), on_demand_nodes={"zone-a": 1}) as cluster:
        nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in await cluster.nodes()}
        assert set(nodes) == {"on-demand-zone-a-0", "spot-zone-a-0"}
        assert nodes["spot-zone-a-0"]["karpenter.sh/capacity-type"] == "spot"
        assert nodes["spot-zone-a-0"]["topology.kubernetes.io/zone"] == "zone-a"
        assert nodes["on-demand-zone-a-0"]["karpenter.sh/capacity-type"] == "on-demand"

        for body in (pod("p-spot-a", "spot", ["zone-a"]), pod("p-spot-b", "spot", ["zone-b"]),
                     pod("p-od", "on-demand", ["zone-a", "zone-b"]), pod("p-od-2", "on-demand", ["zone-a"])):  # fmt: skip
            await cluster.call(cluster.core.create_namespaced_pod, "default", body)
        assert await cluster.schedule() == 2
        pods = await by_name(cluster)
        assert pods["p-spot-a"]["spec"]["nodeName"] == "spot-zone-a-0"
        assert pods["p-spot-a"]["status"]["phase"] == "Running"
        assert pods["p-od"]["spec"]["nodeName"] == "on-demand-zone-a-0"
        waiting = scheduled(pods["p-spot-b"])
        assert (waiting["status"], waiting["reason"]) == ("False", "Unschedulable")
        assert at(waiting) == T0
        assert waiting["message"].startswith("0/2 nodes are available: ")
        assert "2 node(s) didn't match Pod's node affinity/selector" in waiting["message"]
        assert "1 Insufficient nvidia.com/gpu" in scheduled(pods["p-od-2"])["message"]  # the node is taken

        # Tick 1: zone-b gets two spot nodes; the waiting pod binds there.
        await cluster.advance(60)
        pods = await by_name(cluster)
        assert pods["p-spot-b"]["spec"]["nodeName"] == "spot-zone-b-0"
        assert scheduled(pods["p-spot-b"])["status"] == "True"
        assert at(scheduled(pods["p-od-2"])) == T0  # still the first time

        # Tick 2: zone-a's spot node is reclaimed: the pod on it gets DisruptionTarget, then both go.
        await cluster.advance(60)
        pods = await by_name(cluster)
        disruption = next(
            c for c in pods["p-spot-a"]["status"]["conditions"] if c["type"] == "DisruptionTarget"
        )
        assert (disruption["status"], disruption["reason"]) == ("True", "TerminationByKubelet")
        assert "spot-zone-a-0" in {n["metadata"]["name"] for n in await cluster.nodes()}
        await cluster.advance(60)  # tick 3: the reclaim is done, and zone-b is down to one node
        pods = await by_name(cluster)
        assert "p-spot-a" not in pods and "p-spot-b" in pods
        names = {n["metadata"]["name"] for n in await cluster.nodes()}
        assert "spot-zone-a-0" not in names and "spot-zone-b-0" in names
        assert [what for _, what, name in cluster.history if name == "spot-zone-b-1"] == [
            "added",
            "reclaimed",
        ]


@pytest.mark.asyncio
async def test_a_spot_taint_needs_a_toleration() -> None:
    config = KubeConfig(capacity_provider="gke")
    labels = config.capacity_labels()  # GKE's spot nodes are tainted
    async with SimulatedKubeCluster(FakeClock(T0), AvailabilityTrace(("z",), 1.0, np.ones((1, 1), dtype=np.int64)),
                                    shape=NodeShape(), config=config) as cluster:  # fmt: skip
        body = pod("p", "spot", ["z"])
        expressions = body["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        expressions["nodeSelectorTerms"][0]["matchExpressions"][0] = {
            "key": labels.key, "operator": "In", "values": [labels.spot_value]}  # fmt: skip
        await cluster.call(cluster.core.create_namespaced_pod, "default", body)
        assert await cluster.schedule() == 0
        assert "untolerated taint" in scheduled((await by_name(cluster))["p"])["message"]


def test_the_kit_imports_without_kmock_and_names_the_extra() -> None:
    probe = (
        "import sys; sys.modules['kmock'] = None\n"
        "import orchestrator.testing as t; t.FakeClock; t.FakeNvml\n"
        "from orchestrator.errors import MissingExtra\n"
        "try:\n    t.SimulatedKubeCluster\nexcept MissingExtra as e:\n    print(e.message)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "needs the Python package 'kmock'" in out.stdout and "pip install 'gpuctl[testing]'" in out.stdout
