"""Where the cluster can run a job's pods: the zones and capacity types of its GPU nodes and of its
Karpenter NodePools, as catalog zones (pure: the listings come from
:class:`~orchestrator.backends.kubernetes.listing.ClusterView`).

The operator offers the market policy only the price catalog's offers the cluster can provide
(:meth:`ClusterZones.allows`), so no pod ever asks for a zone the cluster lacks:

- **GPU nodes** (``nvidia.com/gpu`` allocatable, or a ``nvidia.com/gpu.product`` label): each gives
  its catalog zone (the cloud's zone label of ``KubeConfig.zone_labels``, e.g. AWS
  ``topology.k8s.aws/zone-id``, else ``topology.kubernetes.io/zone``) and its region
  (``topology.kubernetes.io/region``);
- **NodePools** (``karpenter.sh/v1``, when the CRD is there): ``spec.template.spec.requirements`` on
  the zone keys (``In``: those zones; ``NotIn``: any other zone of the cluster's regions; none: any
  zone of them) and on ``karpenter.sh/capacity-type`` (``In``/``NotIn``; none: on-demand, Karpenter's
  default). A zone name whose catalog id no node tells (an AWS ``us-east-1a`` before any node ran
  there) stands for any zone of its region;
- **capacity types**: with NodePools, a market is offered in a zone when a NodePool allows it there or
  a GPU node of that market is there (its labels match the pods' market selector,
  ``KubeConfig.market_expression``). Without NodePools, a node group's present nodes say nothing of
  what it can add (spot node groups scale from zero): every zone of a GPU node offers both markets,
  and spot is learned by trying, as before;
- **the chart's pin** (``KubeConfig.cloud``, ``KubeConfig.region``) limits every offer to that cloud
  and region, also when the cluster shows nothing (no GPU node, no NodePool, or no right to list
  nodes): then the pin alone limits the offers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.backends.kubernetes.config import (
    CAPACITY_PROVIDERS,
    DEFAULT_ZONE_LABELS,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    REGION_LABEL,
    ZONE_LABEL,
    KubeConfig,
)
from orchestrator.catalog.offers import MarketKind, Offer

NODEPOOL_GROUP = "karpenter.sh"
NODEPOOL_VERSION = "v1"
NODEPOOL_PLURAL = "nodepools"
KARPENTER_CAPACITY = "karpenter.sh/capacity-type"
_KARPENTER_MARKETS = {"spot": MarketKind.SPOT, "on-demand": MarketKind.ON_DEMAND}
_AWS_ZONE_NAME = re.compile(r"^([a-z]{2}(?:-gov)?-[a-z]+-\d+)[a-z]$")
BOTH = frozenset(MarketKind)


@dataclass(frozen=True)
class ZoneSource:
    """What a group of GPU nodes, or one NodePool, can run: ``markets`` in ``zones`` (catalog zones;
    ``None``: any zone) of ``regions`` (``None``: any region), never in ``excluded``."""

    what: str
    markets: frozenset[MarketKind]
    zones: frozenset[str] | None
    regions: frozenset[str] | None
    excluded: frozenset[str] = frozenset()

    def allows(self, offer: Offer, market: MarketKind) -> bool:
        if market not in self.markets or offer.zone in self.excluded:
            return False
        if self.regions is not None and offer.region not in self.regions:
            return False
        if self.zones is None or offer.zone in self.zones:
            return True
        return offer.zone == offer.region and self.regions is not None  # a catalog without zones there

    def describe(self) -> str:
        if self.zones is not None:
            where = ", ".join(sorted(self.zones))
        else:
            where = "any zone of " + (", ".join(sorted(self.regions)) if self.regions else "any region")
            if self.excluded:
                where += f" but {', '.join(sorted(self.excluded))}"
        markets = " and ".join(sorted(str(m) for m in self.markets))
        return f"{where} ({markets}: {self.what})"


@dataclass(frozen=True)
class ClusterZones:
    """The cluster's zones (see the module); ``sources`` empty: the cluster shows none."""

    sources: tuple[ZoneSource, ...] = ()
    cloud: str | None = None
    region: str | None = None

    def allows(self, offer: Offer, market: MarketKind) -> bool:
        """Whether the cluster can run ``market`` pods where ``offer`` is."""
        if self.cloud is not None and offer.cloud != self.cloud:
            return False
        if self.region is not None and offer.region != self.region:
            return False
        return not self.sources or any(s.allows(offer, market) for s in self.sources)

    def describe(self) -> str:
        """The zones the cluster has, for a refusal."""
        parts = [s.describe() for s in self.sources]
        pin = " ".join(p for p in (self.cloud, self.region) if p)
        if pin:
            parts.append(f"pinned to {pin} by the chart")
        return "; ".join(parts) or "any zone"


