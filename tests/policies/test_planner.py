"""plan-ahead's dynamic program against a brute-force recursion over every action, on tiny grids."""

from __future__ import annotations

import math
import tracemalloc
from dataclasses import replace
from functools import cache

import numpy as np
import pytest

from orchestrator.policies.context import Action
from orchestrator.policies.planner import (
    IDLE_DOWN,
    IDLE_UP,
    OD_DOWN,
    OD_UP,
    DailyCycle,
    MarketModel,
    PlanCache,
    PlanGrid,
    cycle_keys,
    plan,
)

INF = math.inf


def brute_force_q(grid: PlanGrid, model: MarketModel, cycle: DailyCycle | None = None):  # type: ignore[no-untyped-def]
    """Q(time left, slack, situation) -> {action: expected cost}, by plain recursion (whole-step
    changeovers, latencies and stops only). Under the safety net (slack < ``grid.safety_steps``, on
    on-demand ``grid.safety_steps + grid.stop_steps``) only on-demand is allowed. A launch pays ``c``
    steps; from idle it lands ``c + latency`` steps later, from on-demand (stop, then launch)
    ``c + latency + stop``; waiting from on-demand is idle ``stop`` steps later (at least one).
    With a daily ``cycle``, every move from ``tau`` steps before the deadline uses the rates of the
    middle of that step: recovery x m / I0, losses / (m x I0), m = exp(strength cos(2 pi (deadline
    after peak - hours before the deadline) / 24))."""
    c = round(grid.changeover_steps)
    land = c + round(grid.latency_steps)
    dt = grid.step_h
    ps, po = grid.spot_price * dt, grid.on_demand_price * dt

    def factors(tau: int) -> tuple[float, float]:
        if cycle is None:
            return 1.0, 1.0
        hours_before = max(tau - 0.5, 0.0) * dt
        m = math.exp(
            cycle.strength * math.cos(2 * math.pi * (cycle.deadline_after_peak_h - hours_before) / 24)
        )
        i0 = float(np.i0(cycle.strength))
        return m / i0, 1.0 / (m * i0)

    def up_after(steps: int, up_now: bool, tau: int) -> float:
        rec_f, loss_f = factors(tau)
        up_loss, recovery = model.up_loss * loss_f, model.recovery * rec_f
        rate = up_loss + recovery
        decay = math.exp(-rate * steps * dt)
        p_uu = (recovery + up_loss * decay) / rate
        p_du = recovery * (1.0 - decay) / rate
        return p_uu if up_now else p_du

    def survives(steps: int, tau: int) -> float:
        return math.exp(-model.ride_loss * factors(tau)[1] * steps * dt)

    @cache
    def value(tau: int, s: int, state: str, up: bool) -> float:
        """state: idle, od (warm on-demand) or ride (riding spot, zone up)."""
        if s < 0 or tau < s:
            return INF
        if tau == s:  # no work left
            return 0.0
        if state == "ride":
            surv = survives(1, tau)
            lost = model.failover * value(tau - 1, s, "idle", True) + (1 - model.failover) * value(
                tau - 1, s, "idle", False
            )
            return ps + surv * value(tau - 1, s, "ride", True) + (1 - surv) * lost
        return min(q_values(tau, s, state, up).values())

    def mix(p_up: float, a: float, b: float) -> float:
        """p_up * a + (1 - p_up) * b, where an outcome of probability 0 does not count."""
        return (p_up * a if p_up > 0 else 0.0) + ((1.0 - p_up) * b if p_up < 1 else 0.0)

    def q_values(tau: int, s: int, state: str, up: bool) -> dict[int, float]:
        p1 = up_after(1, up, tau)
        # waiting from on-demand: idle once stopped, at least a step later
        wait = round(grid.stop_steps) if state == "od" and grid.stop_steps > 1 else 1
        q = {
            int(Action.WAIT): mix(
                up_after(wait, up, tau),
                value(tau - wait, s - wait, "idle", True),
                value(tau - wait, s - wait, "idle", False),
            )
        }
        if up:
            after = land + round(grid.stop_steps) if state == "od" else land
            surv_c = survives(after, tau)
            lost = mix(
                model.failover,
                value(tau - after, s - after, "idle", True),
                value(tau - after, s - after, "idle", False),
            )
            q[int(Action.SPOT)] = c * ps + mix(surv_c, value(tau - after, s - after, "ride", True), lost)
        if state == "od":
            q[int(Action.ON_DEMAND)] = po + mix(
                p1, value(tau - 1, s, "od", True), value(tau - 1, s, "od", False)
            )
        else:
            pc = up_after(land, up, tau)
            q[int(Action.ON_DEMAND)] = c * po + mix(
                pc, value(tau - land, s - land, "od", True), value(tau - land, s - land, "od", False)
            )
        if s < grid.safety_steps + (grid.stop_steps if state == "od" else 0.0):
            return {int(Action.ON_DEMAND): q[int(Action.ON_DEMAND)]}
        return q

    return q_values


