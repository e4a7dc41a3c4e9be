"""What is worth telling: the engine's events of one tick turned into :class:`Notification` s.

Pure: the hosts (the local and SLURM driver, the Kubernetes operator) call :func:`notifications_for`
with the state before and after a tick and the engine's events, and put what it returns in the outbox.

=========================  =========================================================================
notification event         engine event
=========================  =========================================================================
``preempted``              a transition to PREEMPTED
``on_demand``              a new attempt on on-demand nodes (message: the market policy's reason)
``budget``                 ``budget`` (50/80/100 % of ``goals.budget_usd`` spent: engine.note_budget),
                           ``budget_at_risk`` (the forecast says the budget will be exceeded)
``deadline_at_risk``       ``deadline_at_risk``
``stalled``, ``idle``      ``stalled``, ``idle`` (the watchdog)
``succeeded``, ``failed``  a transition to SUCCEEDED, FAILED
=========================  =========================================================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from orchestrator.spec.market import MarketKind
from orchestrator.spec.model import MarketMode
from orchestrator.spec.notify import NotifyEvent, NotifyTarget
from orchestrator.state.job_state import JobEvent, JobState
from orchestrator.state.status import JobStatus

MAX_MESSAGE_CHARS = 1000
MAX_EVIDENCE_KEYS = 20
MAX_EVIDENCE_TEXT = 200

KIND_EVENTS: dict[str, NotifyEvent] = {
    "budget": NotifyEvent.BUDGET,
    "budget_at_risk": NotifyEvent.BUDGET,
    "deadline_at_risk": NotifyEvent.DEADLINE_AT_RISK,
    "stalled": NotifyEvent.STALLED,
    "idle": NotifyEvent.IDLE,
}
"""Engine event kinds (other than transitions) that notify, and the event a user picks them by."""

STATUS_EVENTS: dict[JobStatus, NotifyEvent] = {
    JobStatus.PREEMPTED: NotifyEvent.PREEMPTED,
    JobStatus.SUCCEEDED: NotifyEvent.SUCCEEDED,
    JobStatus.FAILED: NotifyEvent.FAILED,
}

HEADLINES: dict[NotifyEvent, str] = {
    NotifyEvent.PREEMPTED: "was preempted",
    NotifyEvent.ON_DEMAND: "moved to on-demand",
    NotifyEvent.BUDGET: "budget",
    NotifyEvent.DEADLINE_AT_RISK: "may miss its deadline",
    NotifyEvent.STALLED: "stalled",
    NotifyEvent.IDLE: "has idle GPUs",
    NotifyEvent.SUCCEEDED: "succeeded",
    NotifyEvent.FAILED: "failed",
    NotifyEvent.AVOIDABLE_DIGEST: "avoidable spend",
}


@dataclass(frozen=True)
class JobRef:
    """The job a notification is about."""

    id: str
    team: str
    user: str
    namespace: str | None = None
    """Kubernetes only."""


@dataclass(frozen=True)
class Notification:
    job: str
    team: str
    user: str
    event: NotifyEvent
    kind: str
    """The engine event's kind (``transition``, ``budget``, ``budget_at_risk``, ``stalled``, ...)."""
    message: str
    time: datetime
    evidence: Mapping[str, Any] = field(default_factory=dict)
    namespace: str | None = None

    @property
    def headline(self) -> str:
        if self.event is NotifyEvent.AVOIDABLE_DIGEST:  # about a team, not one job
            return f"gpuctl: team {self.team} avoidable spend"
        return f"gpuctl: job {self.job} {HEADLINES[self.event]}"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "job": self.job, "team": self.team, "user": self.user, "event": str(self.event),
            "kind": self.kind, "message": self.message, "time": self.time.isoformat(),
            "evidence": dict(self.evidence),
        }  # fmt: skip
        if self.namespace is not None:
            data["namespace"] = self.namespace
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Notification:
        return cls(
            job=str(data["job"]), team=str(data["team"]), user=str(data["user"]),
            event=NotifyEvent(data["event"]), kind=str(data["kind"]), message=str(data["message"]),
            time=datetime.fromisoformat(str(data["time"])), evidence=dict(data.get("evidence") or {}),
            namespace=data.get("namespace"),
        )  # fmt: skip


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def bounded_evidence(evidence: Mapping[str, Any] | None) -> dict[str, Any]:
    """Scalars only (numbers, booleans, short text), at most :data:`MAX_EVIDENCE_KEYS` of them: the
    payload stays small whatever an event carries."""
    kept: dict[str, Any] = {}
    for key, value in list((evidence or {}).items())[:MAX_EVIDENCE_KEYS]:
        if isinstance(value, bool | int) or (isinstance(value, float) and value == value):
            kept[clip(str(key), 64)] = value
        elif value is not None:
            kept[clip(str(key), 64)] = clip(value if isinstance(value, str) else json.dumps(value, default=str),
                                            MAX_EVIDENCE_TEXT)  # fmt: skip
    return kept


