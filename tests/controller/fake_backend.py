"""An in-process backend for controller tests: nodes "run" without processes and finish at once.

A launched node is RUNNING until it has been observed once, then SUCCEEDED with finished progress.
``failing``: job ids whose ``observe`` raises (``exc``) while their count lasts; ``crashing``: job ids
whose ``launch`` raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.backends.base import (
    AttemptObservation,
    LaunchRequest,
    NodeObservation,
    NodePhase,
    OwnPlacements,
    Placement,
    Progress,
)
from orchestrator.catalog.offers import MarketKind
from orchestrator.spec import JobSpec

SPOT = Placement("V100", MarketKind.SPOT, "aws", "us-east-1", "zone-a", "p3.2xlarge", 1, 1.0, 3.0, "test")
ON_DEMAND = Placement("V100", MarketKind.ON_DEMAND, "aws", "us-east-1", "", "p3.2xlarge", 1, 3.0, 3.0, "test")


class FakeBackend:
    name = "fake"

    def __init__(self) -> None:
        self.observed: dict[str, int] = {}
        self.launched: list[str] = []
        self.stopped: list[str] = []
        self.failing: dict[str, tuple[int, Exception]] = {}
        self.crashing: dict[str, Exception] = {}

    def launch(self, request: LaunchRequest) -> None:
        if request.job_id in self.crashing:
            raise self.crashing[request.job_id]
        for node_id in request.node_ids:
            if node_id not in self.observed:
                self.observed[node_id] = 0
                self.launched.append(node_id)

    def observe(self, job_id: str, attempt: int, node_ids: Sequence[str]) -> AttemptObservation:
        left, exc = self.failing.get(job_id, (0, None))
        if left > 0 and exc is not None:
            self.failing[job_id] = (left - 1, exc)
            raise exc
        nodes = []
        for node_id in node_ids:
            seen = self.observed.get(node_id)
            if seen is None:
                nodes.append(NodeObservation(node_id, NodePhase.LOST))
                continue
            self.observed[node_id] = seen + 1
            phase = NodePhase.SUCCEEDED if seen >= 1 or node_id in self.stopped else NodePhase.RUNNING
            nodes.append(
                NodeObservation(node_id, phase, exit_code=0 if phase is NodePhase.SUCCEEDED else None)
            )
        finished = bool(nodes) and all(n.phase is NodePhase.SUCCEEDED for n in nodes)
        progress = Progress(step=10, total_steps=10, finished=finished, time=datetime.now(UTC))
        return AttemptObservation(tuple(nodes), progress)

    def own_placements(self, spec: JobSpec) -> OwnPlacements | None:
        return OwnPlacements({SPOT.zone: SPOT}, ON_DEMAND)

    def spot_capacity(self, job_id: str, zone: str, now: datetime) -> int | None:
        return None

    def tick(
        self, job_id: str, attempt: int, node_ids: Sequence[str], spot: bool, grace_s: float, now: datetime
    ) -> None:
        return None

    def stop(self, job_id: str, attempt: int, node_ids: Sequence[str], grace_s: float) -> None:
        self.stopped.extend(n for n in node_ids if n not in self.stopped)

    def log_paths(self, job_id: str) -> list[Path]:
        return []
