"""Ledger arithmetic checked against sums worked out by hand."""

from __future__ import annotations

import pytest

from orchestrator.costs.ledger import LostWork, Window, job_costs, total_cost
from orchestrator.errors import UserError
from tests.costs.factory import at, job, preempted_three_times, seg


def test_job_preempted_three_times_across_zones_and_markets() -> None:
    # 2h x 2 nodes @1.0 = 4.0 ; 1h x 2 @1.2 = 2.4 ; 2h x 1 @1.2 = 2.4 ; 1h x 2 @3.0 = 6.0 -> 14.8
    # on-demand: (4 + 2 + 2 + 2) node-hours x 3.0 = 30.0 ; GPU-hours 4 + 2 + 2 + 2 = 10
    record, segments = preempted_three_times()
    [jc] = job_costs([record], segments, now=at(20), idle={"j3": 2.5})
    assert jc.segments == 4 and jc.preemptions == 3
    assert jc.gpu_hours == pytest.approx(10.0)
    assert jc.cost_usd == pytest.approx(14.8)
    assert jc.on_demand_usd == pytest.approx(30.0)
    assert jc.savings_usd == pytest.approx(15.2)
    assert jc.markets == ("on-demand", "spot")
    assert jc.usd_per_gpu_hour == pytest.approx(1.48)
    assert jc.idle_cost_usd == pytest.approx(2.5 * 1.48)
    assert jc.gpu_efficiency == pytest.approx(0.75)


def test_lost_work_from_steps_uses_mean_gpu_count() -> None:
    record, segments = preempted_three_times()
    # 300 steps x 6 s = 0.5 h of wall time; wall hours 6, GPU-hours 10 -> 10/6 GPUs on average
    [jc] = job_costs([record], segments, now=at(20), lost={"j3": LostWork(steps=300, seconds_per_step=6)})
    assert jc.lost_steps == 300
    assert jc.lost_gpu_hours == pytest.approx(0.5 * 10 / 6)
    assert jc.lost_cost_usd == pytest.approx(0.5 * 10 / 6 * 1.48)
    [given] = job_costs([record], segments, now=at(20), lost={"j3": LostWork(steps=1, gpu_hours=2.0)})
    assert given.lost_cost_usd == pytest.approx(2.96)


def test_lost_steps_without_step_time_is_a_user_error() -> None:
    record, segments = preempted_three_times()
    with pytest.raises(UserError, match="seconds_per_step"):
        job_costs([record], segments, now=at(20), lost={"j3": LostWork(steps=5)})


def test_window_clips_segments_and_open_segment_runs_to_now() -> None:
    segments = [
        seg("a", at(9), at(11), price=2.0, od=4.0),  # 1 h inside [10, 15)
        seg("a", at(14), None, price=2.0, od=4.0, gpus_per_node=4),  # open: 14 -> now 16, 1 h inside
    ]
    window = Window(at(10), at(15))
    [jc] = job_costs([job("a")], segments, now=at(16), window=window)
    assert jc.gpu_hours == pytest.approx(1 + 4)
    assert jc.cost_usd == pytest.approx(2.0 + 2.0)
    assert jc.idle_gpu_hours is None and jc.gpu_efficiency is None
    assert total_cost(segments, at(16)) == pytest.approx(4.0 + 4.0)


def test_segments_outside_window_and_unknown_jobs() -> None:
    segments = [seg("gone", at(1), at(2), price=1, od=1), seg("orphan", at(10), at(11), price=5, od=5)]
    costs = job_costs([job("gone")], segments, now=at(20), window=Window(at(9), at(12)))
    assert [c.job_id for c in costs] == ["orphan"]
    assert costs[0].team == "unknown" and costs[0].cost_usd == pytest.approx(5.0)


def test_empty_window_is_refused() -> None:
    with pytest.raises(UserError, match="before it starts"):
        Window(at(12), at(10))
