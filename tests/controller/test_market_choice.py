"""The controller asks the job's market policy: zones, on-demand fallback, leaving on-demand."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.backends.base import NodeObservation, NodePhase, Placement, Progress
from orchestrator.catalog.offers import MarketKind
from orchestrator.controller.actions import StartAttempt, StopNodes, Transition
from orchestrator.controller.market_choice import (
    JobClock,
    MarketRefusal,
    MarketView,
    MarketWait,
    ZoneMarket,
    choose_market,
    work_hours,
    work_progress,
)
from orchestrator.controller.reconcile import JobView, reconcile
from orchestrator.errors import UserError
from orchestrator.policies import ZoneHistory
from orchestrator.policies.base import choose_actions
from orchestrator.policies.context import Action, IntArray, MarketBatch
from orchestrator.policies.market import POLICIES, MarketPolicy
from orchestrator.spec import load_spec_text
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.watch import StepSample, WatchState

S = JobStatus
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SUBMITTED = NOW - timedelta(hours=1)
SPOT_A = Placement("V100", MarketKind.SPOT, "aws", "us-east-1", "zone-a", "p3.2xlarge", 1, 0.9, 3.06, "test")
SPOT_B = replace(SPOT_A, zone="zone-b", node_price_usd_per_hour=0.95)
ON_DEMAND = replace(SPOT_A, market=MarketKind.ON_DEMAND, node_price_usd_per_hour=3.06)


def market(a: int | None, b: int | None, history: ZoneHistory | None = None) -> MarketView:
    zones = (ZoneMarket("zone-a", SPOT_A, a), ZoneMarket("zone-b", SPOT_B, b))
    return MarketView(zones, ON_DEMAND, history or ZoneHistory.empty(), tick_h=1 / 3600)


def view(body: str, mkt: MarketView, deadline_h: float | None = 10.0, **kw: object) -> JobView:
    spec = load_spec_text("name: t\ncommand: train.py\n" + body)
    deadline = SUBMITTED + timedelta(hours=deadline_h) if deadline_h is not None else None
    base = JobView(spec=spec, status=S.PLACING, now=NOW, submitted_at=SUBMITTED, deadline=deadline, attempt=0,
                   placement=None, market=mkt)  # fmt: skip
    return replace(base, **kw)  # type: ignore[arg-type]


def launched(actions: Sequence[object]) -> Placement | None:
    starts = [a for a in actions if isinstance(a, StartAttempt)]
    return starts[0].placement if starts else None


def test_spot_goes_to_the_zone_that_has_capacity() -> None:
    v = view("goals: {compute_hours: 2}\n", market(0, 1))
    assert launched(reconcile(v)) is SPOT_B


def test_single_zone_policies_only_know_the_home_zone() -> None:
    v = view("market: {policy: greedy}\ngoals: {compute_hours: 2}\n", market(0, 1))
    assert reconcile(v) == []  # waits for zone-a; plenty of slack
    # uniform progress: an hour in with nothing done is behind the straight line, so on-demand
    v = view("market: {policy: uniform-progress}\ngoals: {compute_hours: 2}\n", market(0, 1))
    assert launched(reconcile(v)) is ON_DEMAND


def test_the_named_policy_decides_on_demand_policy_never_takes_spot() -> None:
    v = view("market: {policy: on-demand}\ngoals: {compute_hours: 2}\n", market(1, 1))
    assert launched(reconcile(v)) is ON_DEMAND


def test_no_spot_anywhere_and_a_tight_deadline_runs_on_demand() -> None:
    v = view("goals: {compute_hours: 8.7}\n", market(0, 0))  # 10 h deadline, 1 h gone, 8.7 h of work
    assert launched(reconcile(v)) is ON_DEMAND


def test_no_spot_with_slack_waits_and_says_why() -> None:
    v = view("goals: {compute_hours: 2}\n", market(0, 0), status=S.RECOVERING, attempt=1)
    assert reconcile(v) == []


def test_spot_mode_never_falls_back_to_on_demand() -> None:
    v = view("market: {mode: spot}\ngoals: {compute_hours: 8.7}\n", market(0, 0))
    assert reconcile(v) == []


def test_deadline_without_a_work_estimate_takes_on_demand_when_spot_is_gone() -> None:
    v = view("", market(0, 0))
    assert launched(reconcile(v)) is ON_DEMAND
    assert launched(reconcile(view("", market(0, 1)))) is SPOT_B


def test_no_deadline_never_pays_for_on_demand() -> None:
    assert reconcile(view("goals: {compute_hours: 2}\n", market(0, 0), deadline_h=None)) == []


def running_on_demand(body: str, mkt: MarketView, progress_step: int) -> JobView:
    return view(
        body, mkt, status=S.RUNNING, attempt=1, placement=ON_DEMAND, open_segment_nodes=1,
        nodes=(NodeObservation("t-a1-n0", NodePhase.RUNNING),),
        progress=Progress(step=progress_step, total_steps=100, time=NOW), progress_fresh=True,
    )  # fmt: skip


def long_runs() -> ZoneHistory:
    """Ten hours watched: zone-b had spot in two long runs."""
    history = ZoneHistory.empty().updated(0.0, {"zone-a": False, "zone-b": True})
    return history.updated(5.0, {"zone-a": False, "zone-b": True}).updated(
        5.0, {"zone-a": False, "zone-b": True}
    )


def test_on_demand_with_slack_left_goes_back_to_spot_when_it_returns() -> None:
    v = running_on_demand("goals: {compute_hours: 4}\n", market(0, 1, long_runs()), progress_step=50)
    actions = reconcile(v)
    assert [a.target for a in actions if isinstance(a, Transition)] == [S.RECOVERING]
    assert any(isinstance(a, StopNodes) for a in actions)
    assert "spot is back in zone-b" in next(a.message for a in actions if isinstance(a, Transition))


def test_reserve_slack_leaves_on_demand_only_keeping_the_safety_net() -> None:
    # 9 h left, 8.55 h of work left: 0.45 h of slack cannot pay a changeover (0.2 h) and still keep
    # reserve-slack's safety net (two changeovers) afterwards
    spec = "market: {policy: reserve-slack}\ngoals: {compute_hours: 9.5}\n"
    assert reconcile(running_on_demand(spec, market(0, 1, long_runs()), progress_step=10)) == []


def test_default_leaves_on_demand_only_while_a_way_back_meets_the_deadline() -> None:
    # The default (plan-ahead) with the same 0.45 h of slack, on uniform progress's line (0.95 h of
    # 9.5 done at hour 1 of 10): its corridor around the line (0.25 of the 0.5 h slack) is narrower
    # than uniform progress's catch-up (2 changeovers), so uniform progress decides: on-demand stays
    v = running_on_demand("goals: {compute_hours: 9.5}\n", market(0, 1, long_runs()), progress_step=10)
    assert reconcile(v) == []
    # ahead of the line by more than the catch-up (1.43 h done, 0.93 h of slack): the move to spot
    # costs 0.2 h, and were spot lost at once the launch back to on-demand another 0.2 h: the
    # deadline is never at risk, and spot in zone-b saves far more than the changeover
    v = running_on_demand("goals: {compute_hours: 9.5}\n", market(0, 1, long_runs()), progress_step=15)
    actions = reconcile(v)
    assert "spot is back in zone-b" in next(a.message for a in actions if isinstance(a, Transition))
    # 0.36 h of slack cannot pay both launches and a tick (the safety net): it stays on on-demand
    v = running_on_demand("goals: {compute_hours: 9.6}\n", market(0, 1, long_runs()), progress_step=10)
    assert reconcile(v) == []


def test_work_estimate_from_progress_and_time_run() -> None:
    spec = load_spec_text("name: t\ncommand: train.py\n")
    assert work_hours(spec, Progress(step=25, total_steps=100), run_h=2.0) == (2.0, 8.0)
    assert work_hours(spec, None, run_h=2.0) is None
    spec = load_spec_text("name: t\ncommand: train.py\ngoals: {compute_hours: 10}\n")
    assert work_hours(spec, Progress(step=25, total_steps=100), run_h=0.0) == (2.5, 10.0)


def test_between_attempts_the_work_done_is_the_step_training_reached() -> None:
    """The stopped run's last line is its "preempted" record (no step line, so no progress): the work
    done stays the newest step seen, kept in the job's state, instead of switching to the model of it
    (hours held less a changeover per attempt). The slack is the one the decision to leave on-demand
    was taken with (the 0.45 h of the test above), so the job is placed on spot, not on-demand again."""
    seen = WatchState(samples=(StepSample(step=10, at=NOW - timedelta(seconds=30)),), total_steps=100)
    job = "goals: {compute_hours: 9.5}\n"
    placing = view(job, market(0, 1, long_runs()), status=S.RECOVERING, attempt=1, placement=ON_DEMAND,
                   watch=seen)  # fmt: skip
    assert work_progress(None, seen) == Progress(step=10, total_steps=100, time=seen.samples[0].at)
    assert launched(reconcile(placing)) is SPOT_B
    # a new attempt's own record wins as soon as it gives the total
    fresh = Progress(step=4, total_steps=100, time=NOW)
    assert work_progress(fresh, seen) is fresh
    # nothing seen yet: the model of the work done (no hours held here: on-demand)
    assert launched(reconcile(replace(placing, watch=WatchState()))) is ON_DEMAND


def test_unknown_policy_name_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown market policy"):
        reconcile(view("market: {policy: yolo}\ngoals: {compute_hours: 2}\n", market(0, 1)))


def test_plan_ahead_decides_in_the_controller() -> None:
    policy = "market: {policy: plan-ahead}\n"
    # an hour in, nothing done, 2 h of work in a 10 h deadline: spot where there is capacity
    assert launched(reconcile(view(policy + "goals: {compute_hours: 2}\n", market(0, 1)))) is SPOT_B
    # no spot anywhere and 0.3 h of slack left: on-demand
    assert launched(reconcile(view(policy + "goals: {compute_hours: 8.7}\n", market(0, 0)))) is ON_DEMAND


def test_a_placement_never_possible_is_a_refusal_not_a_wait() -> None:
    no_on_demand = replace(market(0, 0), on_demand=None)
    clock = JobClock(NOW, SUBMITTED, SUBMITTED + timedelta(hours=10), None)
    tight = load_spec_text("name: t\ncommand: train.py\ngoals: {compute_hours: 8.7}\n")
    assert choose_market(tight, no_on_demand, clock) == MarketRefusal("no on-demand offer of V100")
    assert isinstance(choose_market(tight.model_copy(update={"goals": tight.goals.model_copy(
        update={"compute_hours": 2.0})}), no_on_demand, clock), MarketWait)  # fmt: skip
    (failed,) = reconcile(view("goals: {compute_hours: 8.7}\n", no_on_demand))
    assert failed == Transition(S.FAILED, "no on-demand offer of V100", FailureReason.NO_CAPACITY)


def test_on_demand_with_a_try_costing_more_than_the_slack_stays() -> None:
    """Kubernetes: a failed try of spot costs 10 minutes, 4.9 minutes of slack are left, both zones'
    shortage is forgotten (they look up), passes come at the same instant (no tick): the job stays on
    on-demand, where leaving it would be placed straight back there, pass after pass."""
    unseen = replace(market(None, None), tick_h=0.0, try_cost_h=600.0 / 3600.0)
    submitted = NOW - timedelta(minutes=65)  # 1 h of work, 36 min of slack; 34 min done on on-demand
    v = view("market: {changeover: 1m}\ngoals: {compute_hours: 1}\n", unseen, submitted_at=submitted,
             deadline=submitted + timedelta(minutes=96), status=S.RUNNING, attempt=4, placement=ON_DEMAND,
             open_segment_nodes=1, nodes=(NodeObservation("t-a4-n0", NodePhase.RUNNING),),
             progress=Progress(step=565, total_steps=1000, time=NOW), progress_fresh=True)  # fmt: skip
    assert reconcile(v) == []


class _LeavesButComesBack(MarketPolicy):
    """Inconsistent on purpose: on on-demand it waits, idle it runs on-demand."""

    name = "leaves-but-comes-back"
    description = "test"

    def decide_batch(self, b: MarketBatch) -> tuple[IntArray, IntArray]:
        idle = b.market != Action.ON_DEMAND
        return choose_actions(len(b.elapsed_h), idle, idle & False, b.zone)


def test_on_demand_is_never_left_when_placing_would_choose_it_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the policy: a job the placing step would put straight back on on-demand keeps running
    there (a restart would throw away work at every pass)."""
    monkeypatch.setitem(POLICIES, _LeavesButComesBack.name, _LeavesButComesBack)
    body = f"market: {{policy: {_LeavesButComesBack.name}}}\ngoals: {{compute_hours: 4}}\n"
    assert reconcile(running_on_demand(body, market(0, 1, long_runs()), progress_step=50)) == []
    placed = reconcile(replace(running_on_demand(body, market(0, 1), 50), status=S.RECOVERING, nodes=()))
    assert launched(placed) is ON_DEMAND  # what it would do once stopped
