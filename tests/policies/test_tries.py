"""The cost of a try: where a zone's spot is seen only by launching there (Kubernetes), a failed try
costs the shortage timeout, and the market policy spends slack on tries accordingly."""

from __future__ import annotations

import math

import pytest

from orchestrator.catalog.offers import MarketKind
from orchestrator.policies.context import MarketContext
from orchestrator.policies.market import market_policy
from orchestrator.policies.tries import affordable_tries

CHANGEOVER_H, TICK_H = 0.2, 10.0 / 3600.0
SAFETY_H = 2.0 * CHANGEOVER_H + TICK_H
TRY_H = 600.0 / 3600.0  # spotShortageAfterSeconds' default
ZONES = [f"zone-{i}" for i in range(8)]


def test_a_try_costs_slack_only_where_capacity_is_unseen() -> None:
    assert affordable_tries(36 / 60, SAFETY_H, TRY_H) == 1  # 36 min: 24 min of net, one 10-min try
    assert affordable_tries(SAFETY_H + 2.5 * TRY_H, SAFETY_H, TRY_H) == 2
    assert affordable_tries(SAFETY_H + 0.5 * TRY_H, SAFETY_H, TRY_H) == 0
    assert affordable_tries(SAFETY_H - 1.0, SAFETY_H, TRY_H) == 0  # under the net: none
    assert affordable_tries(36 / 60, SAFETY_H, 0.0) == math.inf  # capacity seen before launching


def _tries_until_on_demand(policy: str, slack_h: float, try_cost_h: float) -> tuple[int, float, str | None]:
    """Every zone looks up (Kubernetes cannot see capacity) and every try fails: the job loses
    ``try_cost_h`` per try, the zone is then known short. (tries, slack left, last decision)."""
    short: set[str] = set()
    elapsed, total, deadline = 0.0, 10.0, 10.0 + slack_h
    for _ in range(len(ZONES) + 1):
        d = market_policy(policy).decide(
            MarketContext(
                elapsed_h=elapsed,
                deadline_h=deadline,
                work_done_h=0.0,
                work_total_h=total,
                changeover_h=CHANGEOVER_H,
                tick_h=TICK_H,
                spot_price=0.9,
                on_demand_price=3.0,
                zones=ZONES,
                spot_available={z: z not in short for z in ZONES},
                try_cost_h=try_cost_h,
            )
        )
        if d.market != "spot" or d.zone is None:
            return len(short), deadline - elapsed - total, d.market
        short.add(d.zone)
        elapsed += try_cost_h
    return len(short), deadline - elapsed - total, "spot"


@pytest.mark.parametrize("policy", ["plan-ahead"])
def test_a_job_with_36_minutes_of_slack_never_plans_eight_tries(policy: str) -> None:
    tries, slack_left, last = _tries_until_on_demand(policy, 36 / 60, TRY_H)
    assert tries <= affordable_tries(36 / 60, SAFETY_H, TRY_H) == 1
    assert last == "on-demand"
    assert slack_left >= SAFETY_H - 1e-9  # on-demand from there still meets the deadline
    # without the try's cost the same policy tries every zone the slack allows, even past the net
    blind, blind_slack, _ = _tries_until_on_demand(policy, 36 / 60, 0.0)
    assert blind > tries
    assert blind_slack + 1e-9 < SAFETY_H + TRY_H or blind == len(ZONES)


@pytest.mark.parametrize("slack_h", [0.5, 1.0, 2.0, 4.0])
def test_tries_end_above_the_safety_net_whatever_the_slack(slack_h: float) -> None:
    tries, slack_left, last = _tries_until_on_demand("plan-ahead", slack_h, TRY_H)
    assert tries <= affordable_tries(slack_h, SAFETY_H, TRY_H)
    assert slack_left >= SAFETY_H - 1e-9
    assert last in ("on-demand", None)


def test_a_ride_is_never_cut_short_by_the_try_cost() -> None:
    """A job already riding spot that it found keeps it: only a new launch is a try."""
    c = MarketContext(
        elapsed_h=0.0, deadline_h=10.5, work_done_h=0.0, work_total_h=10.0, changeover_h=CHANGEOVER_H,
        tick_h=TICK_H, spot_price=0.9, on_demand_price=3.0, zones=ZONES[:1], spot_available={ZONES[0]: True},
        current_market=MarketKind.SPOT, current_zone=ZONES[0], try_cost_h=TRY_H,
    )  # fmt: skip
    assert market_policy("plan-ahead").decide(c).market == "spot"


def _on_demand_ctx(current: MarketKind | None, slack_h: float, tick_h: float) -> MarketContext:
    """One hour of work, 1-minute changeovers, a failed try costs 10 minutes; both zones look up
    (their shortage forgotten), the job ``slack_h`` from its deadline 35 minutes into on-demand."""
    elapsed, total = 65.0 / 60.0, 1.0
    return MarketContext(
        elapsed_h=elapsed, deadline_h=1.6, work_done_h=total - (1.6 - elapsed - slack_h), work_total_h=total,
        changeover_h=1.0 / 60.0, tick_h=tick_h, spot_price=20.0, on_demand_price=98.0, zones=ZONES[:2],
        spot_available=dict.fromkeys(ZONES[:2], True), current_market=current, latency_h=tick_h,
        stop_h=45.0 / 3600.0 + tick_h, try_cost_h=TRY_H,
    )  # fmt: skip


@pytest.mark.parametrize("policy", ["plan-ahead", "uniform-progress", "reserve-slack", "eager-failover"])
@pytest.mark.parametrize("tick_h", [0.0, 5.0 / 60.0])
@pytest.mark.parametrize("slack_min", [3.0, 4.9, 8.0, 12.0])
def test_on_demand_is_never_left_for_what_the_stopped_job_may_not_try(
    policy: str, tick_h: float, slack_min: float
) -> None:
    """Slack under a try's cost: the stopped job may not try spot and would go straight back to
    on-demand, so leaving on-demand (to wait, or for spot) would only throw work away at every pass."""
    idle = market_policy(policy).decide(_on_demand_ctx(None, slack_min / 60.0, tick_h))
    if idle.market is MarketKind.ON_DEMAND:
        on_od = market_policy(policy).decide(_on_demand_ctx(MarketKind.ON_DEMAND, slack_min / 60.0, tick_h))
        assert on_od.market is MarketKind.ON_DEMAND, (idle, on_od)
