"""Spot shortage against the real operator on the testing kit's simulated cluster: its zone has no spot
node, so the kit's scheduler leaves the spot pods ``PodScheduled=False``/``Unschedulable``; on-demand
nodes are there. Time is the cluster's FakeClock, moved past the shortage limit by the test."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from operators.kubernetes.step import iso
from orchestrator.policies.traces import AvailabilityTrace
from orchestrator.testing import FakeClock
from orchestrator.testing.kube_cluster import SimulatedKubeCluster
from tests.operators.kubernetes.operator_cluster import gpujob
from tests.operators.kubernetes.operator_handlers import handlers

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]  # slow: the real kopf operator against an API emulator

ZONE = "us-central1-a"
CATALOG = (
    "cloud,instance_type,accelerator,accelerator_count,gpu_memory_gib,vcpus,memory_gib,"
    "on_demand_usd_per_hour,spot_usd_per_hour,region,zone\n"
    "gcp,a3-highgpu-8g,H100,8,80,208,1872,88.0,25.0,us-central1,us-central1-a\n"
)
SHORTAGE_AFTER_S = 60


@pytest_asyncio.fixture
async def short_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[SimulatedKubeCluster]:
    """No spot node in the zone at any time, two on-demand nodes; the operator on the cluster's clock."""
    catalog = tmp_path / "prices.csv"
    catalog.write_text(CATALOG)
    monkeypatch.setenv("GPUCTL_PRICE_CATALOG", str(catalog))
    monkeypatch.setenv("GPUCTL_OPERATOR_CONFIG", json.dumps({"spot_shortage_after_s": SHORTAGE_AFTER_S}))
    no_spot = AvailabilityTrace((ZONE,), 1.0, np.zeros((1, 1), dtype=np.int64))
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
    async with SimulatedKubeCluster(clock, no_spot, on_demand_nodes={ZONE: 2}) as cluster:
        monkeypatch.setenv("GPUCTL_KUBE_API_URL", cluster.url)
        monkeypatch.setattr(handlers, "clock", cluster.operator_clock)
        await cluster.start_operator()
        yield cluster


def affinity(pod: dict[str, Any]) -> dict[str, list[str]]:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return {e["key"]: e["values"] for e in terms["nodeSelectorTerms"][0]["matchExpressions"]}


def attempt(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"]["gpuctl.dev/attempt"])


async def test_unschedulable_spot_pods_fall_back_to_on_demand(short_cluster: SimulatedKubeCluster) -> None:
    cluster = short_cluster
    body = gpujob("s", 2)
    body["metadata"]["creationTimestamp"] = iso(cluster.clock.now())
    # A deadline and no work estimate: spot while a zone has it, on-demand as soon as none does.
    body["spec"]["market"] = {"mode": "spot-with-fallback"}
    body["spec"]["goals"] = {"deadline": "2h"}
    await cluster.create_job(body)
    await cluster.settle()

    spot_pods = await cluster.pods()
    assert len(spot_pods) == 2
    for pod in spot_pods:
        exprs = affinity(pod)
        assert exprs["karpenter.sh/capacity-type"] == ["spot"]
        assert exprs["topology.kubernetes.io/zone"] == [ZONE]
        scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    assert (await cluster.job("s"))["status"]["state"] == "LAUNCHING"

    await cluster.advance(SHORTAGE_AFTER_S / 2)  # not past the limit yet: the pods wait
    await cluster.settle()
    assert (await cluster.job("s"))["status"]["attempt"] == 1
    await cluster.advance(SHORTAGE_AFTER_S)
    await cluster.settle()

    status = (await cluster.job("s"))["status"]
    assert status["attempt"] == 2 and status["market"] == "on-demand" and status["preemptions"] == 1
    assert status["state"] == "RUNNING"
    assert status["zoneHistory"]["lastAvailable"] == {ZONE: False}
    assert ZONE in status["zoneHistory"]["spotShortSeen"]
    first = status["segments"][0]
    assert first["market"] == "spot" and first["start"] == first["end"]  # the queued time cost nothing
    od_pods = await cluster.pods()
    assert {attempt(p) for p in od_pods} == {"2"} and len(od_pods) == 2
    assert {affinity(p)["karpenter.sh/capacity-type"][0] for p in od_pods} == {"on-demand"}
    assert {p["spec"]["nodeName"] for p in od_pods} == {f"on-demand-{ZONE}-0", f"on-demand-{ZONE}-1"}
