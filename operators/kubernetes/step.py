"""The GPUJob side of the one host (:mod:`orchestrator.controller.host`), pure: no API calls.

The job's :class:`JobState` lives in the GPUJob's ``.status``; its nodes are pods. This module only
translates: ``.status`` + pods -> the host's :class:`~orchestrator.controller.host.Observation`
(:func:`observe_pods`, with the spot shortage Kubernetes learns by trying a zone), and the tick's new
state and events -> a new ``.status`` (the state plus display fields and conditions: :func:`status_of`).
:func:`step` is one tick on a given status and pods; :mod:`operators.kubernetes.reconcile` runs the
same tick against the API server and carries out its effects after the status is written.

Nodes and pods: which pod is which node, and what a pod says of its node, is
:mod:`orchestrator.backends.kubernetes.pods`.

Status keys: those of :meth:`JobState.to_status` (``state``, ``attempt``, ``placement``,
``attemptNodes``, ``segments``, ``progress``, ``gpuMeasurements``, ...) and display fields:
``conditions``, ``nodes`` (the attempt's nodes not ended: printer column), ``desiredNodes``,
``costUsd``, ``gpuType``, ``market``, ``zone``, ``nodePriceUsdPerHour``; ``user`` and ``gpuUsage*``
are added by the reconcile, which also advances ``progress`` with the monitors' new records before
:func:`step` reads it (the host then records it in the state).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from operators.kubernetes.spot_market import (
    TIMER_S,
    as_candidates,
    policy_moves,
    reclaimed_zone,
    remember,
    scheduled_zone,
    short_zone,
    with_capacity,
)
from orchestrator.backends.base import NodeObservation, NodePhase, Placement, Progress
from orchestrator.backends.kubernetes.gpu_usage import gpu_activity
from orchestrator.backends.kubernetes.pods import being_deleted, leftover_pods, observe_nodes, pods_of
from orchestrator.backends.kubernetes.progress import progress_of
from orchestrator.backends.kubernetes.status_model import DISPLAY_KEYS, ForecastStatus, GpuJobStatus
from orchestrator.catalog.offers import MarketKind
from orchestrator.controller import engine, host
from orchestrator.controller.admission import Refused
from orchestrator.controller.market_choice import JobClock, MarketView
from orchestrator.controller.placement import Candidates
from orchestrator.notify import JobRef, Notification, notifications_for
from orchestrator.policies import GpuMeasurement
from orchestrator.spec import Checkpoint, JobSpec, MarketMode, parse_deadline
from orchestrator.state.forecast import forecast
from orchestrator.state.job_state import STATUS_KEYS, JobEvent, JobState, NodeLaunch, NodeState
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.times import iso_z as iso

LEGACY_KEYS = ("pods", "endedNodes")
"""Status keys of operators before the engine: read once by :func:`load_state`, then removed."""

_CONDITIONS: dict[JobStatus, tuple[str, bool]] = {
    JobStatus.LAUNCHING: ("Placed", True),
    JobStatus.RUNNING: ("Running", True),
    JobStatus.PREEMPTED: ("Preempted", True),
    JobStatus.RESCALING: ("Rescaled", True),
    JobStatus.SUCCEEDED: ("Succeeded", True),
    JobStatus.FAILED: ("Failed", True),
    JobStatus.CANCELLED: ("Cancelled", True),
}


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any]
    """The GPUJob's whole new ``.status``."""
    state: JobState | None = None
    effects: tuple[engine.Effect, ...] = ()
    """What to do after ``status`` is written (pods to create and delete)."""
    events: tuple[str, ...] = ()
    """One Kubernetes Event each."""
    notifications: tuple[Notification, ...] = ()
    """What the engine's events tell people (:mod:`operators.kubernetes.notify` sends them once the
    status is written)."""

    @property
    def launch(self) -> tuple[str, ...]:
        return tuple(n for e in self.effects if isinstance(e, engine.LaunchNodes) for n in e.node_ids)

    @property
    def stop(self) -> tuple[str, ...]:
        stopping = (engine.StopNodes, engine.ReleaseNodes)
        return tuple(dict.fromkeys(n for e in self.effects if isinstance(e, stopping) for n in e.node_ids))


def set_condition(
    status: dict[str, Any], kind: str, value: bool, reason: str, message: str, now: datetime
) -> None:
    old = next((c for c in status.get("conditions", []) if c.get("type") == kind), None)
    flag = "True" if value else "False"
    when = old["lastTransitionTime"] if old and old.get("status") == flag else iso(now)
    others = [c for c in status.get("conditions", []) if c.get("type") != kind]
    status["conditions"] = [
        *others,
        {
            "type": kind,
            "status": flag,
            "reason": reason,
            "message": message[:1000],
            "lastTransitionTime": when,
        },
    ]


