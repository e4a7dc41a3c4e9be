"""The operator's decision: the one controller engine, fed from a GPUJob's status and pods (no API calls).

The policy is :func:`orchestrator.controller.reconcile.reconcile` and the application of its actions is
:func:`orchestrator.controller.engine.apply`: the same pure functions the local and SLURM controllers
run. This module only translates: GPUJob ``.status`` (a :class:`JobState`) + pods -> ``JobView``, and the
engine's new state and events -> a new ``.status`` (the state plus display fields and conditions). The
engine's effects are carried out by :mod:`operators.kubernetes.reconcile`, after the status is written.

Nodes and pods: the engine's node ``{job}-a{attempt}-n{index}`` is the pod of the job labelled with
that attempt (``gpuctl.dev/attempt``) and index (``gpuctl.dev/node-index``), named
:func:`~orchestrator.backends.kubernetes.manifests.pod_name` ``(job, index)``.

Status keys: those of :meth:`JobState.to_status` (``state``, ``attempt``, ``placement``,
``attemptNodes``, ``segments``, ...) and display fields: ``conditions``, ``nodes`` (the attempt's
nodes not ended: printer column), ``desiredNodes``, ``costUsd``, ``gpuType``, ``market``, ``zone``,
``nodePriceUsdPerHour``; ``user``, ``progress`` (read by :func:`step`) and ``gpuUsage*`` are added by
the reconcile.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from operators.kubernetes.gpu_usage import gpu_activity
from operators.kubernetes.progress import progress_of
from operators.kubernetes.spot_market import (
    ZONE_HISTORY_KEY,
    MarketMemory,
    as_candidates,
    policy_moves,
    reclaimed_zone,
    remember,
    scheduled_zone,
    short_zone,
    with_capacity,
)
from orchestrator.backends.base import NodeObservation, NodePhase, Placement, Progress
from orchestrator.backends.kubernetes.manifests import LABEL_ATTEMPT, LABEL_NODE_INDEX
from orchestrator.backends.kubernetes.observe import pod_phase
from orchestrator.catalog.offers import MarketKind
from orchestrator.controller import actions as act
from orchestrator.controller import engine
from orchestrator.controller.market_choice import JobClock, MarketView
from orchestrator.controller.placement import Candidates
from orchestrator.controller.reconcile import JobView, reconcile_and_explain
from orchestrator.notify import JobRef, Notification, notifications_for
from orchestrator.policies import GpuMeasurement
from orchestrator.spec import JobSpec, MarketMode, parse_deadline
from orchestrator.state.forecast import Forecast, forecast
from orchestrator.state.job_state import STATUS_KEYS, JobEvent, JobState, NodeLaunch, NodeState
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.watch import GpuActivity

MAX_PASSES = 4
"""Pure transitions (PENDING -> PLACING -> LAUNCHING) are chained within one operator pass."""

LEGACY_KEYS = ("pods", "endedNodes")
"""Status keys of operators before the engine: read once by :func:`load_state`, then removed."""

_CONDITIONS: dict[JobStatus, tuple[str, bool]] = {
    JobStatus.LAUNCHING: ("Placed", True),
    JobStatus.RUNNING: ("Running", True),
    JobStatus.PREEMPTED: ("Preempted", True),
    JobStatus.RESCALING: ("Rescaled", True),
    JobStatus.SUCCEEDED: ("Succeeded", True),
    JobStatus.FAILED: ("Failed", True),
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


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


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


# --- pods <-> nodes ------------------------------------------------------------------------------
def pod_attempt(pod: Mapping[str, Any]) -> int:
    return int((pod.get("metadata", {}).get("labels") or {}).get(LABEL_ATTEMPT, "0"))


def pod_index(pod: Mapping[str, Any]) -> int | None:
    text = (pod.get("metadata", {}).get("labels") or {}).get(LABEL_NODE_INDEX)
    return int(text) if text is not None and str(text).isdigit() else None


def being_deleted(pod: Mapping[str, Any]) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def pods_of(
    attempt: int, node_ids: Sequence[str], pods: Sequence[Mapping[str, Any]]
) -> dict[str, Mapping[str, Any]]:
    """Node id -> its pod, for the nodes of ``attempt`` that have one."""
    by_index = {pod_index(p): p for p in pods if pod_attempt(p) == attempt}
    found = {n: by_index.get(engine.node_index(n)) for n in node_ids}
    return {n: p for n, p in found.items() if p is not None}


def leftover_pods(state: JobState, pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The job's pods the controller is done with: of an older attempt, of a node recorded as ended,
    or of no node of the state (whether or not they are being deleted already)."""
    live = pods_of(
        state.attempt, [n.node_id for n in state.attempt_nodes if n.launch is not NodeLaunch.ENDED], pods
    )
    kept = {id(p) for p in live.values()}
    return [p for p in pods if id(p) not in kept]


