"""A GPUJob's nodes are pods: which pod is which node, what the pods say of the nodes, and creating and
deleting them.

The engine's node ``{job}-a{attempt}-n{index}`` (:func:`~orchestrator.state.job_state.node_id`) is the
pod of the job labelled with that attempt (``gpuctl.dev/attempt``) and index (``gpuctl.dev/node-index``),
named :func:`~orchestrator.backends.kubernetes.manifests.pod_name` ``(job, index)``. The pods of a
GPUJob are those it owns (:func:`~orchestrator.backends.kubernetes.client.belongs_to`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.backends.base import NodeObservation, NodePhase
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.config import KubeConfig
from orchestrator.backends.kubernetes.listing import ClusterView
from orchestrator.backends.kubernetes.manifests import (
    LABEL_ATTEMPT,
    LABEL_NODE_INDEX,
    Owner,
    build_pod,
    build_service,
    pod_name,
    service_name,
)
from orchestrator.backends.kubernetes.observe import pod_phase
from orchestrator.spec import JobSpec
from orchestrator.state.job_state import JobState, NodeLaunch, node_index


# --- pods <-> nodes ------------------------------------------------------------------------------
def pod_attempt(pod: Mapping[str, Any]) -> int:
    return int((pod.get("metadata", {}).get("labels") or {}).get(LABEL_ATTEMPT, "0"))


def pod_index(pod: Mapping[str, Any]) -> int | None:
    text = (pod.get("metadata", {}).get("labels") or {}).get(LABEL_NODE_INDEX)
    return int(text) if text is not None and str(text).isdigit() else None


def being_deleted(pod: Mapping[str, Any]) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def pods_of(
    attempt: int, node_ids: Sequence[str], pods: Sequence[Mapping[str, Any]]
) -> dict[str, Mapping[str, Any]]:
    """Node id -> its pod, for the nodes of ``attempt`` that have one."""
    by_index = {pod_index(p): p for p in pods if pod_attempt(p) == attempt}
    found = {n: by_index.get(node_index(n)) for n in node_ids}
    return {n: p for n, p in found.items() if p is not None}


def leftover_pods(state: JobState, pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The job's pods the controller is done with: of an older attempt, of a node recorded as ended,
    or of no node of the state (whether or not they are being deleted already)."""
    live = pods_of(
        state.attempt, [n.node_id for n in state.attempt_nodes if n.launch is not NodeLaunch.ENDED], pods
    )
    kept = {id(p) for p in live.values()}
    return [p for p in pods if id(p) not in kept]


def observe_nodes(
    state: JobState,
    pods: Sequence[Mapping[str, Any]],
    existing_nodes: set[str] | None,
    shortage: bool = False,
) -> tuple[NodeObservation, ...]:
    """The current attempt's nodes not ended: a pod's phase; a launched node without a pod is LOST,
    an intent without one STARTING (it is about to be created). ``shortage``: the attempt leaves a
    zone short of spot, its unscheduled pods are PREEMPTED while queued (they never held a node)."""
    active = [n for n in state.attempt_nodes if n.launch is not NodeLaunch.ENDED]
    found = pods_of(state.attempt, [n.node_id for n in active], pods)
    seen = []
    for node in active:
        pod = found.get(node.node_id)
        if pod is not None and shortage:
            seen.append(NodeObservation(node.node_id, NodePhase.PREEMPTED, queued=True))
        elif pod is not None:
            seen.append(dataclasses.replace(pod_phase(pod, existing_nodes), node_id=node.node_id))
        elif node.launch is NodeLaunch.LAUNCHED:
            seen.append(NodeObservation(node.node_id, NodePhase.LOST))
        else:
            seen.append(NodeObservation(node.node_id, NodePhase.STARTING))
    return tuple(seen)


# --- creating and deleting -----------------------------------------------------------------------
class PodWriter:
    """Creates and deletes one GPUJob's pods (and its rendezvous Service): a node is a pod."""

    def __init__(
        self,
        spec: JobSpec,
        owner: Owner,
        namespace: str,
        config: KubeConfig,
        api: Any | None,
        view: ClusterView | None = None,
    ) -> None:
        self.spec, self.owner, self.namespace, self.config, self.api = spec, owner, namespace, config, api
        self.view = view
        """Told of every pod created or deleted, so the job's next pass lists its pods again."""

    def create(
        self, state: JobState, node_ids: Sequence[str], pods: Sequence[Mapping[str, Any]]
    ) -> list[str]:
        """Create the pods of ``node_ids`` (a pod of the attempt that exists already counts as created;
        a name still held by an older attempt's pod waits for the next pass). Returns the created."""
        placement = state.placement
        assert placement is not None, "nodes are launched on the attempt's placement"
        by_name = {str(p["metadata"]["name"]): p for p in pods}
        created: list[str] = []
        service = False
        for node in node_ids:
            index = node_index(node)
            existing = by_name.get(pod_name(self.owner.name, index))
            if existing is not None:
                if pod_attempt(existing) == state.attempt:
                    created.append(node)
                continue
            if not service:
                config, owner = self.config, self.owner
                client.ensure_service(
                    build_service(owner.name, self.namespace, config, owner), self.api, owner.uid
                )
                service = True
            pod = build_pod(
                self.spec,
                placement,
                job=self.owner.name,
                namespace=self.namespace,
                attempt=state.attempt,
                node_index=index,
                config=self.config,
                owner=self.owner,
                attempt_nodes=len(state.attempt_nodes),
            )
            try:
                client.create_pod(pod, self.api, self.owner.uid)
            finally:
                self.wrote()
            created.append(node)
        return created

    def delete(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]  # one of this GPUJob's pods (listed by owner uid): that very pod only
        try:
            client.delete_pod(str(meta["name"]), self.namespace, api=self.api, uid=meta.get("uid"))
        finally:
            self.wrote()

    def wrote(self) -> None:
        """After a write, done or not (it may have reached the API server): a listing fetched from
        now on is newer than it."""
        if self.view is not None:
            self.view.wrote(self.owner.name, self.namespace)


def delete_pods(
    name: str, namespace: str, owner_uid: str, api: Any | None, view: ClusterView | None = None
) -> None:
    """Delete the GPUJob's pods not being deleted yet (each with its own grace period: a checkpoint);
    listed through ``view`` when given (told of the deletes)."""
    if view is not None:
        pods = view.job_pods(name, namespace, owner_uid, api)
    else:
        pods = client.list_job_pods(name, namespace, api, owner_uid)
    for pod in pods:
        meta = pod["metadata"]
        if not being_deleted(pod):
            try:
                client.delete_pod(str(meta["name"]), namespace, api=api, uid=meta.get("uid"))
            finally:
                if view is not None:
                    view.wrote(name, namespace)


def cleanup_job(name: str, namespace: str, api: Any | None = None, owner_uid: str | None = None) -> int:
    """Delete the job's pods and rendezvous Service (those of the GPUJob ``owner_uid`` only, when
    given); returns how many pods were deleted."""
    pods = client.list_job_pods(name, namespace, api, owner_uid)
    for pod in pods:
        meta = pod["metadata"]
        client.delete_pod(meta["name"], namespace, grace_s=None, api=api, uid=meta.get("uid"))
    client.delete_service(service_name(name), namespace, api, job=name, owner_uid=owner_uid)
    return len(pods)