def load_state(
    status: Mapping[str, Any], job: str, spec: JobSpec | None = None, created_at: datetime | None = None
) -> JobState:
    """The job's state in its ``.status``; a status of an operator before the engine (``pods`` and
    ``endedNodes`` pod names) gives the current attempt's nodes: launched, or ended. With ``spec``
    and ``created_at``, a deadline not resolved yet is resolved (once: it is stored with the state)."""
    state = JobState.from_status(status)
    if state.deadline is None and spec is not None and spec.goals.deadline and created_at is not None:
        state = state.model_copy(update={"deadline": parse_deadline(spec.goals.deadline, created_at)})
    if "attemptNodes" not in status and status.get("pods"):
        ended = set(status.get("endedNodes") or ())
        nodes = tuple(
            NodeState(
                node_id=engine.node_id(job, state.attempt, index),
                launch=NodeLaunch.ENDED if name in ended else NodeLaunch.LAUNCHED,
            )
            for index, name in enumerate(status["pods"])
        )
        state = state.model_copy(update={"attempt_nodes": nodes})
    return state


def with_state(status: Mapping[str, Any], state: JobState) -> dict[str, Any]:
    """``status`` with its job state replaced by ``state`` (display fields kept, legacy keys dropped)."""
    kept = {k: v for k, v in status.items() if k not in STATUS_KEYS and k not in LEGACY_KEYS}
    return {**kept, **state.to_status()}


# --- what reconcile sees -------------------------------------------------------------------------
def observe_pods(
    spec: JobSpec,
    state: JobState,
    status: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    existing_nodes: set[str] | None,
    found: Candidates,
    created_at: datetime,
    now: datetime,
    regrow_after_s: float,
    shortage_after_s: float,
    measurements: tuple[GpuMeasurement, ...] = (),
    interval_s: float = TIMER_S,
) -> host.Observation:
    """What the pods and the status say of the job now. Kubernetes learns a zone's spot by trying it:
    a spot attempt whose pods all stayed unschedulable longer than ``shortage_after_s`` marks its zone
    short of spot for ``regrow_after_s``, and its pods are observed PREEMPTED when the market policy
    would place the job elsewhere (:mod:`operators.kubernetes.spot_market`). After losing nodes, no
    more spot is assumed in the zone for ``regrow_after_s``, then growing is tried again. No progress
    line ever seen (``status.progress``): all pods running stands in."""
    active = [n.node_id for n in state.attempt_nodes if n.launch is not NodeLaunch.ENDED]
    by_node = pods_of(state.attempt, active, pods)
    short = short_zone(state, by_node, active, now, shortage_after_s)
    scheduled = scheduled_zone(state, by_node, active)
    reclaimed = reclaimed_zone(state, by_node, active, existing_nodes)
    market, memory = remember(
        state.zone_history, spec, found, state, short, scheduled, now, regrow_after_s, reclaimed, interval_s
    )
    # a zone's spot is seen only by trying it: a failed try costs the shortage timeout (the policy's slack)
    market = dataclasses.replace(market, try_cost_h=shortage_after_s / 3600.0)
    progress = progress_of(status)
    nodes = observe_nodes(state, pods, existing_nodes)
    if short is not None:  # leave the zone when the policy would place the job elsewhere, else wait
        stand_in = progress or _running_stand_in(nodes)
        clock = JobClock(now, created_at, state.deadline, stand_in, state.watch)
        if policy_moves(spec, _with_spot_capacity(state, nodes, market, now, regrow_after_s)[0], clock):
            nodes = observe_nodes(state, pods, existing_nodes, shortage=True)
    market, spot_capacity = _with_spot_capacity(state, nodes, market, now, regrow_after_s)
    return host.Observation(
        nodes=nodes,
        notices={n.node_id: n.notice_at for n in nodes if n.notice_at},
        # Pods of an older attempt or of ended nodes, still there or terminating, save their checkpoint.
        draining=any(being_deleted(p) for p in pods) or bool(leftover_pods(state, pods)),
        progress=progress,
        running_stands_in=True,
        market=market,
        zone_history=memory,
        spot_capacity=spot_capacity,
        spot=found.cheapest_spot,
        on_demand=found.on_demand,
        measurements=measurements,
        gpu=gpu_activity(status),
    )


def _running_stand_in(nodes: Sequence[NodeObservation]) -> Progress | None:
    alive = [n for n in nodes if not n.phase.ended]
    return Progress(step=0) if alive and all(n.phase is NodePhase.RUNNING for n in alive) else None


