"""A simulated backend: nodes, training progress and a spot market that advance only when told to.

Nothing runs and no time passes by itself: a test calls :meth:`SimulatedBackend.advance` to move the
world one round (each attempt whose nodes all run trains one step, scripted market events fire), and
the controller observes it as it would a cluster. The world also keeps what a test asserts on: how
often each node was started, and how often each job's training finished.

    backend = SimulatedBackend()
    backend.script(job_id, SimScript(steps=6, reclaim_at_step=3))
    ... backend.advance(); controller.tick_job(job_id, clock.now()) ...
    assert backend.starts == {...: 1 for each node}  # no node started twice
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
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
from orchestrator.testing.clock import FakeClock

SIM_SPOT = Placement("V100", MarketKind.SPOT, "sim", "sim-1", "sim-1a", "sim.v100", 1, 1.0, 3.0, "simulated")
SIM_ON_DEMAND = Placement(
    "V100", MarketKind.ON_DEMAND, "sim", "sim-1", "sim-1a", "sim.v100", 1, 3.0, 3.0, "simulated"
)


@dataclass(frozen=True)
class SimScript:
    """What happens to one job in the simulated world."""

    steps: int = 5
    """Training steps to finish (one per round while every node of the attempt runs)."""
    reclaim_at_step: int | None = None
    """The market reclaims every node (notice first) when training reaches this step, once."""
    lose_node_at_step: int | None = None
    """One node (the last) vanishes without a notice at this step, once (an elastic job rescales)."""
    fail_at_step: int | None = None
    """The training command exits 1 on every node at this step, once."""
    stall_at_step: int | None = None
    """Training stops advancing at this step while every node keeps running (a rank hung in a
    collective), in the first attempt that reaches it; a later attempt trains on."""


@dataclass
class _Node:
    job_id: str
    attempt: int
    phase: NodePhase = NodePhase.STARTING
    exit_code: int | None = None
    notice_at: datetime | None = None
    ended_at: datetime | None = None
    stopping: bool = False


@dataclass
class _Job:
    script: SimScript
    step: int = 0
    """Newest checkpointed step: a new attempt resumes from it."""
    attempt: int = 0
    progress_at: datetime | None = None
    finished_in_attempt: int | None = None
    fired: dict[str, int] = field(default_factory=dict)
    """Scripted events that fired, with the attempt they fired in."""


class SimulatedBackend:
    """A :class:`~orchestrator.backends.base.Backend` over a deterministic simulated world."""

    name = "simulated"

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self.nodes: dict[str, _Node] = {}
        self.jobs: dict[str, _Job] = {}
        self.starts: dict[str, int] = {}
        """Node id -> how many times it was started (a correct controller starts each once)."""
        self.finished: dict[str, int] = {}
        """Job id -> how many times its training finished (a correct controller: once)."""

    def script(self, job_id: str, script: SimScript) -> None:
        self.jobs[job_id] = _Job(script)

    # --- the world ---------------------------------------------------------------------------------
    def advance(self) -> None:
        """One round: stopping nodes exit, then every attempt whose nodes all run trains one step."""
        now = self.clock.now()
        for node in self.nodes.values():
            if node.stopping and not node.phase.ended:
                self._end(node, NodePhase.PREEMPTED if node.notice_at else NodePhase.FAILED, 143, now)
            elif node.phase is NodePhase.STARTING:
                node.phase = NodePhase.RUNNING
        for job_id, job in self.jobs.items():
            nodes = [n for n in self.nodes.values() if n.job_id == job_id and n.attempt == job.attempt]
            running = [n for n in nodes if n.phase is NodePhase.RUNNING and not n.stopping]
            if not nodes or len(running) != len([n for n in nodes if not n.phase.ended]):
                continue
            if not running or job.finished_in_attempt == job.attempt:
                continue
            if job.script.stall_at_step == job.step and job.fired.get("stall", job.attempt) == job.attempt:
                job.fired["stall"] = job.attempt  # hung: the nodes run, the step does not move
                continue
            job.step += 1
            job.progress_at = now
            self._market(job_id, job, running, now)
            if job.step >= job.script.steps and all(not n.phase.ended for n in running):
                job.finished_in_attempt = job.attempt
                self.finished[job_id] = self.finished.get(job_id, 0) + 1
                for node in running:
                    self._end(node, NodePhase.SUCCEEDED, 0, now)

    def _market(self, job_id: str, job: _Job, running: list[_Node], now: datetime) -> None:
        script = job.script
        if script.reclaim_at_step == job.step and "reclaim" not in job.fired:
            job.fired["reclaim"] = job.attempt
            for node in running:  # the notice now; the nodes checkpoint and exit next round
                node.notice_at, node.stopping = now, True
        if script.lose_node_at_step == job.step and "lose" not in job.fired and len(running) > 1:
            job.fired["lose"] = job.attempt
            self._end(running[-1], NodePhase.LOST, None, now)
        if script.fail_at_step == job.step and "fail" not in job.fired:
            job.fired["fail"] = job.attempt
            for node in running:
                self._end(node, NodePhase.FAILED, 1, now)

    @staticmethod
    def _end(node: _Node, phase: NodePhase, code: int | None, now: datetime) -> None:
        node.phase, node.exit_code, node.ended_at, node.stopping = phase, code, now, False

    # --- the Backend protocol ------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> None:
        job = self.jobs.setdefault(request.job_id, _Job(SimScript()))
        job.attempt = max(job.attempt, request.attempt)
        for node_id in request.node_ids:
            if node_id in self.nodes:
                continue  # idempotent: already started
            self.nodes[node_id] = _Node(request.job_id, request.attempt)
            self.starts[node_id] = self.starts.get(node_id, 0) + 1

    def observe(self, job_id: str, attempt: int, node_ids: Sequence[str]) -> AttemptObservation:
        seen = []
        for node_id in node_ids:
            node = self.nodes.get(node_id)
            if node is None:
                seen.append(NodeObservation(node_id, NodePhase.STARTING))
                continue
            seen.append(NodeObservation(node_id, node.phase, node.exit_code, node.notice_at, node.ended_at))
        job = self.jobs.get(job_id)
        progress = None
        if job is not None and job.progress_at is not None:
            finished = job.finished_in_attempt == attempt
            progress = Progress(job.step, job.script.steps, finished=finished, time=job.progress_at)
        return AttemptObservation(tuple(seen), progress)

    def own_placements(self, spec: JobSpec) -> OwnPlacements | None:
        return OwnPlacements({SIM_SPOT.zone: SIM_SPOT}, SIM_ON_DEMAND)

    def spot_capacity(self, job_id: str, zone: str, now: datetime) -> int | None:
        return None

    def tick(
        self, job_id: str, attempt: int, node_ids: Sequence[str], spot: bool, grace_s: float, now: datetime
    ) -> None:
        return None

    def stop(self, job_id: str, attempt: int, node_ids: Sequence[str], grace_s: float) -> None:
        for node_id in node_ids:
            node = self.nodes.get(node_id)
            if node is not None and not node.phase.ended:
                node.stopping = True

    def log_paths(self, job_id: str) -> list[Path]:
        return []
