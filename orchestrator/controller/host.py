"""The one host of the engine: a job's tick, the same for every backend.

A tick loads the job's :class:`JobState`, finishes what a crash interrupted, observes, builds the
:class:`JobView` (here, and nowhere else), reconciles, applies the actions through
:func:`engine.apply` (pure transitions chained within one tick), records what was observed (notices,
progress, the market's zone history, budget shares), persists the new state, then carries out the
effects. Only two things differ between backends, as in Kueue's ``GenericJob``: where the state lives
and how the job is observed and acted on. A backend supplies them as a :class:`JobSide`:

* local and SLURM (:mod:`orchestrator.controller.driver`): rows of the SQL store; processes and
  sbatch jobs through the :class:`~orchestrator.backends.base.Backend`;
* Kubernetes (:mod:`operators.kubernetes.step`, :mod:`operators.kubernetes.reconcile`): the GPUJob's
  ``.status``; pods.

Failures and admission refusals are engine actions too (:func:`fail`, :func:`refuse`): every change of
a job's status is checked against the transitions table.
"""

from __future__ import annotations

import sqlite3
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from sqlalchemy.exc import OperationalError

from orchestrator.backends.base import NodeObservation, NodePhase, Placement, Progress
from orchestrator.controller import actions as act
from orchestrator.controller import engine
from orchestrator.controller.admission import Refused
from orchestrator.controller.market_choice import MarketView, changeover_hours
from orchestrator.controller.reconcile import JobView, reconcile_and_explain
from orchestrator.costs.user_limits import UserStanding
from orchestrator.errors import GpuctlError, InternalError, SpecError
from orchestrator.notify import JobRef, Notification, notifications_for
from orchestrator.policies import GpuMeasurement, ZoneHistory
from orchestrator.spec import JobSpec
from orchestrator.state.job_state import JobEvent, JobState, NodeLaunch, SegmentState, ZoneMemory
from orchestrator.state.progress_state import ProgressState
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.watch import GpuActivity

MAX_PASSES = 4
"""Pure transitions (PENDING -> PLACING -> LAUNCHING) are chained within one tick."""


@dataclass(frozen=True)
class Observation:
    """What a backend saw of a job in one tick: everything reconcile reads that is not its state."""

    nodes: tuple[NodeObservation, ...] = ()
    """The current attempt's nodes not ended."""
    notices: Mapping[str, datetime] = field(default_factory=dict)
    """Node id -> when the market's preemption notice reached it."""
    draining: bool = False
    """Nodes the controller already ended still run (saving their emergency checkpoint)."""
    progress: Progress | None = None
    """The newest training progress seen (None: nothing new); recorded in the state, which the view reads."""
    running_stands_in: bool = False
    """No progress line was ever seen (an image without gpuctl's runtime): all nodes running stands
    in for fresh progress."""
    market: MarketView | None = None
    zone_history: ZoneMemory | None = None
    """The zone history with this tick's look added (None: unchanged)."""
    spot_capacity: int | None = None
    spot: Placement | None = None
    on_demand: Placement | None = None
    measurements: tuple[GpuMeasurement, ...] = ()
    gpu: GpuActivity | None = None
    cancel_requested: bool = False
    user: UserStanding | None = None
    """Where the job's user stands against its limits (None: the user has none)."""


@dataclass(frozen=True)
class Tick:
    """One tick's outcome: the state loaded and the state after it, what the engine did, and why."""

    loaded: JobState
    state: JobState
    view: JobView
    actions: tuple[act.Action, ...] = ()
    effects: tuple[engine.Effect, ...] = ()
    events: tuple[JobEvent, ...] = ()
    notifications: tuple[Notification, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.actions or self.events) or self.state != self.loaded

    @property
    def ended(self) -> bool:
        """The job entered a terminal state in this tick."""
        return any(e.status is not None and e.status.terminal for e in self.events)


class JobSide(Protocol):
    """What one backend supplies for one job: where its state lives, how it is observed and acted on."""

    job_id: str
    spec: JobSpec
    submitted_at: datetime
    ref: JobRef
    max_passes: int
    """Reconcile passes per tick (pure transitions chained up to this many; 1: one per tick)."""

    def load(self) -> JobState:
        """The job's state as stored."""
        ...

    def finish_interrupted(self, state: JobState, now: datetime) -> JobState:
        """Launch recorded intents, stop nodes recorded as ended (both idempotent)."""
        ...

    def observe(self, state: JobState, now: datetime) -> Observation: ...

    def persist(self, tick: Tick, now: datetime) -> None:
        """Store ``tick.state``, its events and notifications, at once (before any effect)."""
        ...

    def carry_out(self, tick: Tick) -> None:
        """The engine's effects, in order, after the state was persisted."""
        ...


def run_tick(side: JobSide, now: datetime) -> Tick:
    """One tick of ``side``'s job: load, finish what was interrupted, observe, decide, persist, act."""
    state = side.finish_interrupted(side.load(), now)
    seen = side.observe(state, now)
    tick = decide(side.spec, state, seen, side.job_id, side.submitted_at, now, side.ref, side.max_passes)
    side.persist(tick, now)
    side.carry_out(tick)
    return tick