SITUATIONS = {
    IDLE_UP: ("idle", True),
    IDLE_DOWN: ("idle", False),
    OD_UP: ("od", True),
    OD_DOWN: ("od", False),
}


def assert_planned_optimally(grid: PlanGrid, model: MarketModel, cycle: DailyCycle | None) -> np.ndarray:
    """Every action of the plan's table is one of the cheapest by brute force; returns the table."""
    table = plan(grid, [model], cycle)[0]
    q_values = brute_force_q(grid, model, cycle)
    checked = 0
    for tau in range(grid.time_steps):
        for s in range(min(tau, grid.slack_steps)):
            for situation, (state, up) in SITUATIONS.items():
                q = q_values(tau, s, state, up)
                best = min(q.values())
                if best == INF:
                    continue
                chosen = int(table[tau, s, situation])
                assert q.get(chosen, INF) == pytest.approx(best, rel=1e-9, abs=1e-9), (tau, s, situation, q)
                checked += 1
    assert checked > 100
    return table


@pytest.mark.parametrize(
    ("changeover", "safety", "latency", "stop", "model"),
    [
        (1, 0.0, 0, 0, MarketModel(ride_loss=0.5, failover=0.0, up_loss=0.5, recovery=0.3)),
        (1, 0.0, 0, 0, MarketModel(ride_loss=0.1, failover=0.6, up_loss=0.04, recovery=1.0)),
        (2, 0.0, 0, 0, MarketModel(ride_loss=1.5, failover=0.0, up_loss=1.5, recovery=0.1)),
        (2, 0.0, 0, 0, MarketModel(ride_loss=0.3, failover=0.3, up_loss=0.2, recovery=0.5)),
        # with the safety net of two changeovers and a tick (a tick = one step here)
        (1, 3.0, 0, 0, MarketModel(ride_loss=0.5, failover=0.0, up_loss=0.5, recovery=0.3)),
        (2, 5.0, 0, 0, MarketModel(ride_loss=0.3, failover=0.3, up_loss=0.2, recovery=0.5)),
        # and a launch that lands a tick late (as a controller plans)
        (1, 3.0, 1, 1, MarketModel(ride_loss=0.5, failover=0.0, up_loss=0.5, recovery=0.3)),
        (1, 3.0, 1, 1, MarketModel(ride_loss=0.1, failover=0.6, up_loss=0.04, recovery=1.0)),
        (2, 5.0, 1, 1, MarketModel(ride_loss=0.3, failover=0.3, up_loss=0.2, recovery=0.5)),
        # and stopping on-demand taking longer than a pass (a controller: the notice grace)
        (1, 3.0, 1, 2, MarketModel(ride_loss=0.5, failover=0.0, up_loss=0.5, recovery=0.3)),
        (2, 5.0, 0, 3, MarketModel(ride_loss=0.1, failover=0.6, up_loss=0.04, recovery=1.0)),
    ],
)
def test_planned_action_is_optimal(
    changeover: int, safety: float, latency: int, stop: int, model: MarketModel
) -> None:
    grid = PlanGrid(step_h=0.5, time_steps=14, slack_steps=9, changeover_steps=float(changeover),
                    spot_price=1.0, on_demand_price=3.0, safety_steps=safety,
                    latency_steps=float(latency), stop_steps=float(stop))  # fmt: skip
    assert_planned_optimally(grid, model, None)


