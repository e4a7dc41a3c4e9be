"""The operator tries only zones the cluster has: a cluster with GPU nodes in two AWS zones and a price
catalog of three clouds (its cheapest spot in Azure and GCP, more AWS zones than the cluster's). The
real kopf operator on the testing kit's simulated cluster, on the cluster's FakeClock; and the
admission and candidates the operator computes, without it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from operators.kubernetes.admission import admission_refusal
from operators.kubernetes.zones import cluster_candidates, narrowed
from orchestrator.backends.kubernetes.cluster_zones import cluster_zones
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.backends.kubernetes.gpujob import job_spec
from orchestrator.controller.host import run_hours
from orchestrator.controller.placement import NoPlacement
from orchestrator.policies.traces import AvailabilityTrace
from orchestrator.state.job_state import JobState
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.testing import FakeClock
from orchestrator.testing.kube_cluster import NodeShape, SimulatedKubeCluster
from orchestrator.times import iso_z as iso
from tests.operators.kubernetes.operator_cluster import gpujob
from tests.operators.kubernetes.operator_handlers import handlers

CLUSTER_ZONES = ("use1-az1", "use1-az2")
HEADER = (
    "cloud,instance_type,accelerator,accelerator_count,gpu_memory_gib,vcpus,memory_gib,"
    "on_demand_usd_per_hour,spot_usd_per_hour,region,zone\n"
)
CATALOG = HEADER + "".join(
    f"{cloud},{kind},H100,8,80,192,2048,{od},{spot},{region},{zone}\n"
    for cloud, kind, od, spot, region, zone in (
        ("azure", "Standard_ND96isr_H100_v5", 98.0, 9.0, "eastus", ""),
        ("gcp", "a3-highgpu-8g", 88.0, 10.0, "us-central1", "us-central1-a"),
        ("aws", "p5.48xlarge", 98.0, 12.0, "us-east-1", "use1-az3"),
        ("aws", "p5.48xlarge", 98.0, 13.0, "us-west-2", "usw2-az1"),
        ("aws", "p5.48xlarge", 98.0, 20.0, "us-east-1", "use1-az1"),
        ("aws", "p5.48xlarge", 98.0, 21.0, "us-east-1", "use1-az2"),
    )
)
SHAPE = NodeShape(region="us-east-1", cloud="aws")
SHORTAGE_AFTER_S = 600.0  # the chart's default: a failed try of a zone's spot costs 10 minutes
STEP_S = SHORTAGE_AFTER_S / 2 + 1  # the cluster's clock moves so: a try is seen failed 2 s after its limit


def node(zone: str, capacity: str) -> dict[str, Any]:
    labels = {
        "topology.kubernetes.io/zone": f"us-east-1{'ab'[CLUSTER_ZONES.index(zone)]}",
        "topology.k8s.aws/zone-id": zone,
        "topology.kubernetes.io/region": "us-east-1",
        "karpenter.sh/capacity-type": capacity,
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    }
    return {"metadata": {"name": f"{capacity}-{zone}", "labels": labels}}


CLUSTER = cluster_zones([node(z, "on-demand") for z in CLUSTER_ZONES], [], KubeConfig())


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "prices.csv"
    path.write_text(CATALOG)
    monkeypatch.setenv("GPUCTL_PRICE_CATALOG", str(path))
    monkeypatch.delenv("GPUCTL_COST_CONFIG", raising=False)
    return path


def spec_with(market: dict[str, Any]) -> Any:
    body = gpujob("z", 1)
    body["spec"]["market"] = market
    return job_spec("z", "default", body["spec"])


@pytest.mark.usefixtures("catalog")
def test_candidates_are_the_catalog_offers_in_the_cluster_zones() -> None:
    found = cluster_candidates(spec_with({"mode": "spot-with-fallback"}), CLUSTER)
    assert list(found.spot_by_zone) == list(CLUSTER_ZONES)  # never Azure's or GCP's cheaper spot
    assert found.on_demand is not None and found.on_demand.zone in CLUSTER_ZONES
    # market.zones: only the cluster's; on-demand pods then ask for those zones only
    spec = spec_with({"zones": ["use1-az3", "use1-az2"]})
    found = cluster_candidates(spec, CLUSTER)
    assert list(found.spot_by_zone) == ["use1-az2"]
    assert narrowed(spec, found).market.zones == ["use1-az2"]


@pytest.mark.usefixtures("catalog")
def test_a_job_allowing_none_of_the_cluster_zones_is_refused_naming_them() -> None:
    spec = spec_with({"zones": ["use1-az3", "usw2-az1"]})
    with pytest.raises(NoPlacement):
        cluster_candidates(spec, CLUSTER)
    refused = admission_refusal(spec, "default", datetime.now(UTC), cluster=CLUSTER)
    assert refused is not None and refused.reason is FailureReason.NO_CAPACITY
    assert "use1-az1, use1-az2" in refused.message and "use1-az3, usw2-az1" in refused.message
    # regions too, and the catalog's own refusal when it has nothing there at all
    assert admission_refusal(
        spec_with({"regions": ["us-west-2"]}), "default", datetime.now(UTC), cluster=CLUSTER
    )
    assert (
        admission_refusal(
            spec_with({"regions": ["us-east-1"]}), "default", datetime.now(UTC), cluster=CLUSTER
        )
        is None
    )


# --- the real operator on the simulated cluster ------------------------------------------------------
@pytest_asyncio.fixture
async def aws_cluster(
    request: pytest.FixtureRequest, catalog: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[SimulatedKubeCluster]:
    """On-demand GPU nodes in the two zones, no spot at any time; the NodePools the test gives (a
    parameter; None: no NodePool CRD), the operator on the cluster's clock."""
    pools = getattr(request, "param", None)
    monkeypatch.setenv("GPUCTL_OPERATOR_CONFIG", json.dumps({"spot_shortage_after_s": SHORTAGE_AFTER_S}))
    no_spot = AvailabilityTrace(CLUSTER_ZONES, 1.0, np.zeros((2, 1), dtype=np.int64))
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
    on_demand = dict.fromkeys(CLUSTER_ZONES, 1)
    async with SimulatedKubeCluster(
        clock, no_spot, shape=SHAPE, on_demand_nodes=on_demand, node_pools=pools
    ) as sim:
        monkeypatch.setenv("GPUCTL_KUBE_API_URL", sim.url)
        monkeypatch.setattr(handlers, "clock", sim.operator_clock)
        await sim.start_operator()
        yield sim


