"""plan-ahead bounded by uniform progress: where its model is wrong the decisions fall back to uniform
progress's, where it is right its gains stay."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from orchestrator.catalog.offers import MarketKind
from orchestrator.policies.base import MarketPolicy
from orchestrator.policies.context import MarketBatch, MarketContext, RunSpread, ZoneHistory
from orchestrator.policies.guard import in_corridor, line_lag_h, run_spread, trusted
from orchestrator.policies.market import market_policy
from orchestrator.policies.planning import PlanAheadPolicy
from orchestrator.policies.simulator import SimJob, simulate, start_points
from orchestrator.policies.synthetic import RunFit, semi_markov
from orchestrator.policies.traces import AvailabilityTrace

TICK_H = 300.0 / 3600.0


def market(fit: RunFit, seed: int, zones: int = 1, days: float = 18.0) -> AvailabilityTrace:
    rng = np.random.default_rng(seed)
    rows = [semi_markov(fit, int(days * 24 / TICK_H), rng, TICK_H) for _ in range(zones)]
    return AvailabilityTrace(tuple(f"z{i}" for i in range(zones)), TICK_H, np.stack(rows).astype(np.int64))


# spot's runs heavy-tailed (median 0.3 h, mean 3.4 h), its outages short: most launches die within
# minutes, a few last for days. plan-ahead's model (runs of one mean length) is wrong here.
BURSTY = RunFit(math.log(0.3), 2.2, math.log(0.2), 1.0)
# runs of about one length (sigma 0.3), as the model expects
STEADY = RunFit(math.log(3.0), 0.3, math.log(2.0), 0.3)


def costs(
    policy: PlanAheadPolicy | str, trace: AvailabilityTrace, job: SimJob, starts: int = 40
) -> np.ndarray:
    p = market_policy(policy) if isinstance(policy, str) else policy
    points = start_points(trace, job, starts, 0)
    res = simulate(p, trace, job, points)
    assert res.deadline_met.all()
    cost: np.ndarray = res.cost_usd / job.on_demand_cost(trace.tick_h)
    return cost


@pytest.mark.parametrize("deadline_h", [52.0, 70.0])
def test_no_confidence_is_uniform_progress_exactly(deadline_h: float) -> None:
    trace, job = market(BURSTY, 1), SimJob(48.0, deadline_h, 0.2, 0.918, 3.06)
    bounded = costs(PlanAheadPolicy(lag_share=0.0), trace, job)
    assert np.array_equal(bounded, costs("uniform-progress", trace, job))
    assert not np.array_equal(bounded, costs(PlanAheadPolicy(lag_share=math.inf), trace, job))


def test_where_the_model_is_wrong_the_default_keeps_to_uniform_progress() -> None:
    trace, job = market(BURSTY, 1), SimJob(48.0, 52.0, 0.2, 0.918, 3.06)
    up, free = costs("uniform-progress", trace, job).mean(), costs(PlanAheadPolicy(), trace, job).mean()
    unbounded = costs(PlanAheadPolicy(lag_share=math.inf), trace, job).mean()
    assert unbounded > up + 0.03  # the model alone loses to uniform progress here
    assert free <= up + 0.005


def test_where_the_model_is_right_the_gains_stay() -> None:
    trace, job = market(STEADY, 2), SimJob(48.0, 52.0, 0.2, 0.918, 3.06)
    up = costs("uniform-progress", trace, job).mean()
    unbounded = costs(PlanAheadPolicy(lag_share=math.inf), trace, job).mean()
    default = costs(PlanAheadPolicy(), trace, job).mean()
    assert unbounded < up - 0.03
    assert default - unbounded <= 0.25 * (up - unbounded)
    assert default < min(up, costs("greedy", trace, job).mean()) - 0.1


def _ctx(elapsed: float, done: float, market: MarketKind | None) -> MarketContext:
    return MarketContext(
        elapsed_h=elapsed, deadline_h=60.0, work_done_h=done, work_total_h=48.0, changeover_h=0.5,
        tick_h=0.1, spot_price=0.9, on_demand_price=3.0, zones=["a"], spot_available={"a": False},
        current_market=market,
    )  # fmt: skip


def test_the_corridor_around_the_line() -> None:
    # line at 30 h: 24 h of work; allowed lag 3 h of work either side
    allowed = np.array([3.0])
    assert line_lag_h(_ctx(30.0, 20.0, None).to_batch())[0] == pytest.approx(4.0)
    assert not in_corridor(_ctx(30.0, 20.0, None).to_batch(), allowed)[0]  # 4 h behind
    assert in_corridor(_ctx(30.0, 22.0, None).to_batch(), allowed)[0]  # 2 h behind
    assert in_corridor(_ctx(30.0, 26.5, None).to_batch(), allowed)[0]  # 2.5 h ahead
    assert not in_corridor(_ctx(30.0, 27.5, None).to_batch(), allowed)[0]  # 3.5 h ahead
    # on on-demand the edge behind is 2 changeovers of the line (0.8 h of work) nearer: no flapping
    assert not in_corridor(_ctx(30.0, 21.5, MarketKind.ON_DEMAND).to_batch(), allowed)[0]
    assert in_corridor(_ctx(30.0, 22.5, MarketKind.ON_DEMAND).to_batch(), allowed)[0]
    assert not in_corridor(_ctx(30.0, 24.0, None).to_batch(), np.array([0.0]))[0]


def test_outside_the_corridor_uniform_progress_decides() -> None:
    """Far behind the line with spot down, uniform progress runs on-demand, whatever the plan says."""
    policy = PlanAheadPolicy(lag_share=0.1)  # 1.2 h of the 12 h slack
    behind = _ctx(30.0, 20.0, None)  # 4 h behind, 18 h of slack left... 10 h: the plan would wait
    assert PlanAheadPolicy(lag_share=math.inf).decide(behind).market is None
    assert policy.decide(behind).market == "on-demand"


def test_leaving_on_demand_inside_the_corridor_never_returns_once_stopped() -> None:
    """The default leaves on-demand only where, stopped and idle ``stop_h`` later with the market as it
    was, it is not sent straight back (a changeover for nothing): the corridor's edge on on-demand
    lies the catch-up and the stop nearer the line."""
    rng = np.random.default_rng(3)
    policy, left = PlanAheadPolicy(), 0
    for _ in range(300):
        change = float(rng.choice([0.05, 0.2, 0.5]))
        tick, grace = float(rng.choice([10.0, 60.0])) / 3600, float(rng.choice([5.0, 120.0, 900.0])) / 3600
        elapsed = float(rng.uniform(1.0, 40.0))
        lag = float(rng.uniform(-1.5, 1.5))  # hours of work off the line (the corridor: 1 h)
        up = bool(rng.random() < 0.5)
        same: dict[str, Any] = {
            "deadline_h": 52.0, "work_done_h": 48.0 * elapsed / 52.0 - lag, "work_total_h": 48.0,
            "changeover_h": change, "tick_h": tick, "spot_price": 0.9, "on_demand_price": 3.06,
            "zones": ["a"], "spot_available": {"a": up}, "latency_h": tick, "stop_h": grace + tick,
            "history": ZoneHistory(observed_h=elapsed, any_available_h=0.8 * elapsed,
                                   available_h={"a": 0.8 * elapsed}, up_runs={"a": 3},
                                   streak_h={"a": 0.3}, last_available={"a": up}),
        }  # fmt: skip
        if (
            policy.decide(
                MarketContext(elapsed_h=elapsed, current_market=MarketKind.ON_DEMAND, **same)
            ).market
            == "on-demand"
        ):
            continue
        left += 1
        later = MarketContext(elapsed_h=elapsed + grace + tick, **same)
        assert policy.decide(later).market != "on-demand", (change, tick, grace, elapsed, lag, up)
    assert left > 30


def _runs_seen(lengths: list[float], elapsed: float = 30.0) -> ZoneHistory:
    """A history of zone a whose ended runs of spot had ``lengths`` (hours)."""
    up = 0.5 * elapsed
    return ZoneHistory(
        observed_h=elapsed, any_available_h=up, available_h={"a": up}, up_runs={"a": len(lengths)},
        streak_h={"a": 0.5}, last_available={"a": False}, ended_runs={"a": len(lengths)},
        ended_run_h={"a": sum(lengths)}, ended_run_h2={"a": sum(x * x for x in lengths)},
    )  # fmt: skip


def _trusted(history: ZoneHistory) -> bool:
    ctx = _ctx(30.0, 24.0, None)
    return bool(trusted(MarketContext(**{**ctx.__dict__, "history": history}).to_batch(), 20.0, 2.0)[0])


def test_the_plan_is_trusted_where_its_runs_look_exponential() -> None:
    """Enough ended runs whose spread (mean of (length / mean)^2) is within two standard errors of
    the exponential's 2: trusted; heavy-tailed runs, or too few, are not."""
    assert _trusted(_runs_seen([1.0] * 30))  # runs of one length: spread 1
    assert not _trusted(_runs_seen([1.0] * 10))  # too few to tell
    bursty = [0.1] * 27 + [10.0] * 3  # most runs die at once, a few last long: spread 8.4
    assert not _trusted(_runs_seen(bursty))
    assert not _trusted(_runs_seen([]))
    # a spread of 3.47 passes over 20 runs (limit 4), not over 200 (limit 2.63)
    moderate = [0.1] * 15 + [4.0] * 5  # mean 1.075, mean square 4.0075
    assert _trusted(_runs_seen(moderate))
    assert not _trusted(_runs_seen(moderate * 10))
    seen = MarketContext(**{**_ctx(1.0, 1.0, None).__dict__, "history": _runs_seen(moderate)})
    spread, runs = run_spread(seen.to_batch())
    assert runs[0] == 20 and spread[0] == pytest.approx(4.0075 / 1.075**2)


