"""Spot shortage against the real operator on kmock: the test plays the scheduler, marking the spot
pods ``PodScheduled=False``/``Unschedulable`` (no real scheduler or node provisioner runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.kubernetes.crd import GROUP, PLURAL, VERSION
from tests.operators.kubernetes.test_kube_operator import (  # the fixture and helpers, not the tests
    NS,
    Cluster,
    cluster,
    gpujob,
    job_when,
    pods_when,
    set_pod_status,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]  # slow: the real kopf operator against an API emulator
__all__ = ["cluster"]

CATALOG = (
    "cloud,instance_type,accelerator,accelerator_count,gpu_memory_gib,vcpus,memory_gib,"
    "on_demand_usd_per_hour,spot_usd_per_hour,region,zone\n"
    "gcp,a3-highgpu-8g,H100,8,80,208,1872,88.0,25.0,us-central1,us-central1-a\n"
)
UNSCHEDULABLE = {
    "phase": "Pending",
    "conditions": [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector.",
            "lastTransitionTime": "2020-01-01T00:00:00Z",  # long past the limit
        }
    ],
}


def affinity(pod: dict[str, Any]) -> dict[str, list[str]]:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return {e["key"]: e["values"] for e in terms["nodeSelectorTerms"][0]["matchExpressions"]}


def attempt(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"]["gpuctl.dev/attempt"])


async def test_unschedulable_spot_pods_fall_back_to_on_demand(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = tmp_path / "prices.csv"
    catalog.write_text(CATALOG)
    monkeypatch.setenv("GPUCTL_PRICE_CATALOG", str(catalog))
    monkeypatch.setenv("GPUCTL_OPERATOR_CONFIG", json.dumps({"spot_shortage_after_s": 60}))
    body = gpujob("s", 2)
    # A deadline and no work estimate: spot while a zone has it, on-demand as soon as none does.
    body["spec"]["market"] = {"mode": "spot-with-fallback"}
    body["spec"]["goals"] = {"deadline": "2h"}
    await cluster.call(cluster.custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, body)

    spot_pods = await pods_when(cluster, lambda ps: len(ps) == 2)
    for pod in spot_pods:
        exprs = affinity(pod)
        assert exprs["karpenter.sh/capacity-type"] == ["spot"]
        assert exprs["topology.kubernetes.io/zone"] == ["us-central1-a"]
        await set_pod_status(cluster, pod["metadata"]["name"], UNSCHEDULABLE)

    job = await job_when(cluster, "s", lambda st: st.get("attempt") == 2)
    status = job["status"]
    assert status["market"] == "on-demand" and status["preemptions"] == 1
    assert status["zoneHistory"]["lastAvailable"] == {"us-central1-a": False}
    assert "us-central1-a" in status["zoneHistory"]["spotShortSeen"]
    first = status["segments"][0]
    assert first["market"] == "spot" and first["start"] == first["end"]  # the queued time cost nothing
    od_pods = await pods_when(cluster, lambda ps: len(ps) == 2 and all(attempt(p) == "2" for p in ps))
    assert {affinity(p)["karpenter.sh/capacity-type"][0] for p in od_pods} == {"on-demand"}
