"""``plan-ahead``: learn each zone's availability online, plan the rest of the job against it.

Every tick, from the history in the context only (so a restarted controller decides the same way):

1. Per zone, the rates at which spot goes away and comes back, from the lengths of its up and down
   runs so far (censored: the current run counts as time, not as an ended run), each with a prior of
   ``prior_runs`` runs. The prior's runs split a cycle of ``prior_cycle_h`` hours by the share of time
   the zone has had spot so far (itself smoothed by half a cycle up and half down): a zone seen with
   spot 10 % of the time is expected to have short up runs and long down runs from the start (one
   guess for every zone would make the plan try many short spot runs in a mostly-down zone before
   its own runs outweigh the guess). Four runs, not more: a zone whose spot comes and goes every few
   minutes must soon look like one (with 8, 25 runs of 0.1 h still read as 0.4 h).
   A zone that is down now: outages differ (a blip, a capacity crunch of a day), so the zone's
   recovery rate is only the mean of a gamma prior (shape ``outage_shape``) over each outage's own
   rate, and this outage's age so far, without recovery, updates it: shape / (shape / rate + age).
   The longer an outage has lasted, the longer it is expected to last (infinite shape: memoryless).
2. The job's market model (:class:`MarketModel`): the zone it rides (the current one, else the one
   with spot whose runs last longest), the chance that another zone has spot when that one is lost
   (zones taken as independent), and how fast "no zone has spot" ends (the sum of the zones'
   recovery rates, but never faster than the time with spot seen so far allows: zones may fail
   together).
3. The cheapest action for the job's time left, slack and situation, from the dynamic program of
   :mod:`orchestrator.policies.planner` (re-planned every tick: the model changes as the history
   grows; tables are cached per binned model).

The market seen before the job (``MarketBatch.market_log``: a controller's log of its zones, the
simulator's trace before the start point) counts only where its days agree on a daily cycle
(:mod:`orchestrator.policies.daily`): then its hours join the job's own in step 1, and the plan's
rates follow the cycle by the hour of the day. Where they do not, the job starts from nothing, as
without a log (a week of a market without a rhythm, its rates taken as the job's, misleads the plan
more often than it helps: see benchmarks/spot_policies_NOTES.md).

Riding spot in a zone that still has capacity continues while the slack covers a fallback launch
and a tick (only a slowed, elastic ride gets under that). The deadline safety net of the other
policies applies on top. Without a deadline: spot when some zone has it, else wait.

The decisions are bounded by uniform progress (:mod:`orchestrator.policies.guard`): within
``lag_share`` of the job's slack of its line, or ``trusted_lag_share`` where the zones' ended runs
are consistent with the model's exponential run lengths (at least ``min_runs`` of them, their spread
within ``spread_se`` standard errors of the exponential's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from orchestrator.policies.base import MarketPolicy, choose_actions
from orchestrator.policies.context import Action, FloatArray, IntArray, MarketBatch
from orchestrator.policies.guard import allowed_lag_h, bounded, trusted
from orchestrator.policies.planner import IDLE_DOWN, IDLE_UP, OD_DOWN, OD_UP, PlanGrid, cycle_keys, plan_cache
from orchestrator.policies.tries import may_try

_SPOT, _ON_DEMAND = int(Action.SPOT), int(Action.ON_DEMAND)  # plain ints in the hot paths


class PlanAheadPolicy(MarketPolicy):
    name = "plan-ahead"
    description = "learns each zone's up/down runs, plans the rest of the job by dynamic programming"

    def __init__(
        self,
        prior_cycle_h: float = 3.0,
        prior_runs: float = 4.0,
        outage_shape: float = 1.0,
        lag_share: float = 0.25,
        trusted_lag_share: float = math.inf,
        min_runs: float = 20.0,
        spread_se: float = 2.0,
    ) -> None:
        self.prior_cycle_h = prior_cycle_h
        self.prior_runs = prior_runs
        self.outage_shape = outage_shape
        self.lag_share = lag_share
        self.trusted_lag_share = trusted_lag_share
        self.min_runs = min_runs
        self.spread_se = spread_se

    def decide_batch(self, b: MarketBatch) -> tuple[IntArray, IntArray]:
        n = b.elapsed_h.shape[0]
        rows = np.arange(n)
        seen_h = _Seen.of(b)
        loss, recovery, share = self.zone_rates(b, seen_h)
        # a ride keeps its zone while it has capacity, unless the ride has run the slack down to one
        # fallback launch and a tick: an elastic job on fewer nodes (and pausing at each resize) loses
        # slack while it rides, and would miss the deadline if it rode on; a full ride never gets there
        # (it launched with the safety net's slack, and its slack stays)
        riding = b.on_spot_and_up() & (b.slack_h >= b.changeover_h + b.tick_h - 1e-6)
        any_up = b.spot_available.any(axis=1)
        best_up = np.argmin(np.where(b.spot_available, loss, np.inf), axis=1)
        zone = np.where(riding, b.zone, best_up)
        on_od = b.market == _ON_DEMAND
        # the safety net; on on-demand it reaches the stop higher: leave only if still above it once stopped
        short = b.slack_h < b.safety_h + np.where(on_od, b.stop_h, 0.0)
        if not (math.isfinite(b.deadline_h) and math.isfinite(b.work_total_h)):
            od = on_od & ~any_up
            return choose_actions(n, od, (riding | any_up) & ~od, zone)

        ride_zone = np.where(any_up, zone, np.argmin(loss, axis=1))
        ride_loss = loss[rows, ride_zone]
        others_down = np.where(np.arange(loss.shape[1])[None, :] == ride_zone[:, None], 1.0, 1.0 - share)
        failover = 1.0 - np.prod(others_down, axis=1)
        p_any = (seen_h.any_h + 0.5 * self.prior_cycle_h) / (seen_h.observed_h + self.prior_cycle_h)
        seen = ride_loss * (1.0 - failover) * p_any / np.maximum(1.0 - p_any, 1e-6)
        any_recovery = np.minimum(recovery.sum(axis=1), seen)

        grid = PlanGrid.for_job(
            b.deadline_h, b.work_total_h, b.changeover_h, b.tick_h, b.spot_price, b.on_demand_price,
            b.latency_h, b.stop_h,
        )  # fmt: skip
        situation = np.where(on_od, np.where(any_up, OD_UP, OD_DOWN), np.where(any_up, IDLE_UP, IDLE_DOWN))
        cache = plan_cache(grid)
        cycle = None
        if b.market_log is not None:  # the deadline's place in the day's cycle (strength 0: none)
            log = b.market_log
            cycle = cycle_keys(log.cycle_strength, log.start_clock_h + b.deadline_h - log.cycle_peak_h)
        planned = cache.lookup(
            ride_loss, failover, any_recovery, np.maximum(b.time_left_h, 0.0), b.slack_h, situation, cycle
        )
        leaving = on_od & (planned != _ON_DEMAND)
        if leaving.any():  # only if the plan, asked again once stopped, would not send it straight back
            idle = np.where(any_up, IDLE_UP, IDLE_DOWN)
            after_h = np.maximum(b.time_left_h - b.stop_h, 0.0)
            again = cache.lookup(
                ride_loss, failover, any_recovery, after_h, b.slack_h - b.stop_h, idle, cycle
            )
            # spot the stopped job may not try (a failed try would cross the net) is on-demand again
            untried = (again == _SPOT) & (b.slack_h - b.stop_h < b.try_safety_h - 1e-9)
            again = np.where(untried, _ON_DEMAND, again)
            planned = np.where(leaving & (again == _ON_DEMAND), _ON_DEMAND, planned)
        # a try of spot that may fail (Kubernetes) must leave the job above the net: else on-demand
        planned = np.where((planned == _SPOT) & ~riding & ~may_try(b), _ON_DEMAND, planned)
        od = (short & ~riding) | (~riding & (planned == _ON_DEMAND))
        spot = riding | (any_up & (planned == _SPOT) & ~od)
        decided = choose_actions(n, od, spot, zone)
        if math.isinf(self.lag_share):
            return decided
        allowed = allowed_lag_h(b, self.lag_share)
        if self.trusted_lag_share != self.lag_share:  # wider (or narrower) where the runs fit the model
            fits = trusted(b, self.min_runs, self.spread_se)
            allowed = np.where(fits, allowed_lag_h(b, self.trusted_lag_share), allowed)
        return bounded(b, decided, zone, allowed)

    def zone_rates(
        self, b: MarketBatch, seen: _Seen | None = None
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per row and zone: rate (per hour) of losing spot, of getting it back (for a zone down now:
        this outage's, given its age), and the zone's time share with spot. ``seen``: the hours
        learned from (default: :meth:`_Seen.of` ``b``)."""
        seen = seen or _Seen.of(b)
        up_h = seen.available_h
        down_h = np.maximum(seen.observed_h[:, None] - up_h, 0.0)
        ended_up = np.maximum(seen.up_runs - b.spot_available, 0.0)
        ended_down = np.maximum(seen.up_runs - 0.5, 0.0)  # up and down runs alternate
        cycle, runs = self.prior_cycle_h, self.prior_runs
        seen_up = (up_h + 0.5 * cycle) / (seen.observed_h[:, None] + cycle)  # share of time seen with spot
        loss: FloatArray = (ended_up + runs) / (up_h + runs * cycle * seen_up)
        recovery: FloatArray = (ended_down + runs) / (down_h + runs * cycle * (1.0 - seen_up))
        share: FloatArray = recovery / (loss + recovery)
        k = self.outage_shape
        if math.isfinite(k):  # this outage's own rate, given that it has lasted its age so far
            age = np.maximum(b.streak_h, 0.0)
            recovery = np.where(b.spot_available, recovery, k / (k / recovery + age))
        return loss, recovery, share


@dataclass(frozen=True)
class _Seen:
    """The hours of the market a row learns from: the job's own, and those of the market log where
    its days agree on a daily cycle (a run under way at the job's start counts in both: one run)."""

    observed_h: FloatArray
    any_h: FloatArray
    available_h: FloatArray
    up_runs: FloatArray

    @classmethod
    def of(cls, b: MarketBatch) -> _Seen:
        log = b.market_log
        if log is None:
            return cls(b.observed_h, b.any_available_h, b.available_h, b.up_runs)
        use = log.cycle_strength > 0.0
        return cls(
            b.observed_h + np.where(use, log.observed_h, 0.0),
            b.any_available_h + np.where(use, log.any_available_h, 0.0),
            b.available_h + np.where(use[:, None], log.available_h, 0.0),
            b.up_runs + np.where(use[:, None], log.up_runs, 0.0),
        )
