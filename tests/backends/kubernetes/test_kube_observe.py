"""Pod phases: preemption signs (disruption, eviction, exit 75, node loss) versus failures."""

from __future__ import annotations

from typing import Any

from orchestrator.backends.base import NodePhase
from orchestrator.backends.kubernetes.observe import observe_pods, pod_phase
from orchestrator.contract import PREEMPTED_EXIT_CODE


def pod(phase: str, exit_code: int | None = None, node: str = "n-1", **status: Any) -> dict[str, Any]:
    containers = []
    if exit_code is not None:
        containers = [
            {
                "name": "trainer",
                "state": {"terminated": {"exitCode": exit_code, "finishedAt": "2026-01-01T00:00:00Z"}},
            }
        ]
    return {
        "metadata": {"name": "j-n0"},
        "spec": {"nodeName": node},
        "status": {"phase": phase, "containerStatuses": containers, **status},
    }


def test_phases() -> None:
    assert pod_phase(pod("Pending")).phase is NodePhase.STARTING
    assert pod_phase(pod("Running")).phase is NodePhase.RUNNING
    assert pod_phase(pod("Succeeded", 0)).phase is NodePhase.SUCCEEDED
    failed = pod_phase(pod("Failed", 3))
    assert failed.phase is NodePhase.FAILED and failed.exit_code == 3


def test_preemption_signs() -> None:
    assert pod_phase(pod("Failed", PREEMPTED_EXIT_CODE)).phase is NodePhase.PREEMPTED
    assert pod_phase(pod("Failed", reason="Evicted")).phase is NodePhase.PREEMPTED
    disrupted = pod(
        "Running",
        conditions=[
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "lastTransitionTime": "2026-01-01T00:00:05Z",
            }
        ],
    )
    obs = pod_phase(disrupted)
    assert obs.phase is NodePhase.PREEMPTED and obs.notice_at is not None
    # torchrun exits 1 when killed; with a DisruptionTarget condition that is still a preemption.
    assert (
        pod_phase({**disrupted, "status": {**disrupted["status"], "phase": "Failed"}}).phase
        is NodePhase.PREEMPTED
    )


def test_node_loss_and_missing_pods() -> None:
    assert pod_phase(pod("Running", node="gone"), existing_nodes={"n-1"}).phase is NodePhase.LOST
    assert pod_phase(pod("Running", node="n-1"), existing_nodes={"n-1"}).phase is NodePhase.RUNNING
    assert pod_phase(pod("Running", node="gone"), existing_nodes=None).phase is NodePhase.RUNNING
    seen = observe_pods([pod("Running")], ["j-n0", "j-n1"])
    assert [(o.node_id, o.phase) for o in seen] == [("j-n0", NodePhase.RUNNING), ("j-n1", NodePhase.LOST)]
