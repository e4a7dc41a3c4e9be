"""What the reconcile step asks the driver to do. Plain data; the driver applies them in order."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from orchestrator.backends.base import Placement
from orchestrator.state.status import FailureReason, JobStatus


@dataclass(frozen=True)
class Transition:
    target: JobStatus
    message: str
    reason: FailureReason | None = None


@dataclass(frozen=True)
class StartAttempt:
    """Open attempt N+1 on ``nodes`` nodes of ``placement`` and open its first segment."""

    placement: Placement
    nodes: int


@dataclass(frozen=True)
class StopNodes:
    """Notice, wait up to ``grace_s``, kill. ``node_ids`` empty means every node of the attempt."""

    node_ids: tuple[str, ...]
    grace_s: float
    reason: str


@dataclass(frozen=True)
class CloseSegment:
    reason: str


@dataclass(frozen=True)
class OpenSegment:
    """A new segment of the current attempt's placement on ``nodes`` nodes."""

    nodes: int


@dataclass(frozen=True)
class SegmentStartsNow:
    """Every node of the attempt still waits in the cluster manager's queue, which is not billed:
    the open segment starts now instead (so it starts when the nodes do, within a tick)."""


@dataclass(frozen=True)
class MarkNodesEnded:
    node_ids: tuple[str, ...]


@dataclass(frozen=True)
class CountPreemption:
    pass


@dataclass(frozen=True)
class CountRestart:
    pass


@dataclass(frozen=True)
class RightSize:
    """Remember the right-size pick ``gpu_type``; ``apply``: place on that type from now on."""

    gpu_type: str
    apply: bool
    why: str


@dataclass(frozen=True)
class RecordEvent:
    kind: str
    message: str


ALERT_KINDS = ("stalled", "idle", "deadline_at_risk", "budget_at_risk")
"""The watchdog's and the forecasts' event kinds (notifications subscribe to them)."""


@dataclass(frozen=True)
class Alert:
    """Raise the event ``kind`` (one of :data:`ALERT_KINDS`) and remember its episode, so that it is
    raised once: ``episode`` is the stall's last step advance or the idleness's start (None: the risks)."""

    kind: str
    message: str
    episode: datetime | None = None
    evidence: Mapping[str, float | int | str] | None = None
    """The numbers behind the message, for notifications' ``evidence``."""


@dataclass(frozen=True)
class ClearAlert:
    """The risk ``kind`` is gone: a later one is a new episode (raised again)."""

    kind: str


@dataclass(frozen=True)
class SetWaiting:
    """Why the job waits (it keeps its ``since`` while ``code`` stays the same)."""

    code: str
    message: str


Action = (
    Transition
    | StartAttempt
    | StopNodes
    | CloseSegment
    | OpenSegment
    | SegmentStartsNow
    | MarkNodesEnded
    | CountPreemption
    | CountRestart
    | RightSize
    | RecordEvent
    | Alert
    | ClearAlert
    | SetWaiting
)
