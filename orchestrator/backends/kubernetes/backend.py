"""The Kubernetes backend: the :class:`~orchestrator.backends.base.Backend` protocol over pods.

For the gpuctl controller (``gpuctl submit --backend kubernetes`` without the operator): each node
of an attempt is a pod named after its node id; the cluster holds all state, so :meth:`observe`
finds the pods again after a controller restart. The operator uses the same builders directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.backends.base import AttemptObservation, LaunchRequest, NodeObservation, OwnPlacements
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.backends.kubernetes.manifests import (
    LABEL_ATTEMPT,
    Owner,
    build_pod,
    build_service,
    derived_name,
)
from orchestrator.backends.kubernetes.observe import observe_pods
from orchestrator.errors import NotFoundError
from orchestrator.spec import JobSpec


def pod_name_for(node_id: str) -> str:
    """A DNS label for a controller node id (:func:`derived_name`: distinct ids, distinct names)."""
    return derived_name(node_id)


class KubernetesBackend:
    """Runs attempts as pods in one namespace."""

    name = "kubernetes"

    def __init__(self, config: KubeConfig | None = None, api: Any | None = None) -> None:
        self.config = config or KubeConfig()
        self._api = api

    @property
    def api(self) -> Any:
        if self._api is None:
            self._api = client.api_client()
        return self._api

    @property
    def namespace(self) -> str:
        return self.config.namespace

    def _owner(self, job_id: str) -> Owner | None:
        """The GPUJob of that name, when the job was submitted as one (its pods go with it)."""
        try:
            body = client.get_gpujob(job_id, self.namespace, self.api)
        except NotFoundError:
            return None
        return Owner(job_id, str(body["metadata"].get("uid", "")))

    def _pods(self, job_id: str, owner: Owner | None, attempt: int | None = None) -> list[dict[str, Any]]:
        """The job's pods: its label and its GPUJob as owner (no owner when there is no GPUJob)."""
        uid = owner.uid if owner else None
        return [
            p
            for p in client.list_job_pods(job_id, self.namespace, self.api)
            if client.belongs_to(p, job_id, uid)
            and (attempt is None or p["metadata"].get("labels", {}).get(LABEL_ATTEMPT) == str(attempt))
        ]

    def launch(self, request: LaunchRequest) -> None:
        owner = self._owner(request.job_id)
        uid = owner.uid if owner else None
        client.ensure_service(
            build_service(request.job_id, self.namespace, self.config, owner), self.api, uid
        )
        existing = {p["metadata"]["name"] for p in self._pods(request.job_id, owner)}
        others = len([n for n in existing if n not in {pod_name_for(i) for i in request.node_ids}])
        for position, node_id in enumerate(request.node_ids):
            name = pod_name_for(node_id)
            if name in existing:
                continue  # idempotent: that node runs already
            pod = build_pod(
                request.spec,
                request.placement,
                job=request.job_id,
                namespace=self.namespace,
                attempt=request.attempt,
                node_index=others + position,
                config=self.config,
                owner=owner,
                name=name,
                attempt_nodes=request.attempt_nodes or len(request.node_ids),
            )
            client.create_pod(pod, self.api, uid)

    def observe(self, job_id: str, attempt: int, node_ids: Sequence[str]) -> AttemptObservation:
        pods = self._pods(job_id, self._owner(job_id), attempt)
        nodes = client.list_node_names(self.api)
        seen = observe_pods(pods, [pod_name_for(n) for n in node_ids], nodes)
        # Report under the controller's node ids; training progress lives in the pods (not read here).
        observed = tuple(
            NodeObservation(nid, o.phase, o.exit_code, o.notice_at, o.ended_at)
            for nid, o in zip(node_ids, seen, strict=True)
        )
        return AttemptObservation(nodes=observed, progress=None)

    def own_placements(self, spec: JobSpec) -> OwnPlacements | None:
        return None  # the node provisioner's prices are the public catalog's

    def spot_capacity(self, job_id: str, zone: str, now: datetime) -> int | None:
        return None  # the node provisioner decides; Kubernetes does not tell us in advance

    def tick(
        self, job_id: str, attempt: int, node_ids: Sequence[str], spot: bool, grace_s: float, now: datetime
    ) -> None:
        """Nothing to do: the kubelet enforces grace periods and the provisioner reclaims nodes."""

    def stop(self, job_id: str, attempt: int, node_ids: Sequence[str], grace_s: float) -> None:
        """Delete the pods: the kubelet sends SIGTERM (the notice) and kills after ``grace_s``.

        Only the job's own pods (:meth:`_pods`), whatever else carries their names."""
        pods = self._pods(job_id, self._owner(job_id), None if node_ids else attempt)
        wanted = {pod_name_for(n) for n in node_ids}
        for pod in pods:
            meta = pod["metadata"]
            if not node_ids or meta["name"] in wanted:
                client.delete_pod(
                    meta["name"], self.namespace, grace_s=grace_s, api=self.api, uid=meta.get("uid")
                )

    def log_paths(self, job_id: str) -> list[Path]:
        return []  # pod output is read through the API: client.pod_logs(job_id, namespace)
