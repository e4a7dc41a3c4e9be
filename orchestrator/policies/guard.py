"""Bound a planner's decisions by uniform progress: a corridor around its line.

Uniform progress ("Can't Be Late", NSDI'24) needs no model of the market: it rides spot whenever a
zone has it and runs on-demand only while the job is behind the line ``work x t / deadline`` (until it
is ahead of the line at t + 2 changeovers). A planner that trusts a market model beats it where the
model is right and loses to it where it is not. The corridor lets the planner decide only while the
job's progress stays within ``allowed_lag`` hours of work of that line (either side); outside it, and
while catching up on on-demand, uniform progress decides. An allowed lag of 0 is uniform progress
exactly (over every allowed zone, in the planner's zone); an infinite one, the planner alone.

The allowed lag is a share of the job's slack (``PlanAheadPolicy.lag_share``, 0.25 by default): how
far the planner is trusted, measured on real traces held out from its choice
(benchmarks/spot_policies_real.py). The planner's gains come mostly from the order in which it spends
slack (waiting through an outage it expects to end, leaving spot runs it expects to be short); a
quarter of the slack leaves it that room, while a market that defeats its model can cost it at
most that much lag before uniform progress catches the job up.
"""

from __future__ import annotations

import numpy as np

from orchestrator.policies.base import choose_actions
from orchestrator.policies.context import Action, BoolArray, FloatArray, IntArray, MarketBatch
from orchestrator.policies.tries import may_try

_ON_DEMAND = int(Action.ON_DEMAND)  # a plain int in the hot paths


def line_lag_h(b: MarketBatch) -> FloatArray:
    """Hours of work the job is behind uniform progress's line now (negative: ahead of it)."""
    lag: FloatArray = b.work_total_h * b.elapsed_h / b.deadline_h - b.work_done_h
    return lag


def uniform_progress(b: MarketBatch, zone: IntArray) -> tuple[IntArray, IntArray]:
    """Uniform progress's decision over all allowed zones: spot in ``zone`` (the planner's choice among
    those up) when some zone has it, on-demand while behind the line and none has, on-demand until
    ahead of the line at t + 2 changeovers once there; the deadline safety net on top."""
    n = b.elapsed_h.shape[0]
    rate = b.work_total_h / b.deadline_h
    behind = b.work_done_h < rate * b.elapsed_h
    on_od = b.market == _ON_DEMAND
    catching_up = on_od & (b.work_done_h < rate * (b.elapsed_h + 2.0 * b.changeover_h))
    riding = b.on_spot_and_up()
    any_up = b.spot_available.any(axis=1)
    short = b.slack_h < b.safety_h
    od = (on_od & short) | catching_up | (short & ~riding) | (behind & ~any_up & ~riding)
    od |= ~riding & any_up & ~may_try(b)  # a try that may fail must leave the job above the net
    return choose_actions(n, od, (riding | any_up) & ~od, np.where(riding, b.zone, zone))


def in_corridor(b: MarketBatch, allowed_lag_h: FloatArray) -> BoolArray:
    """Rows where the planner may decide: within ``allowed_lag_h`` of the line. On on-demand the edge
    behind lies where uniform progress's catch-up ends (2 changeovers of the line) and the stop nearer,
    the edge ahead the stop further: a job leaving on-demand by either rule is, once stopped, on the
    same side, so the corridor's edge never sends a job on and off on-demand."""
    lag = line_lag_h(b)
    rate = b.work_total_h / b.deadline_h
    on_od = b.market == _ON_DEMAND
    upper = allowed_lag_h - np.where(on_od, rate * (2.0 * b.changeover_h + b.stop_h), 0.0)
    # ahead of the line, on on-demand: the planner still decides where the stopped job would be inside
    lower = -allowed_lag_h - np.where(on_od, rate * b.stop_h, 0.0)
    inside: BoolArray = (allowed_lag_h > 0.0) & (lag >= lower) & (lag <= upper)
    return inside


def bounded(
    b: MarketBatch, planned: tuple[IntArray, IntArray], zone: IntArray, allowed_lag_h: FloatArray
) -> tuple[IntArray, IntArray]:
    """The planner's decisions inside the corridor, uniform progress's outside it."""
    inside = in_corridor(b, allowed_lag_h)
    up_action, up_zone = uniform_progress(b, zone)
    action = np.where(inside, planned[0], up_action)
    return action, np.where(inside, planned[1], up_zone)


def allowed_lag_h(b: MarketBatch, lag_share: float) -> FloatArray:
    """``lag_share`` of the job's whole slack (deadline - work), for every row."""
    slack0 = max(b.deadline_h - b.work_total_h, 0.0)
    allowed: FloatArray = np.full(b.elapsed_h.shape[0], lag_share * slack0)
    return allowed
