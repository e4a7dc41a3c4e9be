""" "Why is it waiting?": one line with its evidence for every state in which a job is not running.

:data:`WAITING_REASONS` has one entry per waiting state of the reconcile table (every non-terminal
state but RUNNING; a test fails when a new one lacks its entry). Reconcile asks it each tick the job
waits and records the answer in the job's state (:class:`~orchestrator.state.watch.WaitReason`) when
it changed; a transition into a waiting state records its own message first. ``gpuctl status`` and
``list`` (REASON) show it, and the GPUJob's ``Waiting`` condition carries it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from orchestrator.backends.base import NodePhase
from orchestrator.controller.market_choice import JobClock, MarketChoice, MarketView, choose_market
from orchestrator.costs.user_limits import hourly_wait, nodes_within_cap, slot_wait
from orchestrator.state.status import JobStatus

if TYPE_CHECKING:
    from orchestrator.controller.reconcile import JobView

S = JobStatus
Reason = tuple[str, str]
"""(code, one line with the evidence)."""


def _since(view: JobView, code: str) -> str:
    kept = view.waiting.since if view.waiting is not None and view.waiting.code == code else view.now
    return f"{kept:%Y-%m-%d %H:%M} UTC"


def _pending(view: JobView, market: MarketView) -> Reason:
    held = slot_wait(view.user) if view.user is not None else None
    if held:
        return "user_jobs", held
    return (
        "pending",
        f"submitted {view.submitted_at:%Y-%m-%d %H:%M} UTC; waiting for the controller to place it",
    )


def _placing(view: JobView, market: MarketView) -> Reason:
    """PLACING, RECOVERING and a RESCALING job without nodes: old nodes saving, or the market."""
    if view.draining:
        return "checkpoint", (
            f"waiting for the stopped nodes of attempt {view.attempt} to save their checkpoint and exit"
        )
    clock = JobClock(view.now, view.submitted_at, view.deadline, view.progress, view.watch)
    choice = choose_market(view.spec, market, clock)
    if isinstance(choice, MarketChoice):
        price, nodes = choice.placement.node_price_usd_per_hour, choice.nodes
        if view.user is not None and not nodes_within_cap(
            view.user, price, nodes, view.spec.resources.min_nodes
        ):
            return "user_hourly", hourly_wait(view.user, price * nodes)
        return "placing", placing_line(str(choice.placement.market), choice.placement.zone, choice.why)
    short = [
        z.zone for z in market.zones if z.capacity is not None and z.capacity < view.spec.resources.min_nodes
    ]
    zones = ", ".join(short or [z.zone for z in market.zones]) or "no allowed zone"
    return "no_spot", f"no spot capacity in {zones} since {_since(view, 'no_spot')}; {choice.why}"


def placing_line(market: str, zone: str, why: str) -> str:
    """``placing on spot use2-az2 (greedy, slack 3.0 h)``: the placement once, then the policy's reason
    less what repeats the placement (``spot in use2-az2``, ``on-demand:``)."""
    where = f"{market} {zone}" if zone else market
    rest = why
    for said in (f"{market} in {zone}" if zone else None, f"{market}:"):
        if said and rest.startswith(said):
            rest = rest.removeprefix(said).lstrip(" :;,")
            break
    if not rest:
        return f"placing on {where}"
    return f"placing on {where} {rest}" if rest.startswith("(") else f"placing on {where}: {rest}"


def _launching(view: JobView, market: MarketView) -> Reason:
    alive = [n for n in view.nodes if not n.phase.ended]
    queued = [n for n in alive if n.queued or n.wait_reason]
    if queued:
        code = (
            "unschedulable"
            if any((n.wait_reason or "").startswith("unschedulable") for n in queued)
            else "queued"
        )
        said = next(
            (n.wait_reason for n in queued if n.wait_reason), "waiting in the cluster manager's queue"
        )
        return code, f"{len(queued)} of {len(alive)} node(s) {said}, since {_since(view, code)}"
    starting = [n for n in alive if n.phase is NodePhase.STARTING]
    if starting:
        return "starting", f"{len(starting)} of {len(alive)} node(s) of attempt {view.attempt} starting"
    return "starting", (
        f"{len(alive)} node(s) of attempt {view.attempt} running; waiting for training's first step "
        "(setup, rendezvous, resume)"
    )


def _rescaling(view: JobView, market: MarketView) -> Reason:
    alive = [n for n in view.nodes if not n.phase.ended]
    if not alive:
        return _placing(view, market)
    return "rescaling", f"continuing on {len(alive)} node(s); waiting for the new world's first step"


def _preempted(view: JobView, market: MarketView) -> Reason:
    return (
        "preempted",
        f"attempt {view.attempt} was reclaimed by the market; resuming from the newest checkpoint",
    )


WAITING_REASONS: dict[JobStatus, Callable[[JobView, MarketView], Reason]] = {
    S.PENDING: _pending,
    S.PLACING: _placing,
    S.RECOVERING: _placing,
    S.LAUNCHING: _launching,
    S.RESCALING: _rescaling,
    S.PREEMPTED: _preempted,
}
"""Every waiting state (non-terminal, not RUNNING) -> why it waits."""

WAITING_STATES = frozenset(s for s in JobStatus if not s.terminal and s is not JobStatus.RUNNING)


def why_waiting(view: JobView, market: MarketView) -> Reason | None:
    """Why the job in ``view`` waits (``market``: the market view reconcile places with); None when it
    runs or has ended."""
    reason = WAITING_REASONS.get(view.status)
    return reason(view, market) if reason is not None else None
