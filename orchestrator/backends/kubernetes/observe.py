"""Pure reading of pods: pod dicts (as the API returns them) -> node phases.

A node of a job is a pod. Lost pods are recognised by:

- a ``DisruptionTarget`` condition (preemption by the scheduler, taint manager, eviction API, kubelet
  shutdown of a reclaimed spot node) -> PREEMPTED;
- ``status.reason == "Evicted"`` (node pressure eviction) -> PREEMPTED;
- the trainer exiting with :data:`orchestrator.contract.PREEMPTED_EXIT_CODE` -> PREEMPTED;
- its node no longer existing, or the pod itself being gone -> LOST.

A pending pod the scheduler could not place (``PodScheduled=False``, reason ``Unschedulable``: no node
fits, and the node provisioner has not made one yet) is STARTING and ``queued``: no node is held for it,
so nothing is billed. How long it has waited is :func:`unschedulable_since`; the operator decides
when that means a spot shortage (:mod:`operators.kubernetes.spot_market`).

Any other non-zero exit is FAILED, phase ``Succeeded`` is SUCCEEDED.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from orchestrator.backends.base import NodeObservation, NodePhase
from orchestrator.backends.kubernetes.manifests import TRAINER
from orchestrator.contract import PREEMPTED_EXIT_CODE
from orchestrator.times import parse_iso


def _parse_time(text: str | None) -> datetime | None:
    return parse_iso(text) if text else None


def _condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def _unschedulable(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if pod.get("status", {}).get("phase") not in (None, "Pending"):
        return None
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return dict(cond) if cond.get("reason") == "Unschedulable" else None
    return None


def unschedulable_since(pod: Mapping[str, Any]) -> datetime | None:
    """When the scheduler began finding no node for a pending pod (its ``PodScheduled=False``
    condition with reason ``Unschedulable``; the pod's creation when the condition has no time).
    None when the pod is not unschedulable, or no time is known."""
    cond = _unschedulable(pod)
    if cond is None:
        return None
    return _parse_time(cond.get("lastTransitionTime") or pod.get("metadata", {}).get("creationTimestamp"))


def _trainer_terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") == TRAINER:
            terminated = (status.get("state") or {}).get("terminated")
            return dict(terminated) if terminated else None
    return None


def pod_phase(pod: Mapping[str, Any], existing_nodes: Collection[str] | None = None) -> NodeObservation:
    """The phase of one pod. ``existing_nodes``: node names in the cluster, when known."""
    meta = pod.get("metadata", {})
    status = pod.get("status", {})
    name = str(meta.get("name", ""))
    phase = status.get("phase")
    terminated = _trainer_terminated(pod)
    exit_code = terminated.get("exitCode") if terminated else None
    ended_at = _parse_time(terminated.get("finishedAt")) if terminated else None
    disruption = _condition(pod, "DisruptionTarget")
    notice_at = _parse_time(disruption.get("lastTransitionTime")) if disruption else None

    if phase == "Succeeded":
        return NodeObservation(name, NodePhase.SUCCEEDED, exit_code=exit_code or 0, ended_at=ended_at)
    if disruption is not None or status.get("reason") == "Evicted" or exit_code == PREEMPTED_EXIT_CODE:
        return NodeObservation(name, NodePhase.PREEMPTED, exit_code, notice_at=notice_at, ended_at=ended_at)
    node = pod.get("spec", {}).get("nodeName")
    if existing_nodes is not None and node and node not in existing_nodes:
        return NodeObservation(name, NodePhase.LOST, exit_code, ended_at=ended_at)
    if phase == "Failed":
        return NodeObservation(
            name, NodePhase.FAILED, exit_code if exit_code is not None else 1, None, ended_at
        )
    if phase == "Running":
        return NodeObservation(name, NodePhase.RUNNING)
    if phase in (None, "Pending"):
        blocked = _unschedulable(pod)
        why = f"unschedulable: {blocked.get('message') or 'the scheduler found no node'}" if blocked else None
        return NodeObservation(name, NodePhase.STARTING, queued=blocked is not None, wait_reason=why)
    return NodeObservation(name, NodePhase.LOST)


def observe_pods(
    pods: Iterable[Mapping[str, Any]],
    expected: Sequence[str],
    existing_nodes: Collection[str] | None = None,
) -> list[NodeObservation]:
    """One observation per expected pod name; a pod that is gone is LOST."""
    by_name = {str(p.get("metadata", {}).get("name")): p for p in pods}
    return [
        pod_phase(by_name[name], existing_nodes) if name in by_name else NodeObservation(name, NodePhase.LOST)
        for name in expected
    ]