@pytest.mark.parametrize(
    ("changeover", "safety", "latency", "stop", "model", "cycle"),
    [  # MarketModel(ride_loss, failover, up_loss, recovery), DailyCycle(strength, deadline after peak)
        (1, 0.0, 0, 0, MarketModel(0.5, 0.0, 0.5, 0.3), DailyCycle(1.0, 2.0)),
        (2, 0.0, 0, 0, MarketModel(0.3, 0.3, 0.2, 0.5), DailyCycle(1.5, 20.0)),
        (1, 3.0, 0, 0, MarketModel(0.1, 0.6, 0.04, 1.0), DailyCycle(0.5, 9.0)),
        (1, 3.0, 1, 2, MarketModel(0.5, 0.0, 0.5, 0.3), DailyCycle(1.0, 15.0)),
        (2, 5.0, 1, 1, MarketModel(1.5, 0.0, 1.5, 0.1), DailyCycle(1.5, 6.0)),
    ],
)
def test_planned_action_with_a_daily_cycle_is_optimal(
    changeover: int, safety: float, latency: int, stop: int, model: MarketModel, cycle: DailyCycle
) -> None:
    """Steps of 2 h, so that a 28 h plan crosses a whole day of the cycle."""
    grid = PlanGrid(step_h=2.0, time_steps=14, slack_steps=9, changeover_steps=float(changeover),
                    spot_price=1.0, on_demand_price=3.0, safety_steps=safety,
                    latency_steps=float(latency), stop_steps=float(stop))  # fmt: skip
    model = replace(
        model, ride_loss=model.ride_loss / 4, up_loss=model.up_loss / 4, recovery=model.recovery / 4
    )
    table = assert_planned_optimally(grid, model, cycle)
    # and the cycle changes the plan: the same model without it chooses otherwise somewhere
    assert not np.array_equal(table, plan(grid, [model])[0])


def test_a_cycle_of_strength_zero_is_no_cycle_and_phases_bin_by_three_hours() -> None:
    assert list(cycle_keys(np.array([0.0, 0.0]), np.array([5.0, 17.0]))) == [0, 0]
    keys = cycle_keys(np.array([1.0, 1.0, 1.0, 0.26]), np.array([0.0, 1.4, 22.6, 25.0]))
    assert keys[0] == keys[1] == keys[2] != keys[3] and keys.min() > 0


def test_planning_batches_models_independently() -> None:
    grid = PlanGrid(0.5, 12, 6, 1.0, 1.0, 3.0)
    models = [MarketModel(0.5, 0.0, 0.5, 0.3), MarketModel(0.05, 0.0, 0.05, 2.0)]
    both = plan(grid, models)
    assert np.array_equal(both[0], plan(grid, models[:1])[0])
    assert np.array_equal(both[1], plan(grid, models[1:])[0])
    # spot that rarely goes away and comes back fast: with slack, idle waits rather than on-demand
    assert both[1][10, 4, IDLE_DOWN] == Action.WAIT
    # and models with cycles of their own, planned together
    cycles = [DailyCycle(1.0, 3.0), DailyCycle(0.5, 18.0)]
    mixed = plan(grid, models, cycles)
    assert np.array_equal(mixed[0], plan(grid, models[:1], cycles[0])[0])
    assert np.array_equal(mixed[1], plan(grid, models[1:], cycles[1])[0])


def test_the_cache_answers_as_each_model_planned_alone() -> None:
    """The cache plans tables in batches (neighbouring rates, every phase of a cycle at once, a
    launch on a whole step without blending): each answer is that of its model and cycle planned
    alone, in every situation, time left and slack."""
    grid = PlanGrid(0.5, 16, 8, 1.0, 1.0, 3.0, safety_steps=1.0)
    # rates on the bins: ride loss 1/2 or 1/8 per hour, failover 0 or 0.7, recovery 1/4 or 2
    rides, fails, recoveries = [0.5, 0.125], [0.0, 0.7], [0.25, 2.0]
    strengths, deadline_after_peak = np.array([0.0, 1.0, 0.5]), np.array([0.0, 0.0, 21.0])  # phases 0, 7
    cache = PlanCache(grid)
    t, s = np.meshgrid(np.arange(1, 16), np.arange(8), indexing="ij")
    t, s = t.ravel(), np.minimum(s.ravel(), t.ravel() - 1)
    for ride in rides:
        for fail in fails:
            for rec in recoveries:
                model = MarketModel(ride, fail, ride * (1.0 - fail), rec)
                for strength, phase in zip(strengths, deadline_after_peak, strict=True):
                    cycle = DailyCycle(float(strength), float(phase)) if strength > 0 else None
                    alone = plan(grid, [model], cycle)[0]
                    keys = cycle_keys(np.full(t.size, strength), np.full(t.size, phase))
                    for situation in (IDLE_UP, IDLE_DOWN, OD_UP, OD_DOWN):
                        got = cache.lookup(
                            np.full(t.size, ride), np.full(t.size, fail), np.full(t.size, rec),
                            t * grid.step_h, s * grid.step_h, np.full(t.size, situation), keys,
                        )  # fmt: skip
                        assert np.array_equal(got, alone[t, s, situation]), (model, strength, situation)
    assert cache.count > len(rides) * len(fails) * len(recoveries) * len(strengths)  # planned in batches


