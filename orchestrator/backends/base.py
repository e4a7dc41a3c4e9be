"""What every backend offers the controller, and what it reports back.

A backend maps the generic placement (GPU type, market, zone, N nodes) to one cluster manager:
local processes, SLURM jobs, Kubernetes pods. It holds no job state of its own that matters: after a
controller restart :meth:`Backend.observe` must find running nodes again from the cluster manager.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from orchestrator.spec import JobSpec
from orchestrator.state.placement import Placement as Placement


class NodePhase(StrEnum):
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    """The training command exited non-zero without a preemption."""
    PREEMPTED = "PREEMPTED"
    """Reclaimed by the market (after a notice, or without one)."""
    LOST = "LOST"
    """Gone without an exit code we can read (killed while nobody watched)."""

    @property
    def ended(self) -> bool:
        return self not in (NodePhase.STARTING, NodePhase.RUNNING)


@dataclass(frozen=True)
class NodeObservation:
    node_id: str
    phase: NodePhase
    exit_code: int | None = None
    notice_at: datetime | None = None
    ended_at: datetime | None = None
    queued: bool = False
    """Waiting in the cluster manager's queue (a SLURM job PENDING): no node is held, nothing is billed."""
    wait_reason: str | None = None
    """Why the cluster manager keeps it waiting, in its own words (squeue's reason, the scheduler's
    message), for "why is it waiting?"."""


@dataclass(frozen=True)
class Progress:
    """The newest line of the training progress file (see :mod:`orchestrator.contract`)."""

    step: int
    total_steps: int | None = None
    loss: float | None = None
    world_size: int | None = None
    finished: bool = False
    metrics: Mapping[str, float] = field(default_factory=dict)
    time: datetime | None = None


@dataclass(frozen=True)
class AttemptObservation:
    nodes: tuple[NodeObservation, ...]
    progress: Progress | None = None

    def in_phase(self, *phases: NodePhase) -> list[NodeObservation]:
        return [n for n in self.nodes if n.phase in phases]


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a backend needs to start (part of) an attempt."""

    job_id: str
    attempt: int
    spec: JobSpec
    placement: Placement
    node_ids: Sequence[str]
    min_nodes: int
    max_nodes: int
    checkpoint_dir: str
    job_dir: Path
    """Folder for this job's logs and files on the controller's machine."""
    attempt_nodes: int | None = None
    """How many nodes the whole attempt has (``node_ids`` may be only the ones still to start, after a
    restart of the controller); None: ``node_ids`` are all of them."""
    deadline: datetime | None = None
    """The job's deadline, resolved once at admission (None: no deadline); a backend with a time limit
    per attempt (SLURM's ``--time``) asks for the time left to it."""


@dataclass(frozen=True)
class OwnPlacements:
    """A backend's own placements for a spec: spot per zone (in preference order) and on-demand."""

    spot_by_zone: Mapping[str, Placement]
    on_demand: Placement | None


class Backend(Protocol):
    """The side effects of running a job. All methods are idempotent where noted."""

    name: str

    def launch(self, request: LaunchRequest) -> None:
        """Start the nodes ``request.node_ids`` (all of an attempt, or more nodes of an elastic one).

        Idempotent: a node id that is already running is not started twice.
        """

    def observe(self, job_id: str, attempt: int, node_ids: Sequence[str]) -> AttemptObservation:
        """Report each node's phase and the newest training progress."""

    def own_placements(self, spec: JobSpec) -> OwnPlacements | None:
        """Where the spec may run by this backend's own configuration (a SLURM cluster's partitions
        and prices); ``None``: the controller searches the public price catalog."""

    def spot_capacity(self, job_id: str, zone: str, now: datetime) -> int | None:
        """Spot nodes the market offers this job now in ``zone``; ``None`` means no limit is known."""

    def tick(
        self, job_id: str, attempt: int, node_ids: Sequence[str], spot: bool, grace_s: float, now: datetime
    ) -> None:
        """The backend's own periodic duties (the local simulated market preempts and kills here)."""

    def stop(self, job_id: str, attempt: int, node_ids: Sequence[str], grace_s: float) -> None:
        """Stop nodes: notice signal, wait up to ``grace_s``, then kill. Idempotent."""

    def log_paths(self, job_id: str) -> list[Path]:
        """Files holding the job's output, oldest attempt first."""