def load_state(status: Mapping[str, Any], job: str) -> JobState:
    """The job's state in its ``.status``; a status of an operator before the engine (``pods`` and
    ``endedNodes`` pod names) gives the current attempt's nodes: launched, or ended."""
    state = JobState.from_status(status)
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
def observe(
    state: JobState,
    pods: Sequence[Mapping[str, Any]],
    existing_nodes: set[str] | None,
    shortage: bool = False,
) -> tuple[NodeObservation, ...]:
    """The current attempt's nodes not ended: a pod's phase; a launched node without a pod is LOST,
    an intent without one STARTING (it is about to be created). ``shortage``: the attempt leaves a
    zone short of spot, its unscheduled pods are PREEMPTED while queued (they never held a node)."""
    active = [n for n in state.attempt_nodes if n.launch is not NodeLaunch.ENDED]
    found = pods_of(state.attempt, [n.node_id for n in active], pods)
    seen = []
    for node in active:
        pod = found.get(node.node_id)
        if pod is not None and shortage:
            seen.append(NodeObservation(node.node_id, NodePhase.PREEMPTED, queued=True))
        elif pod is not None:
            seen.append(dataclasses.replace(pod_phase(pod, existing_nodes), node_id=node.node_id))
        elif node.launch is NodeLaunch.LAUNCHED:
            seen.append(NodeObservation(node.node_id, NodePhase.LOST))
        else:
            seen.append(NodeObservation(node.node_id, NodePhase.STARTING))
    return tuple(seen)


def build_view(
    spec: JobSpec,
    state: JobState,
    pods: Sequence[Mapping[str, Any]],
    existing_nodes: set[str] | None,
    candidates: tuple[Placement | None, Placement | None],
    created_at: datetime,
    now: datetime,
    regrow_after_s: float,
    market: MarketView | None = None,
    shortage: bool = False,
    progress: Progress | None = None,
    gpu: GpuActivity | None = None,
    measurements: tuple[GpuMeasurement, ...] = (),
) -> JobView:
    """What reconcile sees. ``market``: every allowed zone (:mod:`operators.kubernetes.spot_market`),
    else one zone made of ``candidates``; ``shortage``: see :func:`observe`. ``progress``: the newest
    training progress (``status.progress``); None when no progress line was ever seen (an image
    without gpuctl's runtime): all pods running stands in. ``measurements``: what runs of the job measured
    per GPU type (:mod:`operators.kubernetes.rightsize`), for right-size."""
    nodes = observe(state, pods, existing_nodes, shortage)
    alive = [n for n in nodes if not n.phase.ended]
    all_running = bool(alive) and all(n.phase is NodePhase.RUNNING for n in alive)
    # Pods of an older attempt or of ended nodes, still there or terminating, are saving their checkpoint.
    draining = any(being_deleted(p) for p in pods) or bool(leftover_pods(state, pods))
    recently_rescaled = (
        state.rescaled_at is not None and (now - state.rescaled_at).total_seconds() < regrow_after_s
    )
    deadline = parse_deadline(spec.goals.deadline, created_at) if spec.goals.deadline else None
    open_segment = state.open_segment
    # Kubernetes does not say how much spot capacity exists; after losing nodes assume none more
    # for ``regrow_after_s``, then try to grow again.
    spot_capacity = len(alive) if recently_rescaled else None
    placement = engine.placement_of(state.placement)
    if market is not None and placement is not None and placement.market is MarketKind.SPOT:
        market = with_capacity(market, placement.zone, spot_capacity)
        spot_capacity = next((z.capacity for z in market.zones if z.zone == placement.zone), spot_capacity)
    fresh, attempt_finished = all_running, False
    if progress is not None:
        attempt_start = min(
            (s.started_at for s in state.segments if s.attempt == state.attempt), default=None
        )
        fresh = bool(progress.time and open_segment and progress.time >= open_segment.started_at)
        attempt_finished = bool(
            progress.finished and progress.time and attempt_start and progress.time >= attempt_start
        )
    else:
        progress = Progress(step=0) if all_running else None
    return JobView(
        spec=spec,
        status=state.status,
        now=now,
        submitted_at=created_at,
        deadline=deadline,
        attempt=state.attempt,
        placement=placement,
        nodes=nodes,
        open_segment_nodes=open_segment.nodes if open_segment else None,
        progress=progress,
        progress_fresh=fresh,
        attempt_finished=attempt_finished,
        draining=draining,
        preempted_in_attempt=state.preempted_in_attempt
        or any(n.notice_at is not None for n in state.attempt_nodes),
        spot_capacity=spot_capacity,
        spot=candidates[0],
        on_demand=candidates[1],
        market=market,
        measurements=measurements,
        right_size_pick=state.right_size.gpu_type if state.right_size else None,
        cost_usd=state.cost_usd(now),
        restarts=state.restarts,
        preemptions=state.preemptions,
        segments=state.segments,
        watch=state.watch,
        waiting=state.waiting,
        gpu=gpu if state.status is JobStatus.RUNNING else None,
    )


