"""A job's market log built from the spans a controller watched (orchestrator.policies.market_log)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from orchestrator.policies.context import MarketLog, ZoneHistory
from orchestrator.policies.market_log import market_log_from
from orchestrator.policies.simulator import SimJob, market_before
from orchestrator.policies.traces import AvailabilityTrace
from orchestrator.state.zone_watch import WatchedSpan

UNTIL = datetime(2026, 11, 8, 5, 30, tzinfo=UTC)


def spans_of(zone: str, ticks: list[int | None], tick_s: float, start: float) -> list[WatchedSpan]:
    """One span per tick (capacity per tick; the spans touch)."""
    return [WatchedSpan(zone, start + i * tick_s, start + (i + 1) * tick_s, c) for i, c in enumerate(ticks)]


def test_the_log_counts_what_a_zone_history_kept_tick_by_tick_would() -> None:
    rng = np.random.default_rng(5)
    tick_s, hours = 600.0, 30
    n = hours * 6
    start = UNTIL.timestamp() - hours * 3600
    a = [int(c) for c in rng.integers(0, 3, n)]
    b = [int(c) for c in rng.integers(0, 4, n)]
    spans = spans_of("a", list(a), tick_s, start) + spans_of("b", list(b), tick_s, start)
    log = market_log_from(spans, ["a", "b"], min_nodes=2, until=UNTIL, hours=hours)
    h = ZoneHistory.empty()
    for i in range(n):
        h = h.updated(tick_s / 3600, {"a": a[i] >= 2, "b": b[i] >= 2})
    assert log.history.observed_h == pytest.approx(h.observed_h)
    assert log.history.any_available_h == pytest.approx(h.any_available_h)
    assert dict(log.history.available_h) == pytest.approx(dict(h.available_h))
    assert dict(log.history.up_runs) == dict(h.up_runs)
    assert dict(log.history.ended_runs) == dict(h.ended_runs) and sum(h.ended_runs.values()) > 20
    assert dict(log.history.ended_run_h) == pytest.approx(dict(h.ended_run_h))
    assert dict(log.history.ended_run_h2) == pytest.approx(dict(h.ended_run_h2))
    first_hour = [x >= 2 or y >= 2 for x, y in zip(a[:6], b[:6], strict=True)]
    assert log.hourly_any_up[0] == pytest.approx(sum(first_hour) / 6)
    assert log.start_clock_h == pytest.approx(5.5)


def test_unwatched_time_counts_for_nothing() -> None:
    """Only time when every zone of the job was watched counts; an hour watched less than half of
    the time has no share; a capacity unknown (None) is spot for any number of nodes."""
    start = UNTIL.timestamp() - 4 * 3600
    spans = [
        WatchedSpan("a", start, start + 3 * 3600, None),
        WatchedSpan("b", start + 1200, start + 2 * 3600, 0),  # b watched from 20 minutes in
        WatchedSpan("b", start + 2 * 3600 + 2400, start + 3 * 3600, 0),  # then 20 minutes of hour 3
    ]
    log = market_log_from(spans, ["a", "b"], min_nodes=4, until=UNTIL, hours=4)
    assert log.history.observed_h == pytest.approx(40 / 60 + 1 + 20 / 60)
    assert log.history.any_available_h == pytest.approx(log.history.observed_h)
    assert log.history.up_runs == {"a": 2, "b": 0}  # the gap cut a's run in two
    assert log.hourly_any_up[:2] == (1.0, 1.0)
    assert all(math.isnan(v) for v in log.hourly_any_up[2:])


def test_the_log_survives_its_json_document() -> None:
    log = MarketLog(ZoneHistory(3.0, 2.0, {"a": 2.0}, {"a": 4}), (0.5, math.nan, 1.0), 23.25)
    again = MarketLog.from_dict(log.to_dict())
    assert again.history == log.history and again.start_clock_h == 23.25
    spread = MarketLog(
        ZoneHistory(ended_runs={"a": 2}, ended_run_h={"a": 3.0}, ended_run_h2={"a": 5.0}), (), 1.0
    )
    assert MarketLog.from_dict(spread.to_dict()).history == spread.history
    older = log.to_dict()  # a log kept before the spread of the runs was: none seen
    for key in ("ended_runs", "ended_run_h", "ended_run_h2"):
        del older["history"][key]
    assert MarketLog.from_dict(older).history.ended_runs == {}
    assert again.hourly_any_up[0] == 0.5 and math.isnan(again.hourly_any_up[1])
    assert log.to_dict()["hourly_any_up"][1] is None  # plain JSON, no NaN


def test_a_week_of_a_daily_rhythm_gives_the_job_a_cycle() -> None:
    """Spot every night (22:00 to 06:00 UTC) for a week: the job's log fits a strong cycle that
    peaks near 02:00."""
    week_start = UNTIL - timedelta(hours=168)
    spans = []
    t = week_start
    while t < UNTIL:
        hour = t.hour
        spans.append(
            WatchedSpan("a", t.timestamp(), (t + timedelta(hours=1)).timestamp(), int(hour >= 22 or hour < 6))
        )
        t += timedelta(hours=1)
    log = market_log_from(spans, ["a"], min_nodes=1, until=UNTIL)
    batch = log.to_batch(["a"])
    assert batch.cycle_strength[0] > 1.0
    assert (batch.cycle_peak_h[0] - 2.0 + 12.0) % 24.0 - 12.0 == pytest.approx(0.0, abs=0.5)


def test_a_controllers_log_of_a_trace_is_the_simulators_week_before() -> None:
    """The controller's log (spans watched tick by tick, read back at the job's submit) and the
    simulator's week before a start point on the same trace are the same numbers, so plan-ahead is
    given the same cycle by both. The trace's hour 0 is midnight UTC, the start a whole hour."""
    rng = np.random.default_rng(11)
    tick_h = 0.25
    hours = np.arange(10 * 24 * 4) * tick_h
    night = 1.0 / (1.0 + np.exp(-2.0 * np.cos(2 * math.pi * (hours - 3.0) / 24.0)))
    counts = np.stack([(rng.random(hours.size) < night).astype(np.int64) for _ in range(2)])
    trace = AvailabilityTrace(("a", "b"), tick_h, counts)
    start = 9 * 24 * 4  # day 9, 00:00
    midnight = datetime(2026, 11, 1, tzinfo=UTC)
    spans = [
        WatchedSpan(zone, (midnight + timedelta(hours=t * tick_h)).timestamp(),
                    (midnight + timedelta(hours=(t + 1) * tick_h)).timestamp(), int(counts[z, t]))
        for z, zone in enumerate(trace.zones) for t in range(start)
    ]  # fmt: skip
    until = midnight + timedelta(hours=start * tick_h)
    controller = market_log_from(spans, list(trace.zones), min_nodes=1, until=until).to_batch(
        list(trace.zones)
    )
    simulator = market_before(trace, SimJob(48, 60, 0.2, 1, 3), np.array([start]), hours=168.0)
    for field in ("observed_h", "any_available_h", "available_h", "up_runs", "start_clock_h"):
        assert np.allclose(getattr(controller, field), getattr(simulator, field)), field
    for part in ("runs", "run_h", "run_h2"):  # the spread of the ended runs, a run under way at lo cut
        assert np.allclose(getattr(controller.spread, part), getattr(simulator.spread, part)), part
    assert simulator.spread.runs.sum() > 100
    assert simulator.cycle_strength[0] > 0.5
    assert controller.cycle_strength[0] == pytest.approx(simulator.cycle_strength[0])
    assert controller.cycle_peak_h[0] == pytest.approx(simulator.cycle_peak_h[0])