def transition_text(event: JobEvent) -> str:
    """The reason a transition event gives (the engine writes ``OLD -> NEW: why``)."""
    return event.message.partition(": ")[2] or event.message


def notifications_for(
    job: JobRef,
    market_mode: MarketMode,
    old: JobState,
    new: JobState,
    events: Sequence[JobEvent],
    now: datetime,
) -> list[Notification]:
    """The notifications one tick's ``events`` (and its change ``old`` -> ``new``) make.
    ``market_mode``: the spec's (a job that asked for on-demand only is never "moved" to it)."""
    found: list[Notification] = []

    def add(event: NotifyEvent, kind: str, message: str, evidence: Mapping[str, Any] | None) -> None:
        found.append(Notification(
            job=job.id, team=job.team, user=job.user, event=event, kind=kind,
            message=clip(message, MAX_MESSAGE_CHARS), time=now, evidence=bounded_evidence(evidence),
            namespace=job.namespace,
        ))  # fmt: skip

    for e in events:
        if e.kind == "transition" and e.status in STATUS_EVENTS:
            add(STATUS_EVENTS[e.status], e.kind, transition_text(e), _status_evidence(e.status, new, now))
        elif (
            e.kind == "transition"
            and e.status is JobStatus.LAUNCHING
            and _moved_to_on_demand(market_mode, old, new)
        ):
            add(NotifyEvent.ON_DEMAND, "on_demand", transition_text(e), _placement_evidence(new))
        elif e.kind in KIND_EVENTS:
            add(KIND_EVENTS[e.kind], e.kind, e.message, e.evidence)
    return found


def _moved_to_on_demand(market_mode: MarketMode, old: JobState, new: JobState) -> bool:
    """A new attempt on on-demand nodes of a job that may run on spot (one that asked for on-demand
    only was not moved)."""
    placement = new.placement
    return (
        market_mode is not MarketMode.ON_DEMAND
        and new.attempt > old.attempt
        and placement is not None
        and placement.market is MarketKind.ON_DEMAND
    )


def _placement_evidence(state: JobState) -> dict[str, Any]:
    p = state.placement
    if p is None:
        return {}
    return {
        "attempt": state.attempt, "gpu_type": p.gpu_type, "zone": p.zone, "market": p.market,
        "node_price_usd_per_hour": p.node_price_usd_per_hour,
        "nodes": state.segments[-1].nodes if state.segments else 0,
    }  # fmt: skip


def _status_evidence(status: JobStatus, state: JobState, now: datetime) -> dict[str, Any]:
    evidence: dict[str, Any] = {
        "attempt": state.attempt, "preemptions": state.preemptions, "restarts": state.restarts,
        "cost_usd": round(state.cost_usd(now), 4),
    }  # fmt: skip
    if status is JobStatus.FAILED and state.failure_reason is not None:
        evidence["reason"] = str(state.failure_reason)
    if status is JobStatus.PREEMPTED and state.placement is not None:
        evidence.update(zone=state.placement.zone, gpu_type=state.placement.gpu_type)
    return evidence


def addressed(
    targets: Sequence[NotifyTarget], notes: Sequence[Notification]
) -> list[tuple[NotifyTarget, Notification]]:
    """Each notification paired with every target that picked its event."""
    return [(t, n) for n in notes for t in targets if t.wants(n.event)]