def test_grid_never_coarser_than_the_changeover() -> None:
    grid = PlanGrid.for_job(70.0, 48.0, 0.2, 195 / 3600, 0.9, 3.0)
    assert grid.changeover_steps >= 1.0 and grid.time_steps <= 402
    fine = PlanGrid.for_job(52.0, 48.0, 0.05, 195 / 3600, 0.9, 3.0)
    assert fine.step_h == pytest.approx(195 / 3600, rel=1e-6)
    assert fine.latency_steps == 0.0  # the simulator carries decisions out at once
    late = PlanGrid.for_job(52.0, 48.0, 0.05, 195 / 3600, 0.9, 3.0, latency_h=195 / 3600)
    assert late.latency_steps == pytest.approx(1.0)  # a controller: a tick late


def test_the_plan_never_goes_on_demand_where_landing_a_tick_late_leaves_it_under_the_net() -> None:
    """From idle, on-demand at slack = net + changeover lands exactly on the net: the job may leave
    on-demand again only if the launch is carried out on time. Planned with launches that land a
    tick late, the plan goes on-demand earlier (or for good) instead; planned without, it does not."""
    models = [
        MarketModel(0.1, 0.0, 0.1, 1.0),
        MarketModel(0.5, 0.0, 0.5, 0.3),
        MarketModel(0.3, 0.3, 0.2, 0.5),
    ]

    def on_the_edge(latency: float) -> int:
        grid = PlanGrid(0.5, 30, 12, 1.0, 1.0, 3.0, safety_steps=3.0, latency_steps=latency)
        edge = int(grid.safety_steps + grid.changeover_steps)
        tables = plan(grid, models)[:, 5:, edge, [IDLE_UP, IDLE_DOWN]]  # time left beyond the endgame
        return int((tables == Action.ON_DEMAND).sum())

    assert on_the_edge(1.0) == 0
    assert on_the_edge(0.0) > 0


def test_a_controllers_jittery_pass_keeps_the_grid_and_its_cached_tables() -> None:
    """The controller passes its pass (time since the last one) as tick and latency: a pass of 1.004 s
    instead of 1 s must not make a new grid (planned again, tens of ms, at every pass of every job)."""

    def grid(pass_s: float) -> PlanGrid:
        tick = pass_s / 3600
        return PlanGrid.for_job(52.0, 48.0, 0.2, tick, 0.9, 3.06, latency_h=tick, stop_h=30 / 3600 + tick)

    assert grid(1.0) == grid(1.004) == grid(0.997)
    # rounded up: never less latency, stop or safety net than given
    exact = grid(1.0)
    assert exact.stop_steps * exact.step_h >= 31 / 3600
    assert exact.safety_steps * exact.step_h >= 0.4 + 1 / 3600


def test_a_long_notice_grace_or_changeover_keeps_the_plan_small() -> None:
    """A short job with a long notice grace (the spec allows an hour) or changeover: a stop or launch
    landing beyond the slack the table holds is a missed deadline however far beyond, so the plan
    caps the distance there. Before, a 230 s job with an hour's grace planned a ring of 3,600 steps
    (4.7 GB, 12 s) at every pass; now the same actions in a few MB."""
    models = [MarketModel(0.5, 0.3, 0.35, 0.5), MarketModel(2.0, 0.0, 2.0, 0.25)]
    hour = 3600.0
    for change_s, grace_s in ((10.0, 1000.0), (1000.0, 5.0)):
        grid = PlanGrid.for_job(230 / hour, 90 / hour, change_s / hour, 1 / hour, 0.5, 3.06, 1 / hour,
                                (grace_s + 1) / hour)  # fmt: skip
        tracemalloc.start()
        table = plan(grid, models)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 20 * 2**20, peak
        capped = replace(
            grid,
            changeover_steps=min(grid.changeover_steps, grid.slack_steps + 1.0),
            stop_steps=min(grid.stop_steps, grid.slack_steps + 1.0),
        )
        assert np.array_equal(table, plan(capped, models))