def _with_spot_capacity(
    state: JobState,
    nodes: Sequence[NodeObservation],
    market: MarketView,
    now: datetime,
    regrow_after_s: float,
) -> tuple[MarketView, int | None]:
    """The market with the attempt's spot zone limited to the nodes it kept, while it recently lost
    some (Kubernetes does not say how much spot capacity exists); and that zone's capacity."""
    recently = state.rescaled_at is not None and (now - state.rescaled_at).total_seconds() < regrow_after_s
    capacity = sum(1 for n in nodes if not n.phase.ended) if recently else None
    placement = state.placement
    if placement is None or placement.market != MarketKind.SPOT:
        return market, capacity
    market = with_capacity(market, placement.zone, capacity)
    return market, next((z.capacity for z in market.zones if z.zone == placement.zone), capacity)


class StatusJob:
    """One GPUJob, pure: its state in ``status``, its nodes the ``pods`` given; the written status is
    computed, nothing is called (the host's :class:`~orchestrator.controller.host.JobSide`;
    :class:`operators.kubernetes.reconcile.ApiJob` adds the API calls)."""

    max_passes = host.MAX_PASSES

    def __init__(
        self,
        spec: JobSpec,
        status: Mapping[str, Any],
        pods: Sequence[Mapping[str, Any]],
        existing_nodes: set[str] | None,
        candidates: Candidates | tuple[Placement | None, Placement | None],
        job: str,
        created_at: datetime,
        regrow_after_s: float = 600.0,
        shortage_after_s: float = 600.0,
        measurements: tuple[GpuMeasurement, ...] = (),
        cancel_requested: bool = False,
        interval_s: float = TIMER_S,
    ) -> None:
        self.interval_s = interval_s
        """The operator's timer interval: the market policy's tick is never shorter."""
        self.spec, self.status, self.pods, self.existing_nodes = spec, dict(status), pods, existing_nodes
        self.cancel_requested = cancel_requested
        """The GPUJob's ``spec.cancel``: the engine cancels the job (as ``gpuctl cancel`` locally)."""
        self.found = as_candidates(candidates)
        self.job_id, self.submitted_at = job, created_at
        self.ref = JobRef(job, spec.team, spec.user)
        self.regrow_after_s, self.shortage_after_s = regrow_after_s, shortage_after_s
        self.measurements = measurements
        self.written: dict[str, Any] = dict(status)
        """The status after the tick (:meth:`persist`)."""

    def load(self) -> JobState:
        return load_state(self.status, self.job_id, self.spec, self.submitted_at)

    def finish_interrupted(self, state: JobState, now: datetime) -> JobState:
        return state

    def observe(self, state: JobState, now: datetime) -> host.Observation:
        seen = observe_pods(
            self.spec, state, self.status, self.pods, self.existing_nodes, self.found, self.submitted_at,
            now, self.regrow_after_s, self.shortage_after_s, self.measurements, self.interval_s,
        )  # fmt: skip
        return dataclasses.replace(seen, cancel_requested=self.cancel_requested)

    def persist(self, tick: host.Tick, now: datetime) -> None:
        self.written = status_of(self.status, tick.state, tick.events, now, self.spec.goals.budget_usd)

    def carry_out(self, tick: host.Tick) -> None:
        pass


def decision(tick: host.Tick, status: dict[str, Any]) -> Decision:
    """A tick as the operator's :class:`Decision` (``status``: the status written)."""
    return Decision(
        status, tick.state, tick.effects, event_messages(tick.events, tick.state), tick.notifications
    )


def step(
    spec: JobSpec,
    status: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    existing_nodes: set[str] | None,
    candidates: Candidates | tuple[Placement | None, Placement | None],
    job: str,
    created_at: datetime,
    now: datetime,
    regrow_after_s: float = 600.0,
    shortage_after_s: float = 600.0,
    measurements: tuple[GpuMeasurement, ...] = (),
    cancel_requested: bool = False,
) -> Decision:
    """The one host's tick (:func:`host.run_tick`) of a GPUJob on the status and pods given, pure.

    ``candidates``: the spot placement of each allowed zone and the on-demand one (a pair: one zone);
    see :func:`observe_pods` for ``regrow_after_s`` and ``shortage_after_s``. ``measurements``: for
    right-size (:mod:`operators.kubernetes.rightsize`). ``cancel_requested``: the GPUJob's
    ``spec.cancel`` (the engine's cancel: nodes stopped after the notice, segment closed, CANCELLED)."""
    side = StatusJob(
        spec, status, pods, existing_nodes, candidates, job, created_at, regrow_after_s, shortage_after_s,
        measurements, cancel_requested,
    )  # fmt: skip
    tick = host.run_tick(side, now)
    return decision(tick, side.written)


