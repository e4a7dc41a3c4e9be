"""Leave-one-set-out on a reduced grid, and the synthetic traces it runs on.

The issue's aim (never more than 0.005 of the on-demand cost above the best baseline in any row) is
checked on held-out data over the whole grid (see docs/policies.md). On this reduced grid every policy
meets every deadline, and the default (plan-ahead), scored on sets held out from its choice, is never
clearly (by two standard errors) more than 0.005 of the on-demand cost above the best baseline, where
reserve-slack is above it in several rows (eight).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.policies import synthetic
from orchestrator.policies.market import DEFAULT_POLICY, ReserveSlackPolicy, market_policy
from orchestrator.policies.planning import PlanAheadPolicy
from orchestrator.policies.simulator import simulate, start_points
from orchestrator.policies.validation import (
    BASELINES,
    SETTINGS,
    JobSetting,
    Row,
    evaluate_rows,
    leave_one_set_out,
    summarise,
)

# log-normal run fits like those of the shared AWS traces: a zone with spot 30 % and one 75 % of the time
FITS = [
    synthetic.RunFit(up_mu=-0.5, up_sigma=1.2, down_mu=0.3, down_sigma=1.3),
    synthetic.RunFit(up_mu=0.3, up_sigma=1.7, down_mu=-0.6, down_sigma=1.0),
]


def test_held_out_rows_on_a_reduced_grid() -> None:
    sets = {
        regime: [synthetic.trace_set(regime, FITS, seed=3, days=5.0, tick_h=0.1)[i] for i in (0, 3)]
        for regime in ("fitted", "long-outages", "fail-together")
    }
    # the default (plan-ahead), chosen on the other sets, against reserve-slack
    assert PlanAheadPolicy.name == DEFAULT_POLICY
    old = ReserveSlackPolicy.name
    policies = {name: market_policy(name) for name in (*BASELINES, old, DEFAULT_POLICY)}
    settings = [SETTINGS[0], SETTINGS[2], JobSetting(2.0, 0.5, 0.2)]
    rows = evaluate_rows(sets, policies, settings, starts=12, seed=1)
    folds = leave_one_set_out(rows, [DEFAULT_POLICY])
    assert {f.trace_set for f in folds} == set(sets)
    held = [(r, f.chosen) for f in folds for r in f.rows]
    assert len(held) == 18
    for r in rows:
        assert all(met == 1.0 for met in r.met.values()), (r.group, r.setting.label, r.met)
    planned = summarise(held)
    reserve = summarise([(r, old) for r, _ in held])
    # two rows are above the tolerance here, each within two standard errors of it at 12 starts:
    # fitted zone 1 at 2x (+0.018 +- 0.012; the plan alone -0.004, the corridor fixed at 0.25 of the
    # slack +0.005) and fail-together, 3 zones, 2x (+0.008 +- 0.004; fixed corridor +0.022)
    assert planned.min_met == 1.0 and planned.clearly_above == 0 and planned.above_tolerance <= 2, planned
    assert reserve.above_tolerance > planned.above_tolerance
    assert planned.mean_share > reserve.mean_share


def test_synthetic_traces_are_seeded_and_show_their_regime() -> None:
    a = synthetic.zones_for("fail-together", FITS, 6, 10.0, seed=5)
    assert np.array_equal(a.counts, synthetic.zones_for("fail-together", FITS, 6, 10.0, seed=5).counts)
    assert not np.array_equal(a.counts, synthetic.zones_for("fail-together", FITS, 6, 10.0, seed=6).counts)
    # zones failing together: often all down at once, far more than independent zones would be
    up = a.counts.astype(bool)
    all_down = float(np.mean(~up.any(axis=0)))
    independent = float(np.prod(1.0 - up.mean(axis=1)))
    assert all_down > 3 * independent
    outages = synthetic.zones_for("long-outages", FITS, 1, 20.0, seed=5).counts[0].astype(bool)
    _, downs = synthetic.runs(outages)
    assert downs.max() * synthetic.TICK_H >= 12.0


def test_fit_recovers_run_lengths() -> None:
    rng = np.random.default_rng(0)
    fit = synthetic.RunFit(math.log(2.0), 0.5, math.log(0.5), 0.5)
    up = synthetic.semi_markov(fit, 40_000, rng, synthetic.TICK_H)
    got = synthetic.fit_zone(up, synthetic.TICK_H)
    assert got.up_mu == pytest.approx(math.log(2.0), abs=0.1)
    assert got.down_mu == pytest.approx(math.log(0.5), abs=0.1)


def test_a_rows_regret_carries_its_standard_error() -> None:
    trace = synthetic.zones_for("fitted", FITS, 1, 5.0, seed=4, tick_h=0.1)
    setting = JobSetting(1.25, 0.5, 0.5)
    names = (*BASELINES, DEFAULT_POLICY)
    policies = {name: market_policy(name) for name in names}
    (row,) = evaluate_rows({"fitted": [("zone", trace)]}, policies, [setting], starts=10, seed=2)
    # the same paired difference, start point by start point, computed here
    job = setting.job()
    points = start_points(trace, job, 10, 2)
    od = job.on_demand_cost(trace.tick_h)
    costs = {name: simulate(policies[name], trace, job, points).cost_usd / od for name in names}
    best = min(BASELINES, key=lambda name: float(np.mean(costs[name])))
    diff = costs[DEFAULT_POLICY] - costs[best]
    assert row.regret_se[best] == 0.0
    assert row.regret(DEFAULT_POLICY) == pytest.approx(float(np.mean(diff)))
    assert row.regret_se[DEFAULT_POLICY] == pytest.approx(float(np.std(diff, ddof=1)) / math.sqrt(10))
    assert row.regret_se[DEFAULT_POLICY] > 0.0


def test_clearly_above_needs_the_regret_beyond_two_standard_errors() -> None:
    def row(regret: float, se: float) -> Row:
        cost = {"greedy": 0.8, "uniform-progress": 0.9, "eager-failover": 0.9, "p": 0.8 + regret}
        return Row("s", "g", SETTINGS[0], cost, dict.fromkeys(cost, 1.0), 0.6, {"p": se})

    assert row(0.02, 0.004).clearly_above("p")
    assert not row(0.02, 0.008).clearly_above("p")  # above the tolerance, within noise of it
    assert not row(0.004, 0.0).clearly_above("p")
    pairs = [(row(0.02, 0.004), "p"), (row(0.02, 0.008), "p"), (row(0.0, 0.001), "p")]
    s = summarise(pairs)
    assert (s.above_tolerance, s.clearly_above) == (2, 1)


def test_the_week_before_fixes_a_daily_cycle_that_a_job_alone_learns_too_late() -> None:
    """The held-out rows plan-ahead lost clearly before the market log: a zone with a strong daily
    cycle, a deadline of 1.25x the work, a 0.5 h changeover and spot at half the on-demand price.
    Planning from the job's own hours it spends its slack waiting through the day's outages and is
    above uniform progress by more than the tolerance; with the week before each start (where the
    days agree on the cycle) it is below the best baseline. Without the week, the corridor around
    uniform progress's line keeps the default within the tolerance where the plan alone is not."""
    group, trace = synthetic.trace_set("daily-cycles", FITS, seed=3, days=14.0, tick_h=0.1)[2]
    job = JobSetting(1.25, 0.5, 0.5).job()
    points = start_points(trace, job, 60, seed=1)
    points = points[points * trace.tick_h >= 168.0]  # a whole week before each start
    od = job.on_demand_cost(trace.tick_h)

    def cost(name: str | PlanAheadPolicy, log_h: float = 168.0) -> float:
        policy = market_policy(name) if isinstance(name, str) else name
        return float(np.mean(simulate(policy, trace, job, points, market_log_h=log_h).cost_usd)) / od

    best = min(cost(name) for name in BASELINES)
    assert cost(DEFAULT_POLICY) < best - 0.005, group
    assert cost(PlanAheadPolicy(lag_share=math.inf), log_h=0.0) > best + 0.005, group
    assert cost(DEFAULT_POLICY, log_h=0.0) <= best + 0.005, group
