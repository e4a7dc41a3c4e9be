"""The operator's candidate zones: the price catalog's offers the cluster can run
(:mod:`orchestrator.backends.kubernetes.cluster_zones`), within the job's ``market.zones`` and
``market.regions``. Admission refuses a job none of whose allowed zones the cluster has, naming the
zones it has; every pass places by the same candidates, so no pod asks for a zone the cluster lacks."""

from __future__ import annotations

import os
from typing import Any

from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.cluster_zones import ClusterZones, cluster_zones
from orchestrator.backends.kubernetes.config import PRICE_CATALOG_ENV, KubeConfig
from orchestrator.backends.kubernetes.listing import ClusterView
from orchestrator.catalog.offers import MarketKind, Offer, builtin_offers, read_offers_csv
from orchestrator.controller.placement import Candidates, NoPlacement, catalog_candidates
from orchestrator.spec import JobSpec


def cluster_of(
    name: str, namespace: str, config: KubeConfig, api: Any | None, view: ClusterView | None
) -> ClusterZones:
    """The cluster's zones, from this round's shared listings (``view``: with the GPU nodes seen since
    the operator started), else listed now."""
    if view is not None:
        nodes, pools = view.nodes_seen(name, namespace, api), view.node_pools(name, namespace, api)
    else:
        nodes, pools = client.list_nodes(api), client.list_node_pools(api)
    return cluster_zones(nodes, pools, config)


def cluster_candidates(spec: JobSpec, cluster: ClusterZones | None) -> Candidates:
    """Each allowed zone's spot placement and the on-demand one, of the offers the cluster can run,
    from the chart's price catalog when one is mounted. :class:`NoPlacement` naming the cluster's zones
    when the job allows none of them (the catalog's own refusal first, when it has no offer at all)."""
    catalog = os.environ.get(PRICE_CATALOG_ENV)
    found = catalog_candidates(spec, catalog)
    if cluster is None:
        return found
    try:
        return catalog_candidates(spec, catalog, cluster.allows)
    except NoPlacement:
        raise NoPlacement(
            f"job '{spec.name}': the cluster has none of the zones it allows "
            f"({_allowed(spec, catalog)}); the cluster has {cluster.describe()}",
            "allow one of the cluster's zones in market.zones or market.regions (or leave them out), or "
            "run the job on a cluster with nodes there",
        ) from None


def narrowed(spec: JobSpec, found: Candidates) -> JobSpec:
    """``spec`` with ``market.zones`` cut to the candidates' zones (what on-demand pods may ask for);
    unchanged when it lists no zone or none is a candidate."""
    zones = [z for z in spec.market.zones if z in _zones(found)]
    if not spec.market.zones or not zones or zones == list(spec.market.zones):
        return spec
    market = spec.market.model_copy(update={"zones": zones})
    return spec.model_copy(update={"market": market})


def _zones(found: Candidates) -> set[str]:
    zones = set(found.spot_by_zone)
    if found.on_demand is not None:
        zones.add(found.on_demand.zone)
    return zones


def _allowed(spec: JobSpec, catalog: str | None) -> str:
    """The zones of the catalog's offers the spec allows, for a refusal."""
    offers: list[Offer] = list(
        read_offers_csv(catalog, "chart price catalog") if catalog else builtin_offers()
    )
    types = {t.lower() for t in spec.resources.gpu_types}
    zones = sorted(
        {
            o.zone
            for o in offers
            if o.gpu_type.lower() in types
            and (spec.market.cloud is None or o.cloud == spec.market.cloud)
            and (not spec.market.regions or o.region in spec.market.regions)
            and (not spec.market.zones or o.zone in spec.market.zones)
            and any(o.price(m) is not None for m in MarketKind)
        }
    )
    shown = ", ".join(zones[:12]) + (f" and {len(zones) - 12} more" if len(zones) > 12 else "")
    return shown or "none"
