"""Market and zone policies: spot, on-demand or wait, and in which zone.

Every policy implements :meth:`MarketPolicy.decide_batch` on a :class:`MarketBatch`; the controller
calls :meth:`MarketPolicy.decide` with one :class:`MarketContext`. Policies keep no state between
calls: what they need to remember is in the context (current market, history), so a restarted
controller decides the same way.

All policies but ``on-demand`` share a deadline safety net: when the slack (time left minus work
left) falls under two changeovers plus one tick, run on-demand; on-demand keeps the slack constant,
so the job then stays there to the end.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from orchestrator.errors import UserError
from orchestrator.policies.base import MarketPolicy as MarketPolicy  # re-exported here
from orchestrator.policies.base import choose_actions
from orchestrator.policies.context import Action, FloatArray, IntArray, MarketBatch
from orchestrator.policies.planning import PlanAheadPolicy

_ON_DEMAND = int(Action.ON_DEMAND)  # a plain int in the hot paths


class OnDemandPolicy(MarketPolicy):
    name = "on-demand"
    description = "always on-demand: never preempted, the most expensive"

    def decide_batch(self, b: MarketBatch) -> tuple[IntArray, IntArray]:
        n = b.elapsed_h.shape[0]
        return np.full(n, _ON_DEMAND, dtype=np.int64), np.full(n, -1, dtype=np.int64)


class GreedyPolicy(MarketPolicy):
    """Spot in the first (home) zone whenever it has capacity, wait otherwise; on-demand for good once
    the slack no longer covers two changeovers."""

    name = "greedy"
    description = "spot in the home zone when available, else wait; on-demand for good at the last moment"

    def decide_batch(self, b: MarketBatch) -> tuple[IntArray, IntArray]:
        n = b.elapsed_h.shape[0]
        home_up = b.spot_available[:, 0]
        riding = b.on_spot_and_up()
        short = b.slack_h < b.safety_h
        od = (b.market == _ON_DEMAND) | (short & ~riding)
        return choose_actions(n, od, home_up & ~od, np.zeros(n, dtype=np.int64))


class EagerFailoverPolicy(MarketPolicy):
    """SkyPilot's default recovery: on losing spot, relaunch spot in the first zone (in the listed
    order) that has capacity, else wait; with the same deadline safety net as greedy."""

    name = "eager-failover"
    description = "on preemption move to another zone with spot, else wait; safety net as greedy"

    def decide_batch(self, b: MarketBatch) -> tuple[IntArray, IntArray]:
        n = b.elapsed_h.shape[0]
        riding = b.on_spot_and_up()
        first_up = np.argmax(b.spot_available, axis=1)
        any_up = b.spot_available.any(axis=1)
        zone = np.where(riding, b.zone, first_up)
        short = b.slack_h < b.safety_h
        od = (b.market == _ON_DEMAND) | (short & ~riding)
        return choose_actions(n, od, any_up & ~od, zone)


class UniformProgressPolicy(MarketPolicy):
    """Uniform Progress ("Can't Be Late", NSDI'24), single (home) zone.

    Expected progress ep(t) = work_total * t / deadline. Rules: take spot whenever it is available
    and stay on it until preempted; when idle and behind ep(t), go on-demand; once on on-demand stay
    there until progress reaches ep(t + 2 changeovers) (hysteresis); safety net as greedy.
    """

    name = "uniform-progress"
    description = "Can't Be Late's uniform progress: on-demand only when behind the straight line"

    def decide_batch(self, b: MarketBatch) -> tuple[IntArray, IntArray]:
        n = b.elapsed_h.shape[0]
        rate = b.work_total_h / b.deadline_h
        behind = b.work_done_h < rate * b.elapsed_h
        catching_up = (b.market == _ON_DEMAND) & (b.work_done_h < rate * (b.elapsed_h + 2.0 * b.changeover_h))
        riding = b.on_spot_and_up()
        home_up = b.spot_available[:, 0]
        short = b.slack_h < b.safety_h
        committed = (b.market == _ON_DEMAND) & short
        od = committed | catching_up | (short & ~riding) | (behind & ~home_up & ~riding)
        return choose_actions(n, od, home_up & ~od, np.zeros(n, dtype=np.int64))


class ReserveSlackPolicy(MarketPolicy):
    """Multi-zone: spend slack only on downtime you cannot expect to avoid.

    * Zone: stay in the current spot zone while it has capacity; otherwise launch in the available
      zone with the longest mean run of availability seen so far (smoothed by a prior).
    * Reserve: the slack to keep is the expected remaining downtime, ``(1 - p) * time_left``, where p
      is the smoothed fraction of time some zone had spot so far, plus the safety net. While spot is
      down and slack is under the reserve (by more than the two changeovers an on-demand detour
      costs), run on-demand now (on-demand will be needed anyway, and
      now it does not displace spot later); above the reserve, wait for free.
    * Leave on-demand for spot only when the slack still covers the changeover and the safety net,
      and the zone's mean availability run pays back the changeovers; leave it for waiting only when
      the slack exceeds the reserve by two changeovers (hysteresis).
    """

    name = "reserve-slack"
    description = "multi-zone, keeps slack for the expected downtime, never the future"

    prior_fraction: ClassVar[float] = 0.5
    prior_h: ClassVar[float] = 6.0
    prior_run_h: ClassVar[float] = 1.0
    deficit_changeovers: ClassVar[float] = 2.0

    def decide_batch(self, b: MarketBatch) -> tuple[IntArray, IntArray]:
        n = b.elapsed_h.shape[0]
        rows = np.arange(n)
        c, po, ps = b.changeover_h, b.on_demand_price, b.spot_price
        slack, time_left = b.slack_h, np.maximum(b.time_left_h, 0.0)
        p_any = (b.any_available_h + self.prior_fraction * self.prior_h) / (b.observed_h + self.prior_h)
        reserve = (1.0 - p_any) * time_left + b.safety_h

        mean_run = self._mean_run_h(b)
        score = np.where(b.spot_available, mean_run, -1.0)
        best = np.argmax(score, axis=1)
        any_up = b.spot_available.any(axis=1)
        riding = b.on_spot_and_up()
        zone = np.where(riding, b.zone, best)

        on_od = b.market == _ON_DEMAND
        short = slack < b.safety_h
        # switching on-demand -> spot costs a spot changeover now and, at the end of the run, an
        # on-demand one; the run must save more than that
        pays_back = mean_run[rows, best] * (po - ps) > c * (ps + 2.0 * po)
        leave_od_for_spot = any_up & (slack >= b.safety_h + c) & pays_back
        leave_od_for_wait = ~any_up & (slack > reserve + 2.0 * c)
        stay_od = on_od & ~leave_od_for_spot & ~leave_od_for_wait
        behind_reserve = slack < reserve - self.deficit_changeovers * c
        idle_needs_od = ~on_od & ~riding & (short | (~any_up & behind_reserve))
        od = (on_od & short) | stay_od | idle_needs_od
        spot = (riding | any_up) & ~od
        return choose_actions(n, od, spot, zone)

    def _mean_run_h(self, b: MarketBatch) -> FloatArray:
        """Mean length of an availability run per zone, with a prior of one run of prior_run_h."""
        mean: FloatArray = (b.available_h + self.prior_run_h) / (b.up_runs + 1.0)
        return mean


POLICIES: dict[str, type[MarketPolicy]] = {
    cls.name: cls
    for cls in (
        OnDemandPolicy,
        GreedyPolicy,
        UniformProgressPolicy,
        EagerFailoverPolicy,
        ReserveSlackPolicy,
        PlanAheadPolicy,
    )
}
DEFAULT_POLICY = PlanAheadPolicy.name


def market_policy(name: str) -> MarketPolicy:
    """The policy called ``name`` (see :data:`POLICIES`)."""
    try:
        return POLICIES[name]()
    except KeyError:
        raise UserError(
            f"unknown market policy '{name}'", f"use one of {', '.join(POLICIES)} (or 'all')"
        ) from None