# --- the decision --------------------------------------------------------------------------------
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
) -> Decision:
    """Reconcile, then :func:`engine.apply`, until the job asks for nothing but pure transitions.

    ``candidates``: the spot placement of each allowed zone and the on-demand one (a pair: one zone);
    a spot attempt whose pods all stayed unschedulable longer than ``shortage_after_s`` marks its zone
    short of spot for ``regrow_after_s`` (:mod:`operators.kubernetes.spot_market`). ``measurements``:
    for right-size (:mod:`operators.kubernetes.rightsize`)."""
    loaded = load_state(status, job)
    progress = progress_of(status)
    found = as_candidates(candidates)
    pair = (found.cheapest_spot, found.on_demand)
    active = [n.node_id for n in loaded.attempt_nodes if n.launch is not NodeLaunch.ENDED]
    by_node = pods_of(loaded.attempt, active, pods)
    short = short_zone(loaded, by_node, active, now, shortage_after_s)
    market, memory = remember(
        MarketMemory.from_status(status), spec, found, loaded, short,
        scheduled_zone(loaded, by_node, active), now, regrow_after_s,
        reclaimed_zone(loaded, by_node, active, existing_nodes),
    )  # fmt: skip
    shortage = False
    if short is not None:  # leave the zone when the policy would place the job elsewhere, else wait
        first = build_view(
            spec, loaded, pods, existing_nodes, pair, created_at, now, regrow_after_s, market,
            progress=progress,
        )  # fmt: skip
        clock = JobClock(now, created_at, first.deadline, first.progress, first.watch)
        shortage = policy_moves(spec, first.market or market, clock)
    seen = observe(loaded, pods, existing_nodes, shortage)
    state = engine.record_notices(loaded, {n.node_id: n.notice_at for n in seen if n.notice_at})
    state = engine.record_progress(state, progress)
    events = [
        JobEvent("preemption_notice", f"node {n.node_id} got the notice")
        for n, before in zip(state.attempt_nodes, loaded.attempt_nodes, strict=True)
        if n.notice_at is not None and before.notice_at is None
    ]
    state, budget_events = engine.note_budget(state, spec.goals.budget_usd, now)
    events += budget_events
    effects: list[engine.Effect] = []
    for _ in range(MAX_PASSES):
        view = build_view(
            spec,
            state,
            pods,
            existing_nodes,
            pair,
            created_at,
            now,
            regrow_after_s,
            market,
            shortage,
            progress,
            gpu_activity(status),
            measurements,
        )
        planned = reconcile_and_explain(view)
        if not planned:
            break
        alive = [n.node_id for n in view.nodes if not n.phase.ended]
        applied = engine.apply(planned, state, job, alive, now)
        state = applied.state
        effects += applied.effects
        events += applied.events
        if applied.effects or not all(isinstance(a, act.Transition) for a in planned):
            break
    kept = {**status, ZONE_HISTORY_KEY: memory.to_status()}
    notes = notifications_for(JobRef(job, spec.team, spec.user), spec.market.mode, loaded, state, events, now)
    deadline = parse_deadline(spec.goals.deadline, created_at) if spec.goals.deadline else None
    new = status_of(kept, state, events, now, deadline, spec.goals.budget_usd)
    return Decision(new, state, tuple(effects), event_messages(events), tuple(notes))


