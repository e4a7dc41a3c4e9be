"""An in-process backend for controller tests: nodes "run" without processes and finish at once.

A launched node is RUNNING until it has been observed once, then SUCCEEDED with finished progress.
``failing``: job ids whose ``observe`` raises (``exc``) while their count lasts; ``crashing``: job ids
whose ``launch`` raises. The rest of the Backend protocol (placements, capacity, logs) is the test
kit's :class:`~orchestrator.testing.SimulatedBackend`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from orchestrator.backends.base import AttemptObservation, LaunchRequest, NodeObservation, NodePhase, Progress
from orchestrator.testing import SimulatedBackend


class FakeBackend(SimulatedBackend):
    name = "fake"

    def __init__(self) -> None:
        super().__init__()
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

    def stop(self, job_id: str, attempt: int, node_ids: Sequence[str], grace_s: float) -> None:
        self.stopped.extend(n for n in node_ids if n not in self.stopped)
