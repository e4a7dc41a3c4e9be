"""The watchdog and the forecasts' alerts of a running job: part of the pure reconcile step.

- ``stalled``: the step counter has not advanced for ``watchdog.stall_after`` (default: the larger of
  10 minutes and 20 median step times) since its last advance in the current segment (or the
  segment's start). A rank hung in a collective (NCCL, gloo) stops every rank's step: this catches it.
- ``idle``: the GPU monitors measured every GPU under 5 % utilization for ``watchdog.idle_after``.
- ``deadline_at_risk`` / ``budget_at_risk``: the forecast (:mod:`orchestrator.state.forecast`) finishes
  after the deadline, or spends more than ``goals.budget_usd``, before it happens.

Each alert is raised once per episode (the state remembers it, see
:class:`~orchestrator.state.watch.WatchState`). ``watchdog.action`` then decides what a stall or
idleness does: ``alert`` only, ``checkpoint-and-stop`` (notice, stop, FAILED(stalled)) or ``restart``
(stop, resume from the newest checkpoint on a new attempt; counted against ``recovery.max_restarts``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from orchestrator.controller.actions import (
    Action,
    Alert,
    ClearAlert,
    CloseSegment,
    CountRestart,
    MarkNodesEnded,
    StopNodes,
    Transition,
)
from orchestrator.spec import WatchdogAction
from orchestrator.state.forecast import Forecast, forecast_from
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.watch import IDLE_UTIL_PCT

if TYPE_CHECKING:
    from orchestrator.controller.reconcile import JobView

MIN_STALL_AFTER_S = 600.0
STALL_STEP_TIMES = 20
RISK_CLEARS_AT = 0.9
"""A raised risk is cleared (a later one raised again) once the forecast is back under 90 % of the
budget, or finishes with 10 % of the time left to the deadline to spare: no alert per tick near the line."""


def stall_after_s(view: JobView) -> float:
    """``watchdog.stall_after``, or the larger of 10 minutes and 20 median step times."""
    given = view.spec.watchdog.stall_after
    if given is not None:
        return given.total_seconds()
    median = view.watch.median_step_s(view.segment_started_at)
    return max(MIN_STALL_AFTER_S, STALL_STEP_TIMES * median) if median else MIN_STALL_AFTER_S


def watch_actions(view: JobView) -> list[Action]:
    """The alerts of a RUNNING attempt, and the watchdog's action on a stall or idleness."""
    if view.status is not JobStatus.RUNNING or view.segment_started_at is None:
        return []
    found = _stall(view) or _idle(view)
    if found is not None:
        alert = found
        if view.spec.watchdog.action is not WatchdogAction.ALERT:
            return [alert, *_act(view, alert.message)]
        return [alert, *_risks(view)]
    return _risks(view)


def _stall(view: JobView) -> Alert | None:
    start = view.segment_started_at
    assert start is not None
    last = view.watch.last_advance(start) or start
    limit = stall_after_s(view)
    quiet = (view.now - last).total_seconds()
    if quiet < limit or view.watch.stalled_for == last:
        return None
    step = view.progress.step if view.progress is not None else None
    median = view.watch.median_step_s(start)
    typical = f", median step {median:.3g} s" if median else ""
    return Alert(
        "stalled",
        f"step {step} has not advanced for {_span(quiet)} (last advance {last:%Y-%m-%d %H:%M:%S} UTC; "
        f"stall_after {_span(limit)}{typical}) on {len(view.nodes)} node(s)",
        last,
    )


def _idle(view: JobView) -> Alert | None:
    given, gpu, start = view.spec.watchdog.idle_after, view.gpu, view.segment_started_at
    if given is None or gpu is None or start is None:
        return None
    since = max(gpu.busy_until or start, start)
    idle_s = (gpu.measured_until - since).total_seconds()
    limit = given.total_seconds()
    if idle_s < limit or view.watch.idle_for == since:
        return None
    return Alert(
        "idle",
        f"GPUs under {IDLE_UTIL_PCT:.0f} % utilization for {_span(idle_s)} (since {since:%Y-%m-%d %H:%M:%S} "
        f"UTC, newest monitor window {gpu.util_pct:.1f} %; idle_after {_span(limit)})",
        since,
    )


