"""Pods are placed in the zone the market policy chose (spot), or any allowed zone (on-demand)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from orchestrator.backends.base import Placement
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.backends.kubernetes.manifests import Owner, build_pod
from orchestrator.catalog.offers import MarketKind
from orchestrator.errors import UserError
from orchestrator.spec import JobSpec

KUBE_VERSION = "1.33"


def placement(market: MarketKind, cloud: str, region: str, zone: str) -> Placement:
    return Placement("H100", market, cloud, region, zone, "x", 8, 10.0, 40.0, "test")


def pod(market_spec: dict[str, Any], where: Placement, config: KubeConfig | None = None) -> dict[str, Any]:
    spec = JobSpec.model_validate(
        {"name": "j", "command": "t.py", "resources": {"gpu_types": ["H100"]}, "market": market_spec}
    )
    built = build_pod(
        spec, where, job="j", namespace="ml", attempt=1, node_index=0,
        config=config or KubeConfig(), owner=Owner("j", "u-1"),
    )  # fmt: skip
    kubernetes_validate.validate(built, KUBE_VERSION, strict=True)
    return built


def place_exprs(p: dict[str, Any]) -> list[dict[str, Any]]:
    terms = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (term,) = terms["nodeSelectorTerms"]
    return [e for e in term["matchExpressions"] if e["key"].startswith("topology.")]


def test_spot_pods_are_pinned_to_the_chosen_zone() -> None:
    gcp = pod({"zones": ["us-central1-a", "us-central1-b"]},
              placement(MarketKind.SPOT, "gcp", "us-central1", "us-central1-b"))  # fmt: skip
    assert place_exprs(gcp) == [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-central1-b"]}
    ]
    # AWS prices are per zone id (use1-az1), which EKS and Karpenter nodes carry in their own label.
    aws = pod({}, placement(MarketKind.SPOT, "aws", "us-east-1", "use1-az1"))
    assert place_exprs(aws) == [{"key": "topology.k8s.aws/zone-id", "operator": "In", "values": ["use1-az1"]}]
    # A catalog without zones (Azure's) gives the region as the zone: the region label then.
    azure = pod({}, placement(MarketKind.SPOT, "azure", "eastus", "eastus"))
    assert place_exprs(azure) == [
        {"key": "topology.kubernetes.io/region", "operator": "In", "values": ["eastus"]}
    ]


def test_on_demand_pods_may_use_any_allowed_zone_or_region() -> None:
    od = placement(MarketKind.ON_DEMAND, "gcp", "us-central1", "us-central1-a")
    zones = pod({"zones": ["us-central1-a", "us-central1-c"]}, od)
    assert place_exprs(zones) == [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-central1-a", "us-central1-c"]}
    ]
    regions = pod({"regions": ["us-central1", "us-east4"]}, od)
    assert place_exprs(regions) == [
        {"key": "topology.kubernetes.io/region", "operator": "In", "values": ["us-central1", "us-east4"]}
    ]
    assert place_exprs(pod({}, od)) == []


def test_the_zone_label_can_be_set_per_cloud() -> None:
    config = KubeConfig.from_dict({"zone_labels": {}, "spot_shortage_after_s": 120})
    aws = pod({}, placement(MarketKind.SPOT, "aws", "us-east-1", "us-east-1a"), config)
    assert place_exprs(aws)[0]["key"] == "topology.kubernetes.io/zone"
    assert config.spot_shortage_after_s == 120
    with pytest.raises(UserError):
        KubeConfig.from_dict({"spot_shortage_seconds": 1})
