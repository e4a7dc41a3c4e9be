"""Pods the scheduler cannot place are queued (they hold no node), and say since when."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from orchestrator.backends.base import NodePhase
from orchestrator.backends.kubernetes.observe import pod_phase, unschedulable_since


def pending(*conditions: dict[str, Any], created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {
        "metadata": {"name": "j-n0", "creationTimestamp": created},
        "status": {"phase": "Pending", "conditions": list(conditions)},
    }


def scheduled(status: str, reason: str | None = None, at: str | None = None) -> dict[str, Any]:
    cond = {"type": "PodScheduled", "status": status}
    return {**cond, **({"reason": reason} if reason else {}), **({"lastTransitionTime": at} if at else {})}


def test_an_unschedulable_pod_is_queued_since_its_condition() -> None:
    pod = pending(scheduled("False", "Unschedulable", "2026-01-01T00:03:00Z"))
    seen = pod_phase(pod)
    assert seen.phase is NodePhase.STARTING and seen.queued
    assert unschedulable_since(pod) == datetime(2026, 1, 1, 0, 3, tzinfo=UTC)
    assert unschedulable_since(pending(scheduled("False", "Unschedulable"))) == datetime(
        2026, 1, 1, tzinfo=UTC
    )


def test_scheduled_or_gated_pods_are_not_queued() -> None:
    for pod in (
        pending(scheduled("True")),  # bound to a node: pulling the image, say
        pending(scheduled("False", "SchedulingGated")),  # held by something else than capacity
        pending(),
        {"metadata": {"name": "j-n0"}, "status": {"phase": "Running"}},
    ):
        assert not pod_phase(pod).queued and unschedulable_since(pod) is None
