"""What the operator's passes know of the cluster without asking the API server again: pod and node
lists shared by the passes, and the status each GPUJob was last written with.

Listings: one LIST for every GPUJob of a namespace (its gpuctl pods) and one for the cluster (its
nodes), instead of one of each per pass.

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

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.manifests import LABEL_JOB, job_label

NODES = "nodes"

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

    def begin(self, name: str, namespace: str) -> dict[str, Any] | None:
        """A pass of the job begins: counted, and the status its previous pass wrote (``None``: not
        known, read the GPUJob). Until :meth:`wrote_status`, nothing is known of the job's status."""
        job = f"{namespace}/{name}"
        with self._lock:
            passes[job] += 1
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

    def job_pods(self, name: str, namespace: str, owner_uid: str, api: Any) -> list[dict[str, Any]]:
        """The GPUJob's pods (:func:`client.belongs_to`), from its namespace's shared listing."""
        pods = self._read(
            f"pods/{namespace}", f"{namespace}/{name}", lambda: client.list_gpuctl_pods(namespace, api)
        )
        label = job_label(name)
        mine = [p for p in pods if (p["metadata"].get("labels") or {}).get(LABEL_JOB) == label]
        return [p for p in mine if client.belongs_to(p, name, owner_uid)]

    def node_names(self, name: str, namespace: str, api: Any) -> set[str] | None:
        """The cluster's node names (``None``: this account may not list nodes), shared by all jobs."""
        names: set[str] | None = self._read(NODES, f"{namespace}/{name}", lambda: client.list_node_names(api))
        return names

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

    def _read(self, key: str, job: str, fetch: Callable[[], Any]) -> Any:
        with self._lock:
            listing = self._listings.get(key)
            if listing is None or listing.seq <= self._needs.get((key, job), 0):
                items = fetch()  # under the lock: the other passes wait for this one LIST
                self._seq += 1
                listing = self._listings[key] = _Listing(self._seq, items)
            self._needs[key, job] = listing.seq
            return listing.items