def zones_asked(pod: dict[str, Any]) -> set[str]:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    asked: set[str] = set()
    for expression in terms["nodeSelectorTerms"][0]["matchExpressions"]:
        if "zone" in expression["key"] or "region" in expression["key"]:
            asked |= set(expression["values"])
    return asked


SPOT_POOL = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "gpu"},
    "spec": {
        "template": {
            "spec": {
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                    {
                        "key": "topology.kubernetes.io/zone",
                        "operator": "In",
                        "values": ["us-east-1a", "us-east-1b"],
                    },
                ]
            }
        }
    },
}


@pytest.mark.slow  # the real kopf operator against the API emulator
@pytest.mark.asyncio
@pytest.mark.parametrize("aws_cluster", [None, [SPOT_POOL]], indirect=True, ids=["nodes", "nodepool"])
async def test_spot_gone_in_both_zones_reaches_on_demand_and_meets_the_deadline(
    aws_cluster: SimulatedKubeCluster,
) -> None:
    """36 minutes of slack, a failed try of spot costs 10: the job tries spot only in the cluster's two
    zones, never the catalog's others, runs on-demand and finishes by its deadline."""
    cluster = aws_cluster
    work_h, deadline = 1.0, timedelta(hours=1, minutes=36)
    body = gpujob("tight", 1)
    body["metadata"]["creationTimestamp"] = iso(cluster.clock.now())
    body["spec"]["market"] = {"mode": "spot-with-fallback", "changeover": "1m"}
    body["spec"]["goals"] = {"deadline": "1h36m", "compute_hours": work_h}
    spec = job_spec("tight", "default", body["spec"])
    created = cluster.clock.now()
    await cluster.create_job(body)
    await cluster.settle()
    asked: set[str] = set()
    for _ in range(int(2 * deadline.total_seconds() / STEP_S)):
        asked |= {z for p in await cluster.pods() for z in zones_asked(p)}
        status = (await cluster.job("tight"))["status"]
        if JobStatus(status["state"]).terminal:
            break
        step_s = STEP_S
        if status["state"] == "RUNNING":  # the pods exit the moment the work is done
            left_s = (
                work_h - run_hours(JobState.from_status(status).segments, spec, cluster.clock.now())
            ) * 3600
            if left_s <= 0:
                assert await cluster.finish_pods("tight")
            step_s = min(STEP_S, max(left_s, 1.0))
        await cluster.advance(step_s)
        await cluster.settle()
    status = (await cluster.job("tight"))["status"]
    assert status["state"] == "SUCCEEDED", (status, cluster.history)
    assert asked <= set(CLUSTER_ZONES), asked  # no pod ever asked for a zone the cluster lacks
    segments = JobState.from_status(status).segments
    tried = [s.placement.zone for s in segments if s.placement.market == "spot"]
    assert tried and set(tried) <= set(CLUSTER_ZONES), segments  # how many tries: the planner's
    assert segments[-1].placement.market == "on-demand"
    finished = max(s.ended_at or s.started_at for s in segments)
    assert finished <= created + deadline, (finished - created, segments)


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_job_of_absent_zones_is_refused_at_admission_naming_the_cluster_zones(
    aws_cluster: SimulatedKubeCluster,
) -> None:
    cluster = aws_cluster
    body = gpujob("elsewhere", 1)
    body["spec"]["market"] = {"zones": ["use1-az3", "us-central1-a"]}
    await cluster.create_job(body)
    await cluster.settle()
    status = (await cluster.job("elsewhere"))["status"]
    assert (status["state"], status["failureReason"]) == ("FAILED", "no_capacity")
    assert "use1-az1, use1-az2" in status["message"], status["message"]
    assert await cluster.pods() == []
