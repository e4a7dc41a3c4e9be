"""Spot, on-demand or wait, and in which zone: the job's market policy, asked with what is known now.

The controller and ``gpuctl simulate`` run the same policy objects (``orchestrator.policies``). This
module only translates: a :class:`MarketView` (zones, capacity, history, prices) and the job's clock
and progress become a :class:`~orchestrator.policies.MarketContext`; the policy's
:class:`~orchestrator.policies.MarketDecision` becomes a placement to launch, or a reason to wait.

* ``market.mode: on-demand`` never asks the policy; ``spot`` asks it but never runs on-demand.
* Without a deadline the policy sees an infinite one: spot whenever a zone has it, else wait.
* The slack needs the work left: from ``goals.compute_hours`` (times the progress fraction), else
  estimated from the time run so far and the progress fraction. With neither (no estimate, no
  progress yet) and a deadline, the job takes spot when a zone has it and on-demand otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.backends.base import Placement, Progress
from orchestrator.catalog.offers import MarketKind
from orchestrator.policies import DEFAULT_POLICY, MarketContext, ZoneHistory, market_policy
from orchestrator.policies.context import MarketLog
from orchestrator.policies.rescale import rescale_target
from orchestrator.spec import JobSpec, MarketMode
from orchestrator.state.watch import WatchState


@dataclass(frozen=True)
class ZoneMarket:
    zone: str
    spot: Placement
    capacity: int | None
    """Spot nodes the market offers in this zone now (None: no limit known)."""


@dataclass(frozen=True)
class MarketView:
    """What the controller knows of the market at one tick (gathered by the driver)."""

    zones: tuple[ZoneMarket, ...]
    """Zones with a spot offer, in preference order."""
    on_demand: Placement | None
    history: ZoneHistory = field(default_factory=ZoneHistory.empty)
    tick_h: float = 0.0
    """Time until the next decision (the controller's tick)."""
    run_h: float = 0.0
    """Hours the job has held nodes so far, minus a changeover per attempt (for work estimates)."""
    market_log: MarketLog | None = None
    """The market the controller saw before the job (kept with the job), when it keeps a log."""
    try_cost_h: float = 0.0
    """What a spot launch that finds no capacity costs before the job is placed again, where capacity
    is seen only by trying (Kubernetes: the shortage timeout); 0 where it is seen before launching."""


@dataclass(frozen=True)
class MarketChoice:
    """Launch on ``nodes`` nodes of ``placement`` now."""

    placement: Placement
    nodes: int
    why: str


@dataclass(frozen=True)
class MarketWait:
    """No placement now, the market may offer one later: ``why`` the job waits."""

    why: str


@dataclass(frozen=True)
class MarketRefusal:
    """No placement ever, as the job is specified (no offer of its GPU types on the market it allows)."""

    why: str


MarketResult = MarketChoice | MarketWait | MarketRefusal


@dataclass(frozen=True)
class JobClock:
    """The job's time and progress, as the policy needs them: the current attempt's progress record,
    and the step samples kept in the job's state (read between attempts: :func:`work_progress`)."""

    now: datetime
    submitted_at: datetime
    deadline: datetime | None
    progress: Progress | None
    watch: WatchState = field(default_factory=WatchState)


def work_progress(progress: Progress | None, watch: WatchState) -> Progress | None:
    """The progress the work estimate reads: the current attempt's record when it gives the total
    steps, else the newest step seen (kept in the job's state) with the total seen. So between
    attempts and while a new one starts, the work done is what training reached (its checkpoint, when
    it stopped for a notice), not :func:`~orchestrator.controller.driver.run_hours`' model of it: the
    two differ by the changeover less the real start-up, and switching between them made the slack
    jump at every stop and start (a job that left on-demand for spot found itself under the safety
    net a pass later and went back)."""
    if progress is not None and progress.total_steps:
        return progress
    if watch.samples and watch.total_steps:
        newest = watch.samples[-1]
        return Progress(step=newest.step, total_steps=watch.total_steps, time=newest.at)
    return progress


def changeover_hours(spec: JobSpec) -> float:
    return spec.market.changeover.total_seconds() / 3600.0


def choose_market(spec: JobSpec, market: MarketView, clock: JobClock) -> MarketResult:
    """A placement to launch now, why the job waits, or why it never can run."""
    res = spec.resources
    mode = spec.market.mode
    od = market.on_demand
    if mode is MarketMode.ON_DEMAND or not market.zones:
        if od is None:
            return MarketRefusal(f"no on-demand offer of {', '.join(res.gpu_types)}")
        if mode is MarketMode.SPOT:
            return MarketRefusal(f"no spot offer of {', '.join(res.gpu_types)}")
        return MarketChoice(od, res.max_nodes, "on-demand requested" if mode is MarketMode.ON_DEMAND
                            else "no spot offer")  # fmt: skip
    up = [z for z in market.zones if _offered(z, spec) >= res.min_nodes]
    ctx = market_context(spec, market, clock, current=None)
    if ctx is None:  # deadline but no idea of the work left: never gamble on spot coming back
        if up:
            return _spot(spec, up[0], "spot capacity available (no work estimate for a deadline policy)")
        if mode is MarketMode.SPOT_WITH_FALLBACK and od is not None:
            return MarketChoice(od, res.max_nodes, "no spot capacity, a deadline and no work estimate "
                                "(set goals.compute_hours)")  # fmt: skip
        return MarketWait("waiting for spot capacity")
    policy = market_policy(spec.market.policy or DEFAULT_POLICY)
    decision = policy.decide(ctx)
    note = f"{policy.name}, slack {_hours(ctx)}"
    if decision.market is MarketKind.SPOT and decision.zone is not None:
        zone = next(z for z in market.zones if z.zone == decision.zone)
        return _spot(spec, zone, f"spot in {zone.zone} ({note})")
    if decision.market is MarketKind.ON_DEMAND:
        if mode is MarketMode.SPOT:
            return MarketWait(f"waiting for spot capacity (market.mode spot never runs on-demand; {note})")
        if od is None:
            return MarketRefusal(f"no on-demand offer of {', '.join(res.gpu_types)}")
        return MarketChoice(od, res.max_nodes, f"on-demand: the deadline needs it ({note})")
    return MarketWait(f"waiting for spot capacity ({note})")


def leave_on_demand(spec: JobSpec, market: MarketView, clock: JobClock, current: Placement) -> str | None:
    """While running on-demand: a reason to stop and re-place (spot is back, or waiting is free), or None.

    Policies never leave a spot zone that still has capacity; losing it is a preemption.
    """
    if (
        spec.market.mode is MarketMode.ON_DEMAND
        or current.market is not MarketKind.ON_DEMAND
        or not market.zones
    ):
        return None
    ctx = market_context(spec, market, clock, current=current)
    if ctx is None:
        return None
    policy = market_policy(spec.market.policy or DEFAULT_POLICY)
    decision = policy.decide(ctx)
    if decision.market is MarketKind.ON_DEMAND or _placed_on_demand_again(spec, market, clock):
        return None
    where = (
        f"spot is back in {decision.zone}"
        if decision.market is MarketKind.SPOT
        else "the slack allows waiting for spot"
    )
    return f"leaving on-demand: {where} ({policy.name}, slack {_hours(ctx)})"


def _placed_on_demand_again(spec: JobSpec, market: MarketView, clock: JobClock) -> bool:
    """Whether the job, once stopped, would be placed on on-demand again at once (what the placing
    step asks, with no current market): then leaving on-demand only throws work away, every pass."""
    again = choose_market(spec, market, clock)
    return isinstance(again, MarketChoice) and again.placement.market is MarketKind.ON_DEMAND


def market_context(
    spec: JobSpec, market: MarketView, clock: JobClock, current: Placement | None
) -> MarketContext | None:
    """The policy's inputs, in hours since submission; None when the slack cannot be known."""
    change_h = changeover_hours(spec)
    work = work_hours(spec, work_progress(clock.progress, clock.watch), market.run_h)
    if clock.deadline is None:
        deadline_h = math.inf
        work = work or (0.0, 1.0)  # no deadline: the slack is infinite whatever the work
    else:
        deadline_h = (clock.deadline - clock.submitted_at).total_seconds() / 3600.0
        if work is None:
            return None
    first = market.zones[0].spot
    return MarketContext(
        elapsed_h=(clock.now - clock.submitted_at).total_seconds() / 3600.0,
        deadline_h=deadline_h,
        work_done_h=work[0],
        work_total_h=work[1],
        changeover_h=change_h,
        tick_h=market.tick_h,
        spot_price=first.node_price_usd_per_hour,
        on_demand_price=first.on_demand_node_price_usd_per_hour,
        zones=[z.zone for z in market.zones],
        spot_available={z.zone: _offered(z, spec) >= spec.resources.min_nodes for z in market.zones},
        current_market=current.market if current else None,
        current_zone=current.zone if current and current.spot else None,
        history=market.history,
        latency_h=market.tick_h,  # a decision is carried out at this pass or the next one
        # on-demand, told to stop, may take the notice grace to save and exit; a pass sees it ended
        stop_h=spec.checkpoint.notice_grace_seconds / 3600.0 + market.tick_h,
        market_log=market.market_log,
        try_cost_h=market.try_cost_h,
    )


def work_hours(spec: JobSpec, progress: Progress | None, run_h: float) -> tuple[float, float] | None:
    """(done, total) compute hours at full size, or None when there is no way to tell."""
    fraction = None
    if progress is not None and progress.total_steps:
        fraction = min(1.0, progress.step / progress.total_steps)
    total = spec.goals.compute_hours
    if total is not None:
        done = total * fraction if fraction is not None else min(total, run_h)
        return done, total
    if fraction and run_h > 0:
        return run_h, run_h / fraction
    return None


def _spot(spec: JobSpec, zone: ZoneMarket, why: str) -> MarketChoice:
    res = spec.resources  # the simulator sizes spot runs with the same function (rescale_targets)
    return MarketChoice(zone.spot, rescale_target(_offered(zone, spec), res.min_nodes, res.max_nodes, 0), why)


def _offered(zone: ZoneMarket, spec: JobSpec) -> int:
    return spec.resources.max_nodes if zone.capacity is None else zone.capacity


def _hours(ctx: MarketContext) -> str:
    slack = (ctx.deadline_h - ctx.elapsed_h) - (ctx.work_total_h - ctx.work_done_h)
    if math.isinf(slack):
        return "unlimited (no deadline)"
    return f"{slack * 60:.1f} min" if abs(slack) < 2 else f"{slack:.1f} h"
