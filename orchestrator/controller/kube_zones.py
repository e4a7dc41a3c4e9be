"""Which zones a job may run in on a Kubernetes cluster: the price catalog's offers the cluster can
provide (:mod:`orchestrator.backends.kubernetes.cluster_zones`), within the job's ``market.zones`` and
``market.regions``. One rule for the operator (its admission and every pass) and for
``gpuctl submit --backend kubernetes``: a job none of whose allowed zones the cluster has is refused
``no_capacity``, naming the zones it has.

The operator lists the cluster's GPU nodes and Karpenter NodePools with its own RBAC; a client lists
them with the user's (:func:`client_cluster`), and when the user may not list either, the client skips
the check with a note (the operator still makes it).
"""

from __future__ import annotations

import os
from typing import Any

from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.cluster_zones import ClusterZones, cluster_zones
from orchestrator.backends.kubernetes.config import PRICE_CATALOG_ENV, KubeConfig
from orchestrator.catalog.offers import MarketKind, builtin_offers, find_offers, read_offers_csv
from orchestrator.controller.placement import Candidates, NoPlacement, catalog_candidates
from orchestrator.spec import JobSpec

UNCHECKED_NOTE = (
    "the cluster's zones are not checked before the GPUJob is created: this account may not list {what} "
    "(the operator checks them, and refuses a job whose zones the cluster lacks)"
)


def cluster_candidates(spec: JobSpec, cluster: ClusterZones | None) -> Candidates:
    """Each allowed zone's spot placement and the on-demand one, of the offers the cluster can run,
    from the chart's price catalog when one is mounted. :class:`NoPlacement` naming the cluster's zones
    when the job allows none of them (the catalog's own refusal first, when it has no offer at all).
    ``cluster`` None: the catalog's offers, unchecked."""
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


def client_cluster(api: Any | None = None) -> tuple[ClusterZones | None, str | None]:
    """The cluster's zones as this account can list them (its GPU nodes and NodePools, read by the
    operator's own rule with the settings of ``$GPUCTL_OPERATOR_CONFIG``), or None and a note saying
    why they are not checked: nodes or NodePools this account may not list (half a picture would
    refuse a job a NodePool could place)."""
    nodes = client.list_nodes(api)
    if nodes is None:
        return None, UNCHECKED_NOTE.format(what="nodes")
    pools = client.node_pools_if_listable(api)
    if pools is None:
        return None, UNCHECKED_NOTE.format(what="Karpenter NodePools")
    return cluster_zones(nodes, pools, KubeConfig.from_env()), None


def _allowed(spec: JobSpec, catalog: str | None) -> str:
    """The zones of the catalog's offers the spec allows, for a refusal."""
    offers = read_offers_csv(catalog, "chart price catalog") if catalog else builtin_offers()
    market = spec.market
    zones = sorted(
        {
            o.zone
            for gpu_type in spec.resources.gpu_types
            for o in find_offers(
                gpu_type, offers=offers, cloud=market.cloud, regions=market.regions, zones=market.zones
            )
            if any(o.price(m) is not None for m in MarketKind)
        }
    )
    shown = ", ".join(zones[:12]) + (f" and {len(zones) - 12} more" if len(zones) > 12 else "")
    return shown or "none"
