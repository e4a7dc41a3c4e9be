"""plan-ahead's decisions in hand-made situations, from the context alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.policies import planner
from orchestrator.policies.context import MarketContext, ZoneHistory
from orchestrator.policies.planning import PlanAheadPolicy


def watched(hours: float, pattern: list[dict[str, bool]], tick_h: float = 0.1) -> ZoneHistory:
    """``hours`` of history repeating ``pattern`` tick by tick."""
    h = ZoneHistory.empty()
    for t in range(round(hours / tick_h)):
        h = h.updated(tick_h, pattern[t % len(pattern)])
    return h


def ctx(
    *, elapsed: float, done: float, up: dict[str, bool], history: ZoneHistory,
    market: str | None = None, zone: str | None = None, deadline: float = 60.0, total: float = 48.0,
) -> MarketContext:  # fmt: skip
    return MarketContext(
        elapsed_h=elapsed, deadline_h=deadline, work_done_h=done, work_total_h=total, changeover_h=0.2,
        tick_h=0.1, spot_price=0.9, on_demand_price=3.0, zones=list(up), spot_available=up,
        current_market=market, current_zone=zone, history=history,
    )  # fmt: skip


def decide(c: MarketContext) -> tuple[str | None, str | None]:
    """The plan's own decision (no corridor around uniform progress: tests/policies/test_guard.py)."""
    d = PlanAheadPolicy(lag_share=math.inf).decide(c)
    return d.market, d.zone


DOWN = {"a": False, "b": False}


def test_waits_while_the_slack_covers_the_downtime_to_come() -> None:
    # spot in a: 4.5 h up, 0.5 h down, again and again: about 5 h down in the 50 h left
    often = watched(10.0, [{"a": t < 45, "b": False} for t in range(50)])
    # now down with 10 h of slack: wait; with 4 h of slack: on-demand now, keeping slack for later
    assert decide(ctx(elapsed=10.0, done=8.0, up=DOWN, history=often)) == (None, None)
    assert decide(ctx(elapsed=10.0, done=2.0, up=DOWN, history=often)) == ("on-demand", None)


def test_rides_spot_and_launches_in_the_zone_with_the_longest_runs() -> None:
    hist = watched(10.0, [{"a": t % 2 == 0, "b": True} for t in range(2)])
    up = {"a": True, "b": True}
    assert decide(ctx(elapsed=10.0, done=8.0, up=up, history=hist)) == ("spot", "b")
    assert decide(ctx(elapsed=10.0, done=8.0, up=up, history=hist, market="spot", zone="a")) == ("spot", "a")


def test_stays_on_demand_for_short_spot_runs_and_leaves_for_long_ones() -> None:
    # a's runs last 0.1 h: leaving on-demand costs two changeovers for almost no spot
    short = watched(10.0, [{"a": t % 4 == 0, "b": False} for t in range(4)])
    on_od = {"market": "on-demand", "up": {"a": True, "b": False}}
    assert decide(ctx(elapsed=10.0, done=4.0, history=short, **on_od)) == ("on-demand", None)  # type: ignore[arg-type]
    long = watched(10.0, [{"a": t < 45, "b": False} for t in range(50)])
    assert decide(ctx(elapsed=10.0, done=4.0, history=long, **on_od)) == ("spot", "a")  # type: ignore[arg-type]


def test_the_prior_run_lengths_follow_the_share_of_time_with_spot() -> None:
    """Before a zone has ended many runs, the prior decides its rates: a zone seen without spot for
    10 h, coming up now, is expected to hold spot briefly and to be gone long once lost; one seen
    with spot nearly all the time the other way round (one guess for every zone made the plan try
    many short spot runs in a mostly-down zone); with many runs the zone's own lengths win. (The
    zone's rates, memoryless: the age of the outage under way enters below.)"""
    policy = PlanAheadPolicy(outage_shape=math.inf)

    def mean_runs(history: ZoneHistory, now_up: bool) -> tuple[float, float]:
        up = {"a": now_up}
        b = ctx(elapsed=history.observed_h, done=0.0, up=up, history=history.updated(0.1, up)).to_batch()
        loss, recovery, _ = policy.zone_rates(b)
        return 1.0 / float(loss[0, 0]), 1.0 / float(recovery[0, 0])

    rare_up, rare_down = mean_runs(watched(10.0, [{"a": False}]), True)
    often_up, often_down = mean_runs(watched(10.0, [{"a": True}]), False)
    assert rare_up < 1.0 < 3.0 < rare_down
    assert often_down < 1.0 < 3.0 < often_up
    # 50 h of runs of 0.3 h up and 2.7 h down: the estimates near them, not the 3 h cycle's halves
    many_up, many_down = mean_runs(watched(50.0, [{"a": t < 3} for t in range(30)]), False)
    assert 0.3 <= many_up < 0.5 and 2.5 < many_down < 3.2


