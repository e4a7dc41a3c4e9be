"""Cluster-specific settings of the Kubernetes backend: GPU product labels, spot labels, images.

Defaults fit clusters running NVIDIA GPU Feature Discovery (``nvidia.com/gpu.product``) and one of
the common node provisioners; the Helm chart passes overrides as JSON (``KubeConfig.from_dict``).
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass, field, fields
from typing import Any

from orchestrator import __version__
from orchestrator.catalog.offers import MarketKind
from orchestrator.errors import UserError
from orchestrator.spec.model import NAME_PATTERN

IMAGE_REPOSITORY = "ghcr.io/gpuctl/gpuctl"
GPUCTL_IMAGE = f"{IMAGE_REPOSITORY}:{__version__}"
"""The image built from the repository's Containerfile (operator, monitor sidecar, CLI); the chart's default."""

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
DEFAULT_ZONE_LABELS: dict[str, str] = {"aws": "topology.k8s.aws/zone-id"}
"""Node labels holding the catalog's zone ids, per cloud: AWS prices are per availability-zone id
(``use1-az1``, the same physical zone in every account), which EKS and Karpenter nodes carry in
``topology.k8s.aws/zone-id``; other clouds' catalog zones are zone names (``us-central1-a``), as in
``topology.kubernetes.io/zone``."""
PRICE_CATALOG_ENV = "GPUCTL_PRICE_CATALOG"
"""A price catalog CSV replacing the built-in prices (the chart's ``priceCatalog``, mounted)."""
COST_CONFIG_ENV = "GPUCTL_COST_CONFIG"
"""The operator's cost config (``budgets: {teams: ...}``, the chart's ``budgets``), mounted."""
OPERATOR_CONFIG_ENV = "GPUCTL_OPERATOR_CONFIG"
"""JSON of :class:`KubeConfig` (the chart writes it for the operator; a client may set it too)."""

DEFAULT_GPU_PRODUCTS: dict[str, list[str]] = {
    "H100": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe", "NVIDIA-H100-NVL"],
    "H200": ["NVIDIA-H200", "NVIDIA-H200-NVL"],
    "A100": ["NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"],
    "A100-80GB": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"],
    "A10G": ["NVIDIA-A10G"],
    "L4": ["NVIDIA-L4"],
    "L40S": ["NVIDIA-L40S"],
    "T4": ["Tesla-T4"],
    "V100": ["Tesla-V100-SXM2-16GB", "Tesla-V100-SXM2-32GB", "Tesla-V100-PCIE-16GB"],
}
"""gpuctl catalog GPU names -> values GPU Feature Discovery writes into ``nvidia.com/gpu.product``."""


@dataclass(frozen=True)
class CapacityLabels:
    """How one node provisioner marks spot and on-demand nodes."""

    key: str
    spot_value: str
    on_demand_value: str | None
    """``None``: on-demand nodes lack the label (or carry another value), so select ``NotIn spot``."""
    spot_taint: bool = False
    """Spot nodes carry a ``key=spot_value:NoSchedule`` taint that pods must tolerate."""


CAPACITY_PROVIDERS: dict[str, CapacityLabels] = {
    "karpenter": CapacityLabels("karpenter.sh/capacity-type", "spot", "on-demand"),
    "eks": CapacityLabels("eks.amazonaws.com/capacityType", "SPOT", "ON_DEMAND"),
    "gke": CapacityLabels("cloud.google.com/gke-spot", "true", None, spot_taint=True),
    "aks": CapacityLabels("kubernetes.azure.com/scalesetpriority", "spot", None, spot_taint=True),
}


RESTRICTED_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""The trainer container's default securityContext (Pod Security Standard "restricted")."""


@dataclass(frozen=True)
class KubeConfig:
    """Settings of the backend and operator; every field can be set from the chart's values."""

    namespace: str = "default"
    capacity_provider: str = "karpenter"
    gpu_products: dict[str, list[str]] = field(default_factory=lambda: dict(DEFAULT_GPU_PRODUCTS))
    gpu_products_extra: dict[str, list[str]] = field(default_factory=dict)
    """Entries merged over ``gpu_products`` (the chart's ``gpuProducts`` value)."""
    default_image: str = GPUCTL_IMAGE
    monitor_image: str = GPUCTL_IMAGE
    monitor_port: int = 9400
    rendezvous_port: int = 29400
    checkpoint_pvc: str | None = "gpuctl-checkpoints"
    checkpoint_mount: str = "/checkpoints"
    service_account: str | None = None
    trainer_security_context: dict[str, Any] = field(
        default_factory=lambda: copy.deepcopy(RESTRICTED_SECURITY_CONTEXT)
    )
    """securityContext of every trainer container (the chart's ``trainerSecurityContext``); a job
    cannot change it. Images must then run as a numeric non-root USER, or this sets ``runAsUser``."""
    regrow_after_s: float = 600.0
    """An elastic job running below ``max`` nodes asks for the missing ones again after this long; a
    zone found short of spot is assumed short this long after its pods were last seen unschedulable."""
    spot_shortage_after_s: float = 600.0
    """A spot attempt whose every pod stayed unschedulable this long marks its zone short of spot; the
    market policy then moves the job (on-demand, another zone) or lets it wait. Longer than a node's
    provisioning, during which pods are unschedulable too."""
    zone_labels: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ZONE_LABELS))
    """Cloud -> node label that holds the catalog's zone (default: ``topology.kubernetes.io/zone``)."""
    kueue_queue: str | None = None
    """Kueue LocalQueue of jobs whose spec names no ``queue`` (the chart's ``kueueQueue``); None: such
    jobs' pods carry no Kueue labels."""
    intake_url: str | None = None
    """The operator's intake (``http://SERVICE.NAMESPACE.svc:PORT``, the chart's ``intake`` values):
    job pods' monitors push their records there (orchestrator/backends/kubernetes/intake.py). None: the operator
    reads each monitor's log every pass."""
    karpenter_do_not_disrupt: bool = True
    """Mark training pods ``karpenter.sh/do-not-disrupt`` (the chart's ``karpenterDoNotDisrupt``): no
    consolidation or drift replaces a node under a running attempt."""
    cloud: str | None = None
    """The cluster's cloud (the chart's ``cloud``): only the price catalog's offers of this cloud are
    placed (None: whatever the cluster's nodes and NodePools show,
    :mod:`orchestrator.backends.kubernetes.cluster_zones`)."""
    region: str | None = None
    """The cluster's region (the chart's ``region``): only offers in this region are placed."""

    def __post_init__(self) -> None:
        if self.kueue_queue is not None and not re.fullmatch(NAME_PATTERN, self.kueue_queue):
            raise UserError(
                f"kueueQueue '{self.kueue_queue[:80]}' is not a Kueue LocalQueue name",
                "set kueueQueue in the chart values to a LocalQueue name (at most 63 lowercase letters, "
                "digits and '-', starting and ending with a letter or digit), or to null",
            )

    def queue_for(self, spec_queue: str | None) -> str | None:
        """The Kueue LocalQueue of a job: its spec's ``queue``, else this default (None: no Kueue)."""
        return spec_queue or self.kueue_queue

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KubeConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserError(
                f"unknown Kubernetes backend setting(s): {', '.join(unknown)}",
                f"use only {', '.join(sorted(known))}",
            )
        config = cls(**data)
        config.capacity_labels()  # fail early on an unknown provider
        return config

    @classmethod
    def from_env(cls) -> KubeConfig:
        """The settings in ``$GPUCTL_OPERATOR_CONFIG`` (JSON), else the defaults."""
        raw = os.environ.get(OPERATOR_CONFIG_ENV)
        return cls.from_dict(json.loads(raw)) if raw else cls()

    def capacity_labels(self) -> CapacityLabels:
        try:
            return CAPACITY_PROVIDERS[self.capacity_provider]
        except KeyError:
            raise UserError(
                f"unknown capacity provider '{self.capacity_provider}'",
                f"set capacityProvider to one of {', '.join(CAPACITY_PROVIDERS)}",
            ) from None

    def products_for(self, gpu_type: str) -> list[str]:
        table = {**self.gpu_products, **self.gpu_products_extra}
        by_lower = {k.lower(): v for k, v in table.items()}
        products = by_lower.get(gpu_type.lower())
        if not products:
            raise UserError(
                f"no nvidia.com/gpu.product label is known for GPU type '{gpu_type}'",
                "add it to gpuProducts in the chart values (e.g. H100: [NVIDIA-H100-80GB-HBM3])",
            )
        return products

    def zone_expression(self, cloud: str, region: str, zones: list[str]) -> dict[str, Any]:
        """Nodes in one of ``zones`` (catalog zones of ``cloud``); in ``region`` when the catalog has no
        zones there (it then gives the region as the zone)."""
        if not zones or zones == [region]:
            return {"key": REGION_LABEL, "operator": "In", "values": [region]}
        return {"key": self.zone_labels.get(cloud, ZONE_LABEL), "operator": "In", "values": list(zones)}

    def market_expression(self, market: MarketKind) -> dict[str, Any]:
        labels = self.capacity_labels()
        if market is MarketKind.SPOT:
            return {"key": labels.key, "operator": "In", "values": [labels.spot_value]}
        if labels.on_demand_value is None:
            return {"key": labels.key, "operator": "NotIn", "values": [labels.spot_value]}
        return {"key": labels.key, "operator": "In", "values": [labels.on_demand_value]}
