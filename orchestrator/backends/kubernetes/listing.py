"""What the operator's passes know of the cluster without asking the API server again: pod and node
lists shared by the passes, and the status each GPUJob was last written with.

Listings: one LIST for every GPUJob of a namespace (its gpuctl pods) and one for the cluster (its
nodes, and its Karpenter NodePools: :mod:`orchestrator.backends.kubernetes.cluster_zones`), instead of
one of each per pass.

A listing is fetched again when a pass asks for one it has already read, or one older than its own
last writes: so every pass sees the pods and nodes as listed after its job's previous pass began, and
after the pods its job created or deleted (:meth:`ClusterView.wrote`). With every GPUJob passing once
per reconcile interval, that is one LIST of pods per namespace and one of nodes per interval, whatever
the number of jobs; a change on the cluster (a pod reclaimed, a node gone) is seen at most one interval
later than with a list per pass.

Statuses: a pass may take the GPUJob as kopf's watch last delivered it instead of reading it, when its
status is the one this process last wrote (:meth:`ClusterView.begin`); a copy the watch has not
brought up to date yet, or a status someone else wrote, is read again. Thread safe (kopf runs passes of
different jobs in parallel)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.cluster_zones import is_gpu_node, node_summary
from orchestrator.backends.kubernetes.manifests import LABEL_JOB, job_label

NODES = "nodes"
NODE_POOLS = "nodepools"

passes: Counter[str] = Counter()
"""Passes begun in this process, by ``NAMESPACE/NAME`` (:meth:`ClusterView.begin`): what the testing kit
waits on."""


@dataclass(frozen=True)
class _Listing:
    seq: int
    items: Any


class ClusterView:
    """The shared listings (see the module); one per operator process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._listings: dict[str, _Listing] = {}
        self._needs: dict[tuple[str, str], int] = {}
        """(listing, job) -> the listing the job's next read must be newer than."""
        self._statuses: dict[str, dict[str, Any]] = {}
        """Job -> the status its last pass wrote (taken away when a pass begins)."""
        self._seen_nodes: dict[str, dict[str, Any]] = {}
        """What the GPU nodes listed since the operator started told of their zones and markets."""
        self._this_pass: dict[tuple[str, str], Any] = {}
        """(cluster-wide listing, job) -> what the job's current pass read of it (a pass reads the nodes
        for its zones and for its pods: one listing serves both)."""

    def begin(self, name: str, namespace: str) -> dict[str, Any] | None:
        """A pass of the job begins: counted, and the status its previous pass wrote (``None``: not
        known, read the GPUJob). Until :meth:`wrote_status`, nothing is known of the job's status."""
        job = f"{namespace}/{name}"
        with self._lock:
            passes[job] += 1
            for key in (NODES, NODE_POOLS):
                self._this_pass.pop((key, job), None)
            return self._statuses.pop(job, None)

    def wrote_status(self, name: str, namespace: str, status: Mapping[str, Any]) -> None:
        """The pass wrote this status (or read it from the API server)."""
        with self._lock:
            self._statuses[f"{namespace}/{name}"] = dict(status)

    def clear(self) -> None:
        """Nothing known any more (an operator that starts)."""
        with self._lock:
            self._listings.clear()
            self._needs.clear()
            self._statuses.clear()
            self._seen_nodes.clear()
            self._this_pass.clear()

    def job_pods(self, name: str, namespace: str, owner_uid: str, api: Any) -> list[dict[str, Any]]:
        """The GPUJob's pods (:func:`client.belongs_to`), from its namespace's shared listing."""
        pods = self._read(
            f"pods/{namespace}", f"{namespace}/{name}", lambda: client.list_gpuctl_pods(namespace, api)
        )
        label = job_label(name)
        mine = [p for p in pods if (p["metadata"].get("labels") or {}).get(LABEL_JOB) == label]
        return [p for p in mine if client.belongs_to(p, name, owner_uid)]

    def nodes(self, name: str, namespace: str, api: Any) -> list[dict[str, Any]] | None:
        """The cluster's nodes (``None``: this account may not list nodes), shared by all jobs."""
        nodes: list[dict[str, Any]] | None = self._read_in_pass(
            NODES, f"{namespace}/{name}", lambda: client.list_nodes(api)
        )
        return nodes

    def nodes_seen(self, name: str, namespace: str, api: Any) -> list[dict[str, Any]] | None:
        """The cluster's GPU nodes as listed now and since the operator started (:func:`node_summary`:
        their zone, region, market and GPU labels; one each). A zone whose spot nodes were all reclaimed
        is still one of the cluster's (node groups scale to zero); ``None``: nodes not listable."""
        nodes = self.nodes(name, namespace, api)
        if nodes is None:
            return None
        with self._lock:
            for node in nodes:
                if is_gpu_node(node):
                    summary = node_summary(node)
                    self._seen_nodes.setdefault(json.dumps(summary, sort_keys=True), summary)
            return list(self._seen_nodes.values())

    def node_names(self, name: str, namespace: str, api: Any) -> set[str] | None:
        """The names of :meth:`nodes`."""
        return client.node_names(self.nodes(name, namespace, api))

    def node_pools(self, name: str, namespace: str, api: Any) -> list[dict[str, Any]]:
        """The cluster's Karpenter NodePools (none without the CRD), shared by all jobs as the nodes are."""
        pools: list[dict[str, Any]] = self._read_in_pass(
            NODE_POOLS, f"{namespace}/{name}", lambda: client.list_node_pools(api)
        )
        return pools

    def wrote(self, name: str, namespace: str) -> None:
        """The job created or deleted pods: its next read lists them again."""
        with self._lock:
            self._needs[f"pods/{namespace}", f"{namespace}/{name}"] = self._seq

    def forget(self, name: str, namespace: str) -> None:
        """The GPUJob is gone."""
        job = f"{namespace}/{name}"
        with self._lock:
            for key in [k for k in self._needs if k[1] == job]:
                del self._needs[key]
            self._statuses.pop(job, None)

    def _read_in_pass(self, key: str, job: str, fetch: Callable[[], Any]) -> Any:
        """:meth:`_read`, once per pass of the job: its later reads in the same pass get the same items."""
        with self._lock:
            if (key, job) in self._this_pass:
                return self._this_pass[key, job]
        items = self._read(key, job, fetch)
        with self._lock:
            self._this_pass[key, job] = items
        return items

    def _read(self, key: str, job: str, fetch: Callable[[], Any]) -> Any:
        with self._lock:
            listing = self._listings.get(key)
            if listing is None or listing.seq <= self._needs.get((key, job), 0):
                items = fetch()  # under the lock: the other passes wait for this one LIST
                self._seq += 1
                listing = self._listings[key] = _Listing(self._seq, items)
            self._needs[key, job] = listing.seq
            return listing.items
