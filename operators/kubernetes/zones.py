"""The operator's candidate zones: the price catalog's offers the cluster can run, within the job's
``market.zones`` and ``market.regions`` (:func:`orchestrator.controller.kube_zones.cluster_candidates`,
the rule ``gpuctl submit --backend kubernetes`` checks too). Admission refuses a job none of whose
allowed zones the cluster has, naming the zones it has; every pass places by the same candidates, so
no pod asks for a zone the cluster lacks."""

from __future__ import annotations

from typing import Any

from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.cluster_zones import ClusterZones, cluster_zones
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.backends.kubernetes.listing import ClusterView
from orchestrator.controller.kube_zones import cluster_candidates as cluster_candidates
from orchestrator.controller.placement import Candidates
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