def test_an_outage_is_expected_to_last_longer_the_longer_it_has_lasted() -> None:
    """A zone's recovery rate is the mean over its outages; the outage under way, still going after
    ``age`` hours, has its own: shape / (shape / rate + age). A zone that is up keeps its rates."""
    pattern = [{"a": t < 10} for t in range(20)]  # 1 h up, 1 h down; 19 h of it end up
    memoryless, aged = PlanAheadPolicy(outage_shape=math.inf), PlanAheadPolicy(outage_shape=1.0)

    def recovery(policy: PlanAheadPolicy, down_h: float) -> float:
        h = watched(19.0, pattern)
        for _ in range(round(down_h / 0.1)):
            h = h.updated(0.1, {"a": False})
        b = ctx(elapsed=h.observed_h, done=0.0, up={"a": False}, history=h).to_batch()
        return float(policy.zone_rates(b)[1][0, 0])

    for down_h in (0.5, 3.0, 8.0):
        rate = recovery(memoryless, down_h)
        assert recovery(aged, down_h) == pytest.approx(1.0 / (1.0 / rate + down_h))
    assert recovery(aged, 0.5) > 2 * recovery(aged, 3.0) > 2 * recovery(aged, 8.0)
    up = ctx(elapsed=19.0, done=0.0, up={"a": True}, history=watched(19.0, pattern)).to_batch()
    for got, want in zip(aged.zone_rates(up), memoryless.zone_rates(up), strict=True):
        assert np.array_equal(got, want)


def test_safety_net_and_no_deadline() -> None:
    hist = watched(5.0, [{"a": True, "b": True}])
    # 0.45 h of slack < two changeovers and a tick: on-demand whatever the plan says
    assert decide(ctx(elapsed=11.55, done=0.0, deadline=60.0, total=48.45, up=DOWN, history=hist)) == (
        "on-demand",
        None,
    )
    free = ctx(elapsed=1.0, done=0.0, deadline=math.inf, up={"a": False, "b": True}, history=hist)
    assert decide(free) == ("spot", "b")
    assert decide(ctx(elapsed=1.0, done=0.0, deadline=math.inf, up=DOWN, history=hist)) == (None, None)


def test_finishing_on_demand_never_stops_for_the_last_sliver_of_work() -> None:
    # 0.05 h of work left, less than half a planning step: the table must not read it as done (then
    # every action ties and the plan would stop on-demand, wait, and pay a changeover to relaunch)
    hist = watched(20.0, [{"a": t % 30 < 3, "b": False} for t in range(30)])
    for slack in (0.6, 0.9, 1.5):
        elapsed = 60.0 - slack - 0.05
        c = ctx(elapsed=elapsed, done=47.95, up=DOWN, history=hist, market="on-demand")
        assert decide(c) == ("on-demand", None), slack


def test_a_restarted_controller_decides_the_same() -> None:
    hist = watched(12.0, [{"a": t % 7 < 3, "b": t % 11 < 2} for t in range(77)])
    cases = [
        ctx(elapsed=12.0, done=d, up=up, history=hist, market=m)
        for d in (1.0, 5.0, 9.0)
        for up in (DOWN, {"a": True, "b": False})
        for m in (None, "on-demand")
    ]
    first = [decide(c) for c in cases]
    planner._CACHES.clear()  # a new process: no planning table cached
    assert [decide(c) for c in cases] == first
    assert len(set(first)) > 1


def test_leaving_on_demand_is_never_followed_by_on_demand_once_stopped() -> None:
    """A controller tells on-demand to stop; placed again (idle) up to ``stop_h`` later, with the market
    as it was, the job must not be sent back to on-demand: that pays a changeover for nothing (seen
    in CI as a flip-flop). Checked near the safety net (up to twice the stop and a changeover above
    it), over jobs (a 2 h one plans in steps of 18 to 60 s, often shorter than a stop), changeovers,
    controller passes, notice graces and histories."""
    rng = np.random.default_rng(7)
    jobs = [(52.0, 48.0, (0.05, 0.2, 0.5)), (70.0, 48.0, (0.05, 0.2, 0.5)), (2.0, 1.5, (0.02, 0.05))]
    left = short_left = 0
    for _ in range(150):
        deadline, work, changes = jobs[int(rng.integers(len(jobs)))]
        change = float(rng.choice(changes))
        tick, grace = float(rng.choice([1.0, 60.0])) / 3600, float(rng.choice([5.0, 120.0])) / 3600
        elapsed = rng.uniform(0.02, 0.75) * deadline
        slack = 2 * change + tick + rng.uniform(0.0, 2 * (grace + tick) + change)
        done = work - ((deadline - elapsed) - slack)
        up_h = rng.uniform(0.3, 1.0) * elapsed
        history = ZoneHistory(
            observed_h=elapsed, any_available_h=up_h, available_h={"a": 0.0, "b": up_h},
            up_runs={"a": 0, "b": int(rng.integers(1, 4))}, streak_h={"a": elapsed, "b": 0.5},
            last_available={"a": False, "b": True},
        )  # fmt: skip
        same = {
            "deadline_h": deadline, "work_done_h": done, "work_total_h": work, "changeover_h": change,
            "tick_h": tick, "spot_price": 0.9, "on_demand_price": 3.06, "zones": ["a", "b"],
            "spot_available": {"a": False, "b": True}, "history": history, "latency_h": tick,
            "stop_h": grace + tick,
        }  # fmt: skip
        if decide(MarketContext(elapsed_h=elapsed, current_market="on-demand", **same))[0] == "on-demand":
            continue
        left += 1
        short_left += deadline < 3
        for part in (0.25, 0.5, 1.0):
            later = MarketContext(elapsed_h=elapsed + part * (grace + tick), **same)
            assert decide(later)[0] != "on-demand", (deadline, change, tick, grace, slack, part)
    assert left > 40 and short_left > 10