def status_of(
    old: Mapping[str, Any],
    state: JobState,
    events: Sequence[JobEvent],
    now: datetime,
    deadline: datetime | None = None,
    budget_usd: float | None = None,
) -> dict[str, Any]:
    """The GPUJob's ``.status`` for ``state``: the state, its display fields (``forecast`` of a running
    job), the conditions the transitions in ``events`` set, and ``Waiting`` (why it waits)."""
    status = with_state(old, state)
    status["conditions"] = [dict(c) for c in old.get("conditions", [])]
    for event in events:
        if event.status is None:
            continue
        text = _transition_text(event)
        kind = _CONDITIONS.get(event.status)
        if kind is not None:
            set_condition(status, kind[0], kind[1], kind[0], text, now)
        if event.status is not JobStatus.RUNNING:
            set_condition(status, "Running", False, kind[0] if kind else str(event.status), text, now)
    _waiting_condition(status, state, now)
    if not status["conditions"]:
        del status["conditions"]
    found = forecast(state, now, deadline, budget_usd) if state.status is JobStatus.RUNNING else None
    status.pop("forecast", None)
    if found is not None:
        status["forecast"] = forecast_status(found)
    placement = state.placement
    if placement is not None:
        status.update(
            gpuType=placement.gpu_type,
            market=placement.market,
            zone=placement.zone,
            nodePriceUsdPerHour=placement.node_price_usd_per_hour,
        )
    if state.segments:
        status["desiredNodes"] = state.segments[-1].nodes
    status["nodes"] = len(state.node_ids()) - len(state.node_ids(NodeLaunch.ENDED))
    status["costUsd"] = round(state.cost_usd(now), 6)
    return status


def _waiting_condition(status: dict[str, Any], state: JobState, now: datetime) -> None:
    """``Waiting=True`` with why (reason: the wait's code in CamelCase) while the job waits; False after."""
    waiting = state.waiting if not state.status.terminal and state.status is not JobStatus.RUNNING else None
    if waiting is not None:
        reason = "".join(part.capitalize() for part in waiting.code.split("_"))
        set_condition(status, "Waiting", True, reason, waiting.message, now)
    elif any(c.get("type") == "Waiting" for c in status["conditions"]):
        set_condition(status, "Waiting", False, str(state.status).capitalize(), state.message, now)


def forecast_status(found: Forecast) -> dict[str, Any]:
    """A forecast as ``status.forecast`` (camelCase; ``finishAt`` is the ETA printer column)."""
    data: dict[str, Any] = {
        "finishAt": iso(found.finish_at.replace(microsecond=0)),
        "etaSeconds": round(found.eta_seconds, 3),
        "stepsPerSecond": found.steps_per_second,
        "costToFinishUsd": round(found.cost_to_finish_usd, 6),
        "costToFinishOnDemandUsd": round(found.cost_to_finish_on_demand_usd, 6),
        "projectedCostUsd": round(found.projected_cost_usd, 6),
    }
    if found.deadline_at_risk is not None:
        data["deadlineAtRisk"] = found.deadline_at_risk
    if found.budget_at_risk is not None:
        data["budgetAtRisk"] = found.budget_at_risk
    return data


def _transition_text(event: JobEvent) -> str:
    """The reason a transition event gives (the engine writes ``OLD -> NEW: why``)."""
    return event.message.partition(": ")[2] or event.message


def event_messages(events: Sequence[JobEvent]) -> tuple[str, ...]:
    """One Kubernetes Event message each; it starts with what the Event's reason is made of."""
    return tuple(
        f"{e.status}: {_transition_text(e)}" if e.status is not None else f"{e.kind}: {e.message}"
        for e in events
    )


def fail(status: Mapping[str, Any], job: str, reason: FailureReason, message: str, now: datetime) -> Decision:
    """End the job FAILED with ``reason`` through the engine: its nodes ended (their pods to delete),
    its open segment closed, a ``Failed`` condition."""
    state = load_state(status, job)
    actions: list[act.Action] = [act.MarkNodesEnded(state.node_ids())]
    if state.open_segment is not None:
        actions.append(act.CloseSegment("failed"))
    actions.append(act.Transition(JobStatus.FAILED, message, reason))
    applied = engine.apply(actions, state, job, (), now)
    team, user = str(status.get("team") or "default"), str(status.get("user") or "")
    notes = notifications_for(JobRef(job, team, user), MarketMode.SPOT_WITH_FALLBACK, state, applied.state,
                              applied.events, now)  # fmt: skip
    return Decision(
        status_of(status, applied.state, applied.events, now),
        applied.state,
        applied.effects,
        event_messages(applied.events),
        tuple(notes),
    )
