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

Where the zones' runs of spot seen so far (the job's own and its market log's) fit the planner's
model, the corridor widens (``PlanAheadPolicy.trusted_lag_share``, unbounded by default): the model
takes a zone's runs as exponential (one loss rate whatever a run's age), so the mean of
(length / mean length)^2 over ended runs is 2; heavy-tailed runs (most dying within minutes, a few
lasting days: the markets where uniform progress wins) give far more. :func:`trusted` accepts the
model where at least ``min_runs`` runs have ended and that mean is within ``spread_se`` standard
errors (sqrt(20 / runs) for exponential runs) of 2; with fewer runs, or a wider spread, the
corridor stays at ``lag_share``.
"""

from __future__ import annotations

import math

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
    lag = math.inf if math.isinf(lag_share) else lag_share * slack0
    allowed: FloatArray = np.full(b.elapsed_h.shape[0], lag)
    return allowed


EXPONENTIAL_SPREAD = 2.0
"""The mean of (run length / mean run length)^2 for exponential run lengths (1 + CV^2, CV 1): the
planner's model, one loss rate per zone whatever a run's age."""
EXPONENTIAL_SPREAD_SD = math.sqrt(20.0)
"""The standard deviation of (length / mean)^2 for one exponential run (E[X^4] / mean^4 = 24)."""


def run_spread(b: MarketBatch) -> tuple[FloatArray, FloatArray]:
    """Per row: the mean over the ended runs of availability of (length / its zone's mean)^2, and
    how many runs it is over: the job's own and those of its market log. 2 for runs whose lengths
    are exponential, as the planner's model assumes; far more for heavy-tailed ones (most runs
    dying within minutes, a few lasting days). Zones with no run of length yet count for nothing."""
    n = b.elapsed_h.shape[0]
    spread = b.spread
    if b.market_log is not None:
        spread = b.market_log.spread if spread is None else spread + b.market_log.spread
    if spread is None:
        return np.zeros(n), np.zeros(n)
    runs, run_h = spread.runs, spread.run_h
    # per zone: runs x mean((x / m)^2) = runs^2 x sum(x^2) / sum(x)^2; pooled over zones, by runs
    weighted = np.where(run_h > 0.0, runs * runs * spread.run_h2 / np.maximum(run_h * run_h, 1e-300), 0.0)
    counted = np.where(run_h > 0.0, runs, 0.0).sum(axis=1)
    mean_sq: FloatArray = weighted.sum(axis=1) / np.maximum(counted, 1.0)
    return mean_sq, counted


def trusted(b: MarketBatch, min_runs: float, spread_se: float) -> BoolArray:
    """Rows whose ended runs are consistent with the planner's exponential run lengths: at least
    ``min_runs`` of them, and their spread (:func:`run_spread`) at most ``spread_se`` standard errors
    above the exponential's."""
    mean_sq, counted = run_spread(b)
    limit = EXPONENTIAL_SPREAD + spread_se * EXPONENTIAL_SPREAD_SD / np.sqrt(np.maximum(counted, 1.0))
    fits: BoolArray = (counted >= min_runs) & (mean_sq <= limit)
    return fits