def is_gpu_node(node: Mapping[str, Any]) -> bool:
    labels = _labels(node)
    allocatable = ((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE)
    return GPU_PRODUCT_LABEL in labels or _quantity(allocatable) > 0


def node_summary(node: Mapping[str, Any]) -> dict[str, Any]:
    """What of a node tells its zone, region, market and GPUs (its other labels and fields dropped)."""
    keys = {ZONE_LABEL, REGION_LABEL, GPU_PRODUCT_LABEL, *DEFAULT_ZONE_LABELS.values()}
    keys |= {labels.key for labels in CAPACITY_PROVIDERS.values()}
    labels = {k: v for k, v in _labels(node).items() if k in keys or "zone" in k or "region" in k}
    allocatable = ((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE)
    status = {"allocatable": {GPU_RESOURCE: allocatable}} if allocatable is not None else {}
    return {"metadata": {"labels": labels}, "status": status}


def cluster_zones(
    nodes: Sequence[Mapping[str, Any]] | None, node_pools: Sequence[Mapping[str, Any]], config: KubeConfig
) -> ClusterZones:
    """The cluster's zones from its nodes (``None``: not listable) and NodePools (see the module)."""
    nodes = nodes or []
    ids = _zone_ids(nodes, config)
    regions = frozenset(r for n in nodes if (r := _labels(n).get(REGION_LABEL))) or (
        frozenset({config.region}) if config.region else None
    )
    pools = [s for p in node_pools for s in _pool_sources(p, config, ids, regions)]
    sources = [*_node_sources(nodes, config, widen=not node_pools), *pools]
    return ClusterZones(tuple(sources), config.cloud, config.region)


def _node_sources(nodes: Iterable[Mapping[str, Any]], config: KubeConfig, widen: bool) -> list[ZoneSource]:
    groups: dict[tuple[str, str | None], set[MarketKind]] = {}
    for node in nodes:
        labels = _labels(node)
        zone = _catalog_zone(labels, config)
        if not is_gpu_node(node) or zone is None:
            continue
        markets = groups.setdefault((zone, labels.get(REGION_LABEL)), set())
        markets.update(BOTH if widen else _node_markets(labels, config))
    merged: dict[tuple[str | None, frozenset[MarketKind]], set[str]] = {}
    for (zone, region), markets in groups.items():
        if markets:
            merged.setdefault((region, frozenset(markets)), set()).add(zone)
    return [
        ZoneSource("GPU nodes", markets, frozenset(zones), frozenset({region}) if region else None)
        for (region, markets), zones in sorted(merged.items(), key=lambda kv: sorted(kv[1]))
    ]


def _node_markets(labels: Mapping[str, str], config: KubeConfig) -> set[MarketKind]:
    return {m for m in MarketKind if _matches(config.market_expression(m), labels)}


def _matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, values = str(expression["key"]), expression.get("values") or []
    if expression["operator"] == "In":
        return labels.get(key) in values
    return labels.get(key) not in values  # NotIn, the only other operator a market expression has


def _catalog_zone(labels: Mapping[str, str], config: KubeConfig) -> str | None:
    if config.cloud is not None:
        return labels.get(config.zone_labels.get(config.cloud, ZONE_LABEL))
    for key in config.zone_labels.values():
        if key in labels:
            return labels[key]
    return labels.get(ZONE_LABEL)


def _zone_ids(nodes: Iterable[Mapping[str, Any]], config: KubeConfig) -> dict[str, str]:
    """Zone name (``topology.kubernetes.io/zone``) -> catalog zone, as the nodes tell."""
    ids: dict[str, str] = {}
    for node in nodes:
        labels = _labels(node)
        name, zone = labels.get(ZONE_LABEL), _catalog_zone(labels, config)
        if name and zone:
            ids[name] = zone
    return ids


def _pool_sources(
    pool: Mapping[str, Any],
    config: KubeConfig,
    ids: Mapping[str, str],
    cluster_regions: frozenset[str] | None,
) -> list[ZoneSource]:
    name = str((pool.get("metadata") or {}).get("name") or "?")
    spec = ((pool.get("spec") or {}).get("template") or {}).get("spec") or {}
    requirements = [r for r in spec.get("requirements") or [] if isinstance(r, Mapping)]
    markets = _pool_markets(requirements)
    if not markets:
        return []
    zone_keys = {ZONE_LABEL, *config.zone_labels.values()}
    pinned = _values(requirements, REGION_LABEL, "In")
    regions = frozenset(pinned) if pinned is not None else cluster_regions
    picked = [v for r in requirements if r.get("key") in zone_keys and r.get("operator") == "In"
              for v in r.get("values") or []]  # fmt: skip
    excluded = frozenset(
        ids.get(v, v)
        for r in requirements
        if r.get("key") in zone_keys and r.get("operator") == "NotIn"
        for v in r.get("values") or []
    )
    what = f"NodePool {name}"
    if not any(r.get("key") in zone_keys and r.get("operator") == "In" for r in requirements):
        return [ZoneSource(what, markets, None, regions, excluded)]
    known = frozenset(ids.get(v, v) for v in picked if v in ids or not _AWS_ZONE_NAME.match(v))
    guessed = frozenset(m.group(1) for v in picked if v not in ids and (m := _AWS_ZONE_NAME.match(v)))
    sources = [ZoneSource(what, markets, known - excluded, regions)] if known - excluded else []
    if guessed:
        sources.append(ZoneSource(what, markets, None, guessed, excluded))
    return sources


def _pool_markets(requirements: Sequence[Mapping[str, Any]]) -> frozenset[MarketKind]:
    chosen = _values(requirements, KARPENTER_CAPACITY, "In")
    if chosen is None and _values(requirements, KARPENTER_CAPACITY, "NotIn") is None:
        return frozenset({MarketKind.ON_DEMAND})  # Karpenter's default capacity type
    allowed = set(_KARPENTER_MARKETS) if chosen is None else set(chosen)
    allowed -= set(_values(requirements, KARPENTER_CAPACITY, "NotIn") or ())
    return frozenset(_KARPENTER_MARKETS[v] for v in allowed if v in _KARPENTER_MARKETS)


def _values(requirements: Sequence[Mapping[str, Any]], key: str, operator: str) -> list[str] | None:
    found = [r for r in requirements if r.get("key") == key and r.get("operator") == operator]
    if not found:
        return None
    return [str(v) for r in found for v in r.get("values") or []]


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels


def _quantity(value: Any) -> float:
    try:
        return float(str(value)) if value is not None else 0.0
    except ValueError:
        return 0.0
