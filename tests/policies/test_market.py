"""Market policy decisions on small hand-made situations where the right answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.catalog.offers import MarketKind
from orchestrator.errors import UserError
from orchestrator.policies.context import MarketContext, ZoneHistory
from orchestrator.policies.market import POLICIES, market_policy
from orchestrator.policies.simulator import SimJob, simulate
from orchestrator.policies.traces import AvailabilityTrace


def ctx(
    *,
    elapsed: float = 0.0,
    done: float = 0.0,
    deadline: float = 20.0,
    total: float = 10.0,
    up: dict[str, bool] | None = None,
    market: str | None = None,
    zone: str | None = None,
    history: ZoneHistory | None = None,
) -> MarketContext:
    up = up if up is not None else {"a": False, "b": False}
    return MarketContext(
        elapsed_h=elapsed,
        deadline_h=deadline,
        work_done_h=done,
        work_total_h=total,
        changeover_h=0.2,
        tick_h=0.1,
        spot_price=1.0,
        on_demand_price=3.0,
        zones=list(up),
        spot_available=up,
        current_market=None if market is None else MarketKind(market),
        current_zone=zone,
        history=history or ZoneHistory.empty(),
    )


def decide(name: str, c: MarketContext) -> tuple[str | None, str | None]:
    d = market_policy(name).decide(c)
    return d.market, d.zone


def test_on_demand_always() -> None:
    assert decide("on-demand", ctx(up={"a": True})) == ("on-demand", None)


def test_greedy_waits_with_slack_and_takes_home_spot() -> None:
    assert decide("greedy", ctx()) == (None, None)
    assert decide("greedy", ctx(up={"a": True, "b": True})) == ("spot", "a")
    # only zone b is up: greedy stays with its home zone and waits
    assert decide("greedy", ctx(up={"a": False, "b": True})) == (None, None)


def test_greedy_safety_net_goes_on_demand_for_good() -> None:
    # 10 h of work left, 10.45 h of time left: slack 0.45 < 2 * 0.2 + 0.1
    late = ctx(elapsed=9.55, done=0.0, up={"a": True, "b": True})
    assert decide("greedy", late) == ("on-demand", None)
    assert decide("greedy", ctx(elapsed=9.55, market="on-demand", up={"a": True})) == ("on-demand", None)
    # already riding spot in an available zone: keep it (a preemption still leaves time for on-demand)
    riding = ctx(elapsed=9.55, market="spot", zone="a", up={"a": True, "b": False})
    assert decide("greedy", riding) == ("spot", "a")


def test_uniform_progress_follows_the_line() -> None:
    # line: 10 h of work over 20 h -> 0.5 h of work per hour; at 4 h, 1 h done is behind
    assert decide("uniform-progress", ctx(elapsed=4.0, done=1.0)) == ("on-demand", None)
    assert decide("uniform-progress", ctx(elapsed=4.0, done=3.0)) == (None, None)
    assert decide("uniform-progress", ctx(elapsed=4.0, done=1.0, up={"a": True, "b": False})) == ("spot", "a")
    # hysteresis: on on-demand at exactly the line, stay until ahead of ep(t + 2d)
    on_line = ctx(elapsed=4.0, done=2.0, market="on-demand", up={"a": True, "b": False})
    assert decide("uniform-progress", on_line) == ("on-demand", None)
    ahead = ctx(elapsed=4.0, done=2.3, market="on-demand", up={"a": True, "b": False})
    assert decide("uniform-progress", ahead) == ("spot", "a")


def test_eager_failover_moves_zone_on_preemption() -> None:
    lost = ctx(market="spot", zone="a", up={"a": False, "b": True})
    assert decide("eager-failover", lost) == ("spot", "b")
    assert decide("eager-failover", ctx(market="spot", zone="b", up={"a": True, "b": True})) == ("spot", "b")
    assert decide("eager-failover", ctx()) == (None, None)


def test_reserve_slack_prefers_zone_with_long_availability_runs() -> None:
    hist = ZoneHistory.empty()
    for t in range(40):  # zone a flickers every tick, zone b stays up
        hist = hist.updated(0.1, {"a": t % 2 == 0, "b": True})
    assert decide("reserve-slack", ctx(elapsed=4.0, done=4.0, up={"a": True, "b": True}, history=hist)) == (
        "spot",
        "b",
    )
    # riding spot in a: never move while it stays up
    riding = ctx(elapsed=4.0, done=4.0, market="spot", zone="a", up={"a": True, "b": True}, history=hist)
    assert decide("reserve-slack", riding) == ("spot", "a")


def test_reserve_slack_waits_with_spare_slack_and_pays_on_demand_below_reserve() -> None:
    hist = ZoneHistory.empty()
    for _ in range(100):  # 10 h watched, spot always up so far
        hist = hist.updated(0.1, {"a": True, "b": True})
    down = {"a": False, "b": False}
    # 10 h left, 2 h of work left: lots of slack -> wait
    assert decide("reserve-slack", ctx(elapsed=10.0, done=8.0, up=down, history=hist)) == (None, None)
    # 10 h left, 9.5 h of work left: slack 0.5 h is below the safety net -> on-demand
    assert decide("reserve-slack", ctx(elapsed=10.0, done=0.5, up=down, history=hist)) == ("on-demand", None)
    never = ZoneHistory.empty()
    for _ in range(100):
        never = never.updated(0.1, down)
    # spot never seen: expected downtime ~ all the time left > 4 h of slack -> on-demand now
    assert decide("reserve-slack", ctx(elapsed=10.0, done=4.0, up=down, history=never)) == ("on-demand", None)


def test_history_counts_runs_and_streaks() -> None:
    h = ZoneHistory.empty()
    for up in (True, True, False, True):
        h = h.updated(0.5, {"a": up})
    assert h.observed_h == 2.0 and h.available_h["a"] == 1.5
    assert h.up_runs["a"] == 2 and h.streak_h["a"] == 0.5
    assert h.any_available_h == 1.5


def test_history_keeps_the_spread_of_ended_runs() -> None:
    """Only ended runs of availability count (the run under way does not), with their lengths and
    squared lengths, per zone."""
    h = ZoneHistory.empty()
    a = (True, True, True, False, True, False, False, True, True)
    b = (False, True, False, True, True, True, True, True, True)
    for up_a, up_b in zip(a, b, strict=True):
        h = h.updated(0.5, {"a": up_a, "b": up_b})
    assert h.ended_runs == {"a": 2, "b": 1}
    assert h.ended_run_h == pytest.approx({"a": 1.5 + 0.5, "b": 0.5})
    assert h.ended_run_h2 == pytest.approx({"a": 1.5**2 + 0.5**2, "b": 0.25})


def test_unknown_policy_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown market policy"):
        market_policy("nope")


@pytest.mark.parametrize("name", list(POLICIES))
def test_policies_meet_deadline_in_simulation(name: str) -> None:
    rng = np.random.default_rng(3)
    counts = (rng.random((2, 400)) < 0.6).astype(np.int64)
    trace = AvailabilityTrace(("a", "b"), 0.25, counts)
    job = SimJob(10.0, 14.0, 0.5, 1.0, 3.0)
    res = simulate(market_policy(name), trace, job, np.arange(0, 300, 10))
    assert res.deadline_met.all()
    assert (res.cost_usd <= job.on_demand_cost(0.25) * 1.6).all()


def test_simulator_costs_match_simple_cases() -> None:
    trace = AvailabilityTrace(("a",), 0.5, np.ones((1, 100), dtype=np.int64))
    job = SimJob(10.2, 20.0, 0.4, 1.0, 3.0)  # changeover rounds up to 1 tick; work ends mid-tick
    od = simulate(market_policy("on-demand"), trace, job, np.array([0, 5]))
    assert od.cost_usd == pytest.approx([3.0 * (0.5 + 10.2)] * 2)
    greedy = simulate(market_policy("greedy"), trace, job, np.array([0]))
    assert greedy.cost_usd[0] == pytest.approx(0.5 + 10.2)
    assert greedy.spot_h[0] == pytest.approx(10.7) and greedy.preemptions[0] == 0
