"""The one engine: reconcile's actions applied to a job's typed state, for every backend.

``apply(actions, state, ...) -> Applied(state, effects, events)`` is pure. The caller persists the new
state (one SQLite transaction locally and on SLURM, one status patch on Kubernetes) *before* carrying
out the effects, so a crash between the two leaves a state from which the next tick finishes the work:
nodes recorded as intents are launched (launch is idempotent), nodes recorded as ended are stopped.

Effects are what a backend does; each backend maps them to its own world (processes, sbatch jobs,
pods). Every action type is handled here, checked by ``assert_never``: a new action that the engine
does not know fails type checking and the exhaustiveness test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import assert_never

from orchestrator.backends.base import Placement, Progress
from orchestrator.controller import actions as act
from orchestrator.state.job_state import (
    JobEvent as Event,
)
from orchestrator.state.job_state import (
    JobState,
    NodeLaunch,
    NodeState,
    RightSizePick,
    SegmentState,
)
from orchestrator.state.job_state import node_id as node_id
from orchestrator.state.job_state import node_index as node_index
from orchestrator.state.status import JobStatus, check_transition
from orchestrator.state.watch import WaitReason, record_step


@dataclass(frozen=True)
class LaunchNodes:
    """Start these nodes of the attempt (idempotent: a node already running is not started twice)."""

    attempt: int
    node_ids: tuple[str, ...]


@dataclass(frozen=True)
class StopNodes:
    """Notice now, kill after ``grace_s`` (idempotent)."""

    attempt: int
    node_ids: tuple[str, ...]
    grace_s: float


@dataclass(frozen=True)
class ReleaseNodes:
    """The controller is done with these nodes (they ended, or were stopped): free what they hold once
    they have exited (Kubernetes deletes their pods; processes need nothing)."""

    attempt: int
    node_ids: tuple[str, ...]


Effect = LaunchNodes | StopNodes | ReleaseNodes


@dataclass(frozen=True)
class Applied:
    state: JobState
    effects: tuple[Effect, ...] = ()
    events: tuple[Event, ...] = ()

    @property
    def ended(self) -> bool:
        """The job entered a terminal state in this application."""
        return any(e.status is not None and e.status.terminal for e in self.events)


@dataclass
class _Changes:
    state: JobState
    effects: list[Effect] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


def apply(
    actions: Sequence[act.Action], state: JobState, job_id: str, alive: Sequence[str], now: datetime
) -> Applied:
    """Apply ``actions`` in order. ``alive``: the attempt's nodes observed not to have ended (what a
    ``StopNodes`` without node ids stops)."""
    c = _Changes(state)
    for action in actions:
        _apply_one(c, action, job_id, alive, now)
    return Applied(c.state, tuple(c.effects), tuple(c.events))


def _apply_one(c: _Changes, action: act.Action, job_id: str, alive: Sequence[str], now: datetime) -> None:
    s = c.state
    if isinstance(action, act.Transition):
        check_transition(s.status, action.target)  # an illegal one is a gpuctl bug: raises InternalError
        c.events.append(
            Event("transition", f"{s.status} -> {action.target}: {action.message}", action.target)
        )
        waiting = None
        if action.target is not JobStatus.RUNNING and not action.target.terminal:
            waiting = WaitReason(code=str(action.target).lower(), message=action.message, since=now)
        c.state = s.model_copy(
            update={
                "status": action.target,
                "message": action.message,
                "failure_reason": action.reason,
                "waiting": waiting,
            }
        )
    elif isinstance(action, act.StartAttempt):
        attempt = s.attempt + 1
        placement = action.placement
        ids = tuple(node_id(job_id, attempt, i) for i in range(action.nodes))
        c.state = s.model_copy(
            update={
                "attempt": attempt,
                "placement": placement,
                "attempt_nodes": tuple(NodeState(node_id=n) for n in ids),
                "segments": (
                    *s.segments,
                    SegmentState(attempt=attempt, placement=placement, nodes=action.nodes, started_at=now),
                ),
                "preempted_in_attempt": False,
                "rescaled_at": None,
            }
        )
        c.events.append(Event("attempt", f"attempt {attempt} on {placement.market} {placement.zone}"))
        c.events.append(_segment_opened(placement, action.nodes))
        c.effects.append(LaunchNodes(attempt, ids))
    elif isinstance(action, act.StopNodes):
        ids = action.node_ids or tuple(alive)
        c.state = _set_launch(s, ids, NodeLaunch.ENDED)
        if ids:
            c.effects.append(StopNodes(s.attempt, ids, action.grace_s))
    elif isinstance(action, act.MarkNodesEnded):
        c.state = _set_launch(s, action.node_ids, NodeLaunch.ENDED)
        if action.node_ids:
            c.effects.append(ReleaseNodes(s.attempt, action.node_ids))
    elif isinstance(action, act.OpenSegment):
        assert s.placement is not None, "a segment needs a placement"
        segment = SegmentState(attempt=s.attempt, placement=s.placement, nodes=action.nodes, started_at=now)
        c.state = s.model_copy(update={"segments": (*s.segments, segment), "rescaled_at": now})
        c.events.append(_segment_opened(s.placement, action.nodes))
    elif isinstance(action, act.SegmentStartsNow):
        c.state = _replace_open_segment(s, started_at=now)
    elif isinstance(action, act.CloseSegment):
        c.state = _replace_open_segment(s, ended_at=now, end_reason=action.reason)
    elif isinstance(action, act.CountPreemption):
        c.state = s.model_copy(update={"preemptions": s.preemptions + 1, "preempted_in_attempt": True})
    elif isinstance(action, act.CountRestart):
        c.state = s.model_copy(update={"restarts": s.restarts + 1})
    elif isinstance(action, act.RightSize):
        pick = RightSizePick(gpu_type=action.gpu_type, apply=action.apply)
        c.state = s.model_copy(update={"right_size": pick})
        c.events.append(Event("right_size", action.why))
    elif isinstance(action, act.RecordEvent):
        c.events.append(Event(action.kind, action.message))
    elif isinstance(action, act.Alert):
        c.events.append(Event(action.kind, action.message, evidence=action.evidence))
        c.state = s.model_copy(
            update={"watch": s.watch.model_copy(update=_episode(action.kind, action.episode, True))}
        )
    elif isinstance(action, act.ClearAlert):
        c.state = s.model_copy(
            update={"watch": s.watch.model_copy(update=_episode(action.kind, None, False))}
        )
    elif isinstance(action, act.SetWaiting):
        same = s.waiting is not None and s.waiting.code == action.code
        since = s.waiting.since if s.waiting is not None and same else now
        c.state = s.model_copy(
            update={"waiting": WaitReason(code=action.code, message=action.message, since=since)}
        )
    else:
        assert_never(action)


BUDGET_ALERT_PCT = (50, 80, 100)
"""Shares of ``goals.budget_usd`` announced by a ``budget`` event, each once per job."""


def note_budget(
    state: JobState, budget_usd: float | None, now: datetime
) -> tuple[JobState, tuple[Event, ...]]:
    """A ``budget`` event for each share of the budget spent since the last call (the highest one when
    several were passed at once), remembered in the state so that a restarted host never repeats it."""
    if budget_usd is None or budget_usd <= 0 or state.status.terminal:
        return state, ()
    spent = state.cost_usd(now)
    reached = [
        p for p in BUDGET_ALERT_PCT if spent >= budget_usd * p / 100.0 and p not in state.budget_alerts
    ]
    if not reached:
        return state, ()
    pct = reached[-1]
    evidence = {"percent": pct, "spent_usd": round(spent, 4), "budget_usd": budget_usd}
    event = Event(
        "budget", f"spent {spent:.2f} of the {budget_usd:.2f} USD budget ({pct}% reached)", evidence=evidence
    )
    alerts = tuple(sorted({*state.budget_alerts, *reached}))
    return state.model_copy(update={"budget_alerts": alerts}), (event,)


def _episode(kind: str, episode: datetime | None, raised: bool) -> dict[str, object]:
    """The :class:`~orchestrator.state.watch.WatchState` field that remembers an alert of ``kind``
    (``raised``: set by an alert, cleared by a ``ClearAlert``)."""
    if kind == "stalled":
        return {"stalled_for": episode}
    if kind == "idle":
        return {"idle_for": episode}
    if kind in ("deadline_at_risk", "budget_at_risk"):
        return {kind: raised}
    raise ValueError(f"unknown alert kind {kind!r}")


def record_progress(state: JobState, progress: Progress | None) -> JobState:
    """The observed training progress, kept as a step sample of the open segment when the step advanced
    (the stall watchdog and the forecasts read them)."""
    segment = state.open_segment
    if progress is None or segment is None or progress.finished:
        return state
    watch = record_step(state.watch, progress.step, progress.total_steps, progress.time, segment.started_at)
    return state if watch is state.watch else state.model_copy(update={"watch": watch})


def record_notices(state: JobState, notices: dict[str, datetime]) -> JobState:
    """The observed preemption notices (node id -> when), kept in the state of the attempt's nodes."""
    if not any(n.node_id in notices and n.notice_at is None for n in state.attempt_nodes):
        return state
    nodes = tuple(
        n.model_copy(update={"notice_at": notices[n.node_id]})
        if n.node_id in notices and n.notice_at is None
        else n
        for n in state.attempt_nodes
    )
    return state.model_copy(update={"attempt_nodes": nodes})


def mark_launched(state: JobState, node_ids: Sequence[str]) -> JobState:
    """Intents handed to the backend (never revives an ended node)."""
    wanted = set(node_ids)
    nodes = tuple(
        n.model_copy(update={"launch": NodeLaunch.LAUNCHED})
        if n.node_id in wanted and n.launch is NodeLaunch.INTENT
        else n
        for n in state.attempt_nodes
    )
    return state.model_copy(update={"attempt_nodes": nodes})


def _set_launch(state: JobState, node_ids: Sequence[str], launch: NodeLaunch) -> JobState:
    wanted = set(node_ids)
    nodes = tuple(
        n.model_copy(update={"launch": launch}) if n.node_id in wanted else n for n in state.attempt_nodes
    )
    return state.model_copy(update={"attempt_nodes": nodes})


def _replace_open_segment(state: JobState, **update: object) -> JobState:
    if state.open_segment is None:
        return state
    segments = (*state.segments[:-1], state.segments[-1].model_copy(update=update))
    return state.model_copy(update={"segments": segments})


def _segment_opened(placement: Placement, nodes: int) -> Event:
    return Event("segment", f"segment opened: {nodes} node(s) {placement.market} {placement.zone}")