def status_of(
    old: Mapping[str, Any],
    state: JobState,
    events: Sequence[JobEvent],
    now: datetime,
    budget_usd: float | None = None,
) -> dict[str, Any]:
    """The GPUJob's ``.status`` for ``state``: the state, its display fields (``forecast`` of a running
    job), the conditions the transitions in ``events`` set (the one place they are set: a ``Failed``
    condition's reason is the failure reason in CamelCase), and ``Waiting`` (why it waits)."""
    status = with_state(old, state)
    status["conditions"] = [dict(c) for c in old.get("conditions", [])]
    for event in events:
        if event.status is None:
            continue
        text = _transition_text(event)
        kind = _CONDITIONS.get(event.status)
        if kind is not None:
            set_condition(status, kind[0], kind[1], _condition_reason(kind[0], event, state), text, now)
        if event.status is not JobStatus.RUNNING:
            set_condition(status, "Running", False, kind[0] if kind else str(event.status), text, now)
    _waiting_condition(status, state, now)
    if not status["conditions"]:
        del status["conditions"]
    found = forecast(state, now, state.deadline, budget_usd) if state.status is JobStatus.RUNNING else None
    shown: dict[str, Any] = {
        "forecast": ForecastStatus.of(found) if found is not None else None,
        "nodes": len(state.node_ids()) - len(state.node_ids(NodeLaunch.ENDED)),
        "cost_usd": round(state.cost_usd(now), 6),
    }
    placement = state.placement
    if placement is not None:
        shown.update(gpu_type=placement.gpu_type, market=str(placement.market), zone=placement.zone,
                     node_price_usd_per_hour=placement.node_price_usd_per_hour)  # fmt: skip
    if state.segments:
        shown["desired_nodes"] = state.segments[-1].nodes
    display = GpuJobStatus.read(status).display.model_copy(update=shown)  # typed: one model of the status
    kept = {k: v for k, v in status.items() if k not in DISPLAY_KEYS}
    return {**kept, **GpuJobStatus(state, display).to_status()}


def _condition_reason(kind: str, event: JobEvent, state: JobState) -> str:
    """A condition's reason: its type, or for entering FAILED the failure reason (``OverBudget``)."""
    if event.status is JobStatus.FAILED and state.failure_reason is not None:
        return "".join(word.capitalize() for word in str(state.failure_reason).split("_"))
    return kind


def _waiting_condition(status: dict[str, Any], state: JobState, now: datetime) -> None:
    """``Waiting=True`` with why (reason: the wait's code in CamelCase) while the job waits; False after."""
    waiting = state.waiting if not state.status.terminal and state.status is not JobStatus.RUNNING else None
    if waiting is not None:
        reason = "".join(part.capitalize() for part in waiting.code.split("_"))
        set_condition(status, "Waiting", True, reason, waiting.message, now)
    elif any(c.get("type") == "Waiting" for c in status["conditions"]):
        set_condition(status, "Waiting", False, str(state.status).capitalize(), state.message, now)


def _transition_text(event: JobEvent) -> str:
    """The reason a transition event gives (the engine writes ``OLD -> NEW: why``)."""
    return event.message.partition(": ")[2] or event.message


def event_messages(events: Sequence[JobEvent], state: JobState | None = None) -> tuple[str, ...]:
    """One Kubernetes Event message each; it starts with what the Event's reason is made of (entering
    FAILED: ``FAILED (reason): why``, the reason from ``state``)."""
    reason = state.failure_reason if state is not None else None
    return tuple(
        (f"{e.status} ({reason}): " if e.status is JobStatus.FAILED and reason else f"{e.status}: ")
        + _transition_text(e)
        if e.status is not None
        else f"{e.kind}: {e.message}"
        for e in events
    )


_DEFAULT_GRACE_S = Checkpoint().notice_grace_seconds


def fail(status: Mapping[str, Any], job: str, reason: FailureReason, message: str, now: datetime) -> Decision:
    """End the job FAILED with ``reason`` through the engine (:func:`host.fail`, as on every backend):
    its nodes stopped (their pods to delete), its open segment closed; the status writer sets the
    ``Failed`` condition."""
    state = load_state(status, job)
    return _ended(status, job, state, host.fail(state, job, reason, message, now, _DEFAULT_GRACE_S), now)


def refuse(status: Mapping[str, Any], job: str, refused: Refused, now: datetime) -> Decision:
    """A GPUJob admission refused: FAILED with the refusal's reason through the engine (:func:`host.refuse`)."""
    state = load_state(status, job)
    return _ended(status, job, state, host.refuse(state, job, refused, now), now)


def _ended(
    status: Mapping[str, Any], job: str, state: JobState, applied: engine.Applied, now: datetime
) -> Decision:
    team, user = str(status.get("team") or "default"), str(status.get("user") or "")
    notes = notifications_for(JobRef(job, team, user), MarketMode.SPOT_WITH_FALLBACK, state, applied.state,
                              applied.events, now)  # fmt: skip
    return Decision(
        status_of(status, applied.state, applied.events, now),
        applied.state,
        applied.effects,
        event_messages(applied.events, applied.state),
        tuple(notes),
    )