def decide(
    spec: JobSpec,
    loaded: JobState,
    seen: Observation,
    job_id: str,
    submitted_at: datetime,
    now: datetime,
    ref: JobRef | None = None,
    max_passes: int = MAX_PASSES,
) -> Tick:
    """Record what was observed, then reconcile and :func:`engine.apply` until the job asks for nothing
    but pure transitions (pure: the caller persists and carries out)."""
    state = engine.record_notices(loaded, dict(seen.notices))
    state = engine.record_progress(state.with_progress(progress_state(seen.progress)), seen.progress)
    if seen.zone_history is not None:
        state = state.model_copy(update={"zone_history": seen.zone_history})
    events: list[JobEvent] = [
        JobEvent("preemption_notice", f"node {n.node_id} got the notice")
        for n, before in zip(state.attempt_nodes, loaded.attempt_nodes, strict=False)
        if n.notice_at is not None and before.notice_at is None
    ]
    state, budget_events = engine.note_budget(state, spec.goals.budget_usd, now)
    events += budget_events
    actions: list[act.Action] = []
    effects: list[engine.Effect] = []
    view = build_view(spec, state, seen, submitted_at, now)
    for _ in range(max_passes):
        planned = reconcile_and_explain(view)
        if not planned:
            break
        alive = [n.node_id for n in view.nodes if not n.phase.ended]
        applied = engine.apply(planned, state, job_id, alive, now)
        state = applied.state
        actions += planned
        effects += applied.effects
        events += applied.events
        if applied.effects or not all(isinstance(a, act.Transition) for a in planned):
            break
        view = build_view(spec, state, seen, submitted_at, now)
    notes = notifications_for(ref, spec.market.mode, loaded, state, events, now) if ref else []
    return Tick(loaded, state, view, tuple(actions), tuple(effects), tuple(events), tuple(notes))


def build_view(
    spec: JobSpec, state: JobState, seen: Observation, submitted_at: datetime, now: datetime
) -> JobView:
    """What reconcile sees: the job's state and this tick's observation (the one place a view is made)."""
    progress, fresh, finished = _progress(state, seen)
    return JobView(
        spec=spec,
        status=state.status,
        now=now,
        submitted_at=submitted_at,
        deadline=state.deadline,
        attempt=state.attempt,
        placement=state.placement,
        nodes=seen.nodes,
        open_segment_nodes=state.open_segment.nodes if state.open_segment else None,
        progress=progress,
        progress_fresh=fresh,
        attempt_finished=finished,
        draining=seen.draining,
        preempted_in_attempt=state.preempted_in_attempt
        or any(n.notice_at is not None for n in state.attempt_nodes),
        spot_capacity=seen.spot_capacity,
        spot=seen.spot,
        on_demand=seen.on_demand,
        market=seen.market,
        measurements=seen.measurements,
        right_size_pick=state.right_size.gpu_type if state.right_size else None,
        cost_usd=state.cost_usd(now),
        restarts=state.restarts,
        preemptions=state.preemptions,
        cancel_requested=seen.cancel_requested,
        segments=state.segments,
        watch=state.watch,
        gpu=seen.gpu if state.status is JobStatus.RUNNING else None,
        waiting=state.waiting,
        user=seen.user,
    )


def _progress(state: JobState, seen: Observation) -> tuple[Progress | None, bool, bool]:
    """The progress reconcile reads; whether it was written after the open segment started (fresh);
    whether training finished during the current attempt."""
    progress = state_progress(state.progress)
    if progress is None:
        alive = [n for n in seen.nodes if not n.phase.ended]
        running = seen.running_stands_in and bool(alive) and all(n.phase is NodePhase.RUNNING for n in alive)
        return (Progress(step=0) if running else None), running, False
    segment = state.open_segment
    attempt_start = min((s.started_at for s in state.segments if s.attempt == state.attempt), default=None)
    fresh = bool(progress.time and segment and progress.time >= segment.started_at)
    finished = bool(progress.finished and progress.time and attempt_start and progress.time >= attempt_start)
    return progress, fresh, finished


def progress_state(progress: Progress | None) -> ProgressState | None:
    """``progress`` as the job's state keeps it."""
    if progress is None:
        return None
    return ProgressState(step=progress.step, total_steps=progress.total_steps, loss=progress.loss,
                         world_size=progress.world_size, finished=progress.finished,
                         metrics=dict(progress.metrics) or None, time=progress.time)  # fmt: skip


def state_progress(kept: ProgressState | None) -> Progress | None:
    """The progress the state keeps, as reconcile reads it."""
    if kept is None:
        return None
    return Progress(step=kept.step, total_steps=kept.total_steps, loss=kept.loss, world_size=kept.world_size,
                    finished=kept.finished, metrics=dict(kept.metrics or {}), time=kept.time)  # fmt: skip


