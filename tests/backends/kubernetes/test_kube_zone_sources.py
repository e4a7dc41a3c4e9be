"""The cluster's zones from its GPU nodes and Karpenter NodePools, as catalog offers it can run."""

from __future__ import annotations

from typing import Any

from orchestrator.backends.kubernetes.cluster_zones import ClusterZones, cluster_zones, node_summary
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.catalog.offers import MarketKind, Offer

SPOT, OD = MarketKind.SPOT, MarketKind.ON_DEMAND


def offer(cloud: str, region: str, zone: str) -> Offer:
    return Offer(cloud, "x", "H100", 8, 80, 1, 1, 90.0, 30.0, region, zone)


AZ1, AZ2, AZ3 = (offer("aws", "us-east-1", f"use1-az{i}") for i in (1, 2, 3))
OHIO = offer("aws", "us-east-2", "use2-az1")
GCP = offer("gcp", "us-central1", "us-central1-a")
AZURE = offer("azure", "eastus", "eastus")  # a catalog without zones there: the region as the zone
EVERY = (AZ1, AZ2, AZ3, OHIO, GCP, AZURE)


def node(zone_id: str, name: str, capacity: str = "on-demand", gpus: str | None = "8") -> dict[str, Any]:
    labels = {
        "topology.kubernetes.io/zone": name,
        "topology.k8s.aws/zone-id": zone_id,
        "topology.kubernetes.io/region": "us-east-1",
        "karpenter.sh/capacity-type": capacity,
    }
    status = {"allocatable": {"nvidia.com/gpu": gpus}} if gpus else {}
    return {"metadata": {"name": f"n-{zone_id}-{capacity}", "labels": labels}, "status": status}


def pool(name: str, *requirements: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"template": {"spec": {"requirements": list(requirements)}}}}


def req(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def allowed(zones: ClusterZones, market: MarketKind) -> list[str]:
    return [o.zone for o in EVERY if zones.allows(o, market)]


TWO_ZONES = [node("use1-az1", "us-east-1a"), node("use1-az2", "us-east-1b", "spot")]


def test_gpu_nodes_give_their_zones_and_both_markets_without_node_pools() -> None:
    cpu_only = node("use1-az3", "us-east-1c", gpus=None)
    zones = cluster_zones([*TWO_ZONES, cpu_only], [], KubeConfig())
    # an on-demand node in az1, a spot one in az2: without NodePools, both markets in both (spot groups
    # scale from zero); never another cloud's zone, another region's, or a zone with no GPU node
    assert allowed(zones, SPOT) == allowed(zones, OD) == ["use1-az1", "use1-az2"]
    assert zones.describe() == "use1-az1, use1-az2 (on-demand and spot: GPU nodes)"


def test_node_pools_say_which_markets_and_zones_can_be_provisioned() -> None:
    spot_pool = pool(
        "spot",
        req("karpenter.sh/capacity-type", "In", "spot"),
        req("topology.kubernetes.io/zone", "In", "us-east-1a"),  # a name: its id from the nodes
        req("topology.k8s.aws/zone-id", "In", "use1-az3"),
    )
    default_pool = pool("default", req("topology.k8s.aws/zone-id", "In", "use1-az1"))  # on-demand
    zones = cluster_zones(TWO_ZONES, [spot_pool, default_pool], KubeConfig())
    assert allowed(zones, SPOT) == ["use1-az1", "use1-az2", "use1-az3"]  # az2: its spot node
    assert allowed(zones, OD) == ["use1-az1"]


def test_an_open_node_pool_is_any_zone_of_the_cluster_region_but_those_it_excludes() -> None:
    open_pool = pool(
        "any",
        req("karpenter.sh/capacity-type", "NotIn", "on-demand"),
        req("topology.k8s.aws/zone-id", "NotIn", "use1-az2"),
    )
    zones = cluster_zones(TWO_ZONES, [open_pool], KubeConfig())
    assert allowed(zones, SPOT) == ["use1-az1", "use1-az2", "use1-az3"]  # az2: its spot node
    assert allowed(zones, OD) == ["use1-az1"]
    assert "any zone of us-east-1 but use1-az2" in zones.describe()


def test_a_zone_name_no_node_maps_stands_for_its_region() -> None:
    guessed = pool("ohio", req("topology.kubernetes.io/zone", "In", "us-east-2c"))
    zones = cluster_zones([], [guessed], KubeConfig())
    assert allowed(zones, OD) == ["use2-az1"] and allowed(zones, SPOT) == []


def test_the_chart_pins_the_cloud_and_region_even_when_the_cluster_shows_nothing() -> None:
    assert allowed(cluster_zones(None, [], KubeConfig()), SPOT) == [o.zone for o in EVERY]
    pinned = cluster_zones(None, [], KubeConfig(cloud="aws", region="us-east-1"))
    assert allowed(pinned, OD) == ["use1-az1", "use1-az2", "use1-az3"]
    assert "pinned to aws us-east-1" in pinned.describe()
    gcp = cluster_zones(TWO_ZONES, [], KubeConfig(cloud="gcp"))
    assert allowed(gcp, OD) == []  # the nodes' AWS zone ids are not GCP zones


def test_azure_catalog_regions_match_nodes_of_that_region() -> None:
    labels = {"topology.kubernetes.io/zone": "eastus-1", "topology.kubernetes.io/region": "eastus"}
    azure = {"metadata": {"name": "a", "labels": labels}, "status": {"allocatable": {"nvidia.com/gpu": "1"}}}
    assert allowed(cluster_zones([azure], [], KubeConfig()), OD) == ["eastus"]


def test_a_node_summary_keeps_what_the_zones_are_made_of() -> None:
    summary = node_summary({**TWO_ZONES[1], "spec": {"providerID": "aws:///x"}})
    assert cluster_zones([summary], [], KubeConfig()) == cluster_zones([TWO_ZONES[1]], [], KubeConfig())
    assert "spec" not in summary and "name" not in summary["metadata"]