def _act(view: JobView, why: str) -> list[Action]:
    spec = view.spec
    grace = spec.checkpoint.notice_grace_seconds
    ids = tuple(n.node_id for n in view.nodes)
    alive = tuple(n.node_id for n in view.nodes if not n.phase.ended)
    close: list[Action] = [CloseSegment("watchdog")] if view.open_segment_nodes is not None else []
    ending: list[Action] = [StopNodes(alive, grace, "watchdog"), *close, MarkNodesEnded(ids)]
    if spec.watchdog.action is WatchdogAction.CHECKPOINT_AND_STOP:
        return [*ending, Transition(JobStatus.FAILED, f"watchdog: {why}; checkpointed and stopped",
                                    FailureReason.STALLED)]  # fmt: skip
    if view.restarts >= spec.recovery.max_restarts:
        return [*ending, Transition(JobStatus.FAILED, f"watchdog: {why}; recovery.max_restarts "
                                    f"({spec.recovery.max_restarts}) reached", FailureReason.TOO_MANY_RESTARTS)]  # fmt: skip
    return [*ending, CountRestart(),
            Transition(JobStatus.RECOVERING, f"watchdog: {why}; restarting from the newest checkpoint")]  # fmt: skip


def _risks(view: JobView) -> list[Action]:
    goals = view.spec.goals
    found = forecast_from(view.watch, view.segments, view.now, view.deadline, goals.budget_usd)
    if found is None:
        return []
    actions: list[Action] = []
    watch = view.watch
    if found.budget_at_risk and not watch.budget_at_risk:
        actions.append(
            Alert("budget_at_risk", f"forecast: {found.projected_cost_usd:.2f} USD to finish, over the "
                  f"{found.budget_usd:.2f} USD budget (spent {found.spent_usd:.2f}, {found.cost_to_finish_usd:.2f} "
                  f"more at {found.hourly_usd:.2f} USD/h for {_span(found.eta_seconds)} at "
                  f"{found.steps_per_second:.3g} steps/s, step {found.step} of {found.total_steps})",
                  evidence=_forecast_evidence(found))
        )  # fmt: skip
    elif (
        watch.budget_at_risk
        and goals.budget_usd
        and found.projected_cost_usd < RISK_CLEARS_AT * goals.budget_usd
    ):
        actions.append(ClearAlert("budget_at_risk"))
    deadline = view.deadline
    if deadline is not None and found.deadline_at_risk and not watch.deadline_at_risk:
        late = (found.finish_at - deadline).total_seconds()
        actions.append(
            Alert("deadline_at_risk", f"forecast: finishes {found.finish_at:%Y-%m-%d %H:%M} UTC, {_span(late)} "
                  f"after the deadline {deadline:%Y-%m-%d %H:%M} UTC (step {found.step} of {found.total_steps} "
                  f"at {found.steps_per_second:.3g} steps/s)", evidence=_forecast_evidence(found))
        )  # fmt: skip
    elif deadline is not None and watch.deadline_at_risk:
        spare = timedelta(seconds=(1 - RISK_CLEARS_AT) * max(0.0, (deadline - view.now).total_seconds()))
        if found.finish_at <= deadline - spare:
            actions.append(ClearAlert("deadline_at_risk"))
    return actions


def _span(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


__all__ = ["MIN_STALL_AFTER_S", "stall_after_s", "watch_actions"]


def _forecast_evidence(found: Forecast) -> dict[str, float | int | str]:
    """The forecast's numbers behind a risk alert (a notification's ``evidence``)."""
    evidence: dict[str, float | int | str] = {
        "step": found.step,
        "total_steps": found.total_steps,
        "steps_per_second": round(found.steps_per_second, 6),
        "finish_at": found.finish_at.isoformat(),
        "spent_usd": round(found.spent_usd, 4),
        "projected_cost_usd": round(found.projected_cost_usd, 4),
    }
    if found.budget_usd is not None:
        evidence["budget_usd"] = found.budget_usd
    if found.deadline is not None:
        evidence["deadline"] = found.deadline.isoformat()
    return evidence
