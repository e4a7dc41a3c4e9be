"""The daily cycle read off the days before a job, and the market log the simulator gives a job."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.policies.context import MarketContext, MarketLog, ZoneHistory
from orchestrator.policies.daily import fit_daily_cycle
from orchestrator.policies.simulator import SimJob, market_before
from orchestrator.policies.traces import AvailabilityTrace


def cycle_shares(days: int, strength: float, peak: float, first_clock: float = 0.0) -> np.ndarray:
    """Hourly shares with spot whose log-odds follow 2 x strength x cos(2 pi (h - peak) / 24)."""
    clock = first_clock + np.arange(24 * days) + 0.5
    odds = np.exp(2.0 * strength * np.cos(2 * math.pi * (clock - peak) / 24.0))
    return odds / (1.0 + odds)


@pytest.mark.parametrize(
    ("strength", "peak", "first_clock"), [(0.5, 3.0, 0.0), (1.0, 17.0, 5.0), (0.3, 22.5, 13.0)]
)
def test_a_clear_cycle_is_fitted_with_its_strength_and_peak(
    strength: float, peak: float, first_clock: float
) -> None:
    hourly = cycle_shares(7, strength, peak, first_clock)[None, :]
    got_strength, got_peak = fit_daily_cycle(hourly, np.array([first_clock]))
    assert got_strength[0] == pytest.approx(strength, rel=0.05)
    assert (got_peak[0] - peak + 12.0) % 24.0 - 12.0 == pytest.approx(0.0, abs=0.2)


def test_days_that_do_not_agree_give_no_cycle() -> None:
    """A week of a market without a rhythm (every hour up or down at random, in runs of a few
    hours) reads as some cycle every week; the test between days rejects it in most weeks."""
    rng = np.random.default_rng(1)
    rows = 200
    runs = rng.integers(0, 2, size=(rows, 168 // 4)).repeat(4, axis=1).astype(np.float64)
    strength, _ = fit_daily_cycle(runs, np.zeros(rows))
    assert (strength > 0).mean() < 0.15
    # the same weeks with a rhythm added (up more often by night) pass it
    rhythm = cycle_shares(7, 0.8, 2.0)[None, :]
    mixed = (rng.random((rows, 168)) < rhythm).astype(np.float64)
    strength, _ = fit_daily_cycle(mixed, np.zeros(rows))
    assert (strength > 0).mean() > 0.8


def test_too_few_whole_days_give_no_cycle() -> None:
    week = cycle_shares(7, 1.0, 4.0)
    assert fit_daily_cycle(week[None, -60:], np.array([12.0]))[0][0] == 0.0  # two whole days
    unwatched = week.copy()
    unwatched[: 24 * 5] = np.nan  # five days nobody watched: two left
    assert fit_daily_cycle(unwatched[None, :], np.array([0.0]))[0][0] == 0.0
    unwatched[: 24 * 4] = week[: 24 * 4]  # one day not watched: six agree
    assert fit_daily_cycle(unwatched[None, :], np.array([0.0]))[0][0] > 0.5


def test_the_market_before_a_start_counts_what_a_watcher_saw() -> None:
    """The simulator's log of the hours before a start point: the same counts as a job's own
    history kept tick by tick over those hours (a run under way when the window opens is one)."""
    rng = np.random.default_rng(3)
    tick_h = 0.25
    counts = rng.integers(0, 2, size=(2, 24 * 4 * 10)).repeat(3, axis=1)[:, : 24 * 4 * 10]
    trace = AvailabilityTrace(("a", "b"), tick_h, counts)
    starts = np.array([0, 10, 400, 900])
    log = market_before(trace, SimJob(48, 60, 0.2, 1, 3), starts, hours=72.0)
    for row, start in enumerate(starts):
        h = ZoneHistory.empty()
        for t in range(max(start - int(72 / tick_h), 0), start):
            h = h.updated(tick_h, {"a": bool(counts[0, t]), "b": bool(counts[1, t])})
        assert log.observed_h[row] == pytest.approx(h.observed_h)
        assert log.any_available_h[row] == pytest.approx(h.any_available_h)
        assert list(log.available_h[row]) == pytest.approx(
            [h.available_h.get("a", 0), h.available_h.get("b", 0)]
        )
        assert list(log.up_runs[row]) == [h.up_runs.get("a", 0), h.up_runs.get("b", 0)]
        assert log.start_clock_h[row] == pytest.approx((start * tick_h) % 24)


def test_a_controllers_log_and_the_simulators_fit_the_same_cycle() -> None:
    """:class:`MarketLog` (what a controller gives: whole hours that end at the job's start) fits the
    cycle the simulator's batch form does (whole hours of the trace that end before the start)."""
    tick_h = 0.5
    hourly = cycle_shares(8, 1.0, 6.0)
    counts = (np.random.default_rng(0).random(hourly.size * 2) < hourly.repeat(2)).astype(np.int64)[None, :]
    trace = AvailabilityTrace(("a",), tick_h, counts)
    start = 24 * 8 * 2 - 1  # in the last hour of day 8: the week before is days 1 to 7
    sim = market_before(trace, SimJob(48, 60, 0.2, 1, 3), np.array([start]), hours=168.0)
    shares = counts[0, : 2 * (24 * 8 - 1)].reshape(-1, 2).mean(axis=1)[-168:]
    ctx = MarketContext(
        elapsed_h=0.0, deadline_h=60.0, work_done_h=0.0, work_total_h=48.0, changeover_h=0.2, tick_h=0.1,
        spot_price=1.0, on_demand_price=3.0, zones=["a"], spot_available={"a": True},
        market_log=MarketLog(ZoneHistory.empty(), tuple(shares), start_clock_h=(start * tick_h) // 1 % 24),
    )  # fmt: skip
    log = ctx.to_batch().market_log
    assert log is not None
    assert sim.cycle_strength[0] > 0.5
    assert log.cycle_strength[0] == pytest.approx(sim.cycle_strength[0])
    assert log.cycle_peak_h[0] == pytest.approx(sim.cycle_peak_h[0])


def test_ticks_longer_than_an_hour_still_give_every_hour_a_share() -> None:
    """A trace with 2 h ticks: an hour no tick begins in takes the tick that covers it, so whole
    days (and a strong cycle) are still seen."""
    tick_h = 2.0
    clock = np.arange(24 * 10 // 2) * tick_h
    counts = (np.cos(2 * math.pi * clock / 24.0) > 0).astype(np.int64)[None, :]  # spot half of each day
    trace = AvailabilityTrace(("a",), tick_h, counts)
    log = market_before(trace, SimJob(48, 60, 0.2, 1, 3), np.array([counts.shape[1] - 1]), hours=168.0)
    assert log.cycle_strength[0] > 1.0
    assert (log.cycle_peak_h[0] + 12.0) % 24.0 - 12.0 == pytest.approx(0.0, abs=1.5)