def test_the_corridor_opens_where_the_plan_is_trusted() -> None:
    """4 h behind the line (the default corridor: 3 h), spot down: a plan trusted by its zone's runs
    decides as the plan alone (waits); on heavy-tailed runs uniform progress decides (on-demand)."""
    policy = PlanAheadPolicy(trusted_lag_share=math.inf)
    behind = _ctx(30.0, 20.0, None)
    steady = MarketContext(**{**behind.__dict__, "history": _runs_seen([1.0] * 30)})
    bursty = MarketContext(**{**behind.__dict__, "history": _runs_seen([0.1] * 27 + [10.0] * 3)})
    assert PlanAheadPolicy(lag_share=math.inf).decide(steady).market is None
    assert policy.decide(steady).market is None
    assert policy.decide(bursty).market == "on-demand"
    assert PlanAheadPolicy().decide(steady).market is None  # the default trusts such runs
    assert PlanAheadPolicy(trusted_lag_share=0.25).decide(steady).market == "on-demand"


class _Watcher(MarketPolicy):
    """Waits, and keeps each tick's spread of ended runs as the simulator gives it."""

    name = "watcher"
    description = "records the ended runs"

    def __init__(self) -> None:
        self.seen: list[RunSpread] = []

    def decide_batch(self, b: MarketBatch) -> tuple[np.ndarray, np.ndarray]:
        assert b.spread is not None
        self.seen.append(RunSpread(b.spread.runs.copy(), b.spread.run_h.copy(), b.spread.run_h2.copy()))
        n = b.elapsed_h.shape[0]
        return np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)


def test_the_simulator_keeps_the_spread_a_zone_history_keeps() -> None:
    """The simulator's ended runs, tick by tick, are those of a ZoneHistory watching the same ticks
    (what the controller keeps), so the corridor opens at the same tick in both."""
    trace, job = market(BURSTY, 4, zones=2, days=4.0), SimJob(8.0, 12.0, 0.2, 0.918, 3.06)
    watcher = _Watcher()
    starts = np.array([5, 300])
    simulate(watcher, trace, job, starts, market_log_h=0.0)
    for row, start in enumerate(starts):
        h = ZoneHistory.empty()
        for tau, spread in enumerate(watcher.seen):
            up = trace.counts[:, start + tau] >= 1
            h = h.updated(TICK_H, {zone: bool(u) for zone, u in zip(trace.zones, up, strict=True)})
            for z, zone in enumerate(trace.zones):
                assert spread.runs[row, z] == h.ended_runs.get(zone, 0)
                assert spread.run_h[row, z] == pytest.approx(h.ended_run_h.get(zone, 0.0))
                assert spread.run_h2[row, z] == pytest.approx(h.ended_run_h2.get(zone, 0.0))
        assert sum(h.ended_runs.values()) > 5