# --- ending a job: the same actions on every backend ---------------------------------------------
def fail(
    state: JobState, job_id: str, reason: FailureReason, message: str, now: datetime, grace_s: float
) -> engine.Applied:
    """End a non-terminal job FAILED with ``reason`` through the engine: its nodes not ended stopped
    (the backend frees what they hold), its open segment closed."""
    alive = (*state.node_ids(NodeLaunch.INTENT), *state.node_ids(NodeLaunch.LAUNCHED))
    actions: list[act.Action] = [act.StopNodes(alive, grace_s, "failed")]
    if state.open_segment is not None:
        actions.append(act.CloseSegment("failed"))
    actions.append(act.Transition(JobStatus.FAILED, message, reason))
    return engine.apply(actions, state, job_id, alive, now)


def refusal_text(refused: Refused) -> str:
    return f"{refused.message} (to fix: {refused.how_to_fix})" if refused.how_to_fix else refused.message


def refuse(state: JobState, job_id: str, refused: Refused, now: datetime) -> engine.Applied:
    """A job admission refused (it never ran): FAILED with the refusal's reason, through the engine."""
    action = act.Transition(JobStatus.FAILED, refusal_text(refused), refused.reason)
    return engine.apply([action], state, job_id, (), now)


DatabaseDown = sqlite3.OperationalError | OperationalError
"""A database that could not be used this time (locked, unreachable): the next tick retries."""


def permanent_failure(exc: BaseException) -> FailureReason | None:
    """The failure reason when ``exc`` is an error in the job itself (its spec, or data gpuctl's code
    cannot handle: a bug); None for a fault around it (the store, the backend, the network), which the
    next tick retries. The rule of every backend: one job's error ends that job, never the others."""
    if isinstance(exc, SpecError):
        return FailureReason.INVALID_SPEC
    if isinstance(exc, InternalError):
        return FailureReason.INTERNAL_ERROR
    if isinstance(exc, GpuctlError | OSError | DatabaseDown | subprocess.SubprocessError):
        return None
    return FailureReason.INTERNAL_ERROR


# --- the market's memory, and the work done so far -----------------------------------------------
def zone_history(memory: ZoneMemory | None) -> ZoneHistory:
    """The availability history the market policy reads, from what the state keeps."""
    if memory is None:
        return ZoneHistory.empty()
    return ZoneHistory(
        observed_h=memory.observed_h,
        any_available_h=memory.any_available_h,
        available_h=dict(memory.available_h),
        up_runs=dict(memory.up_runs),
        streak_h=dict(memory.streak_h),
        last_available=dict(memory.last_available),
        ended_runs=dict(memory.ended_runs),
        ended_run_h=dict(memory.ended_run_h),
        ended_run_h2=dict(memory.ended_run_h2),
    )


TICK_SECONDS = 1.0
"""The local and SLURM controllers' interval between passes (``gpuctl controller run``)."""


def decision_tick_h(memory: ZoneMemory | None, now: datetime, interval_s: float) -> float:
    """The policy's tick (:attr:`MarketView.tick_h`: how late a decision may be carried out, and part
    of its safety margin): the hours since the job's last pass, and never less than the host's
    ``interval_s`` between passes: passes that follow each other at once (a first look, a pass
    retried, a restart) still leave the next decision a whole interval away."""
    since_h = max(0.0, (now - memory.at).total_seconds() / 3600.0) if memory and memory.at else 0.0
    return max(since_h, interval_s / 3600.0)


def watched(
    memory: ZoneMemory | None, available: Mapping[str, bool], now: datetime
) -> tuple[ZoneMemory, float]:
    """``memory`` with ``available`` watched since its last update (now), and the hours since then."""
    memory = memory or ZoneMemory()
    tick_h = max(0.0, (now - memory.at).total_seconds() / 3600.0) if memory.at else 0.0
    history = zone_history(memory).updated(tick_h, available)
    updated = memory.model_copy(
        update={
            "at": now,
            "observed_h": history.observed_h,
            "any_available_h": history.any_available_h,
            "available_h": dict(history.available_h),
            "up_runs": dict(history.up_runs),
            "streak_h": dict(history.streak_h),
            "last_available": dict(history.last_available),
            "ended_runs": dict(history.ended_runs),
            "ended_run_h": dict(history.ended_run_h),
            "ended_run_h2": dict(history.ended_run_h2),
        }
    )
    return updated, tick_h


def run_hours(segments: Sequence[SegmentState], spec: JobSpec, now: datetime) -> float:
    """Hours the job held nodes, less one changeover per attempt: its work done, when nothing better is known."""
    spans: dict[int, tuple[datetime, datetime]] = {}
    for seg in segments:
        end = seg.ended_at or now
        first, last = spans.get(seg.attempt, (seg.started_at, end))
        spans[seg.attempt] = (min(first, seg.started_at), max(last, end))
    change_h = changeover_hours(spec)
    return sum(max(0.0, (last - first).total_seconds() / 3600.0 - change_h) for first, last in spans.values())
