"""The pure reconcile step with the job's user's limits (:class:`UserStanding` in the view): a job
beyond ``max_jobs`` waits PENDING; a launch over the hourly cap uses fewer nodes or waits; a month
spent fails the job, running or not; a running job whose price rose above the cap runs on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from orchestrator.backends.base import NodePhase
from orchestrator.controller.actions import (
    Action,
    CloseSegment,
    MarkNodesEnded,
    SetWaiting,
    StartAttempt,
    StopNodes,
    Transition,
)
from orchestrator.controller.reconcile import reconcile, reconcile_and_explain
from orchestrator.costs.user_limits import UserLimits, UserStanding
from orchestrator.state.status import FailureReason, JobStatus
from tests.controller.test_reconcile import node, running, view

S = JobStatus
ALICE = UserStanding("alice", UserLimits(monthly_usd=100.0, hourly_usd=2.0, max_jobs=2))
"""Spot nodes cost 0.9 USD an hour in these views."""


def targets(actions: Sequence[Action]) -> list[JobStatus]:
    return [a.target for a in actions if isinstance(a, Transition)]


def test_a_job_beyond_max_jobs_waits_pending_with_the_reason() -> None:
    held = view(user=replace(ALICE, ahead=2))
    assert reconcile(held) == []
    (explained,) = reconcile_and_explain(held)
    assert isinstance(explained, SetWaiting) and explained.code == "user_jobs"
    assert "(budgets.default_user.max_jobs = 2)" in explained.message
    assert targets(reconcile(view(user=replace(ALICE, ahead=1)))) == [S.PLACING]


def test_a_spent_month_fails_a_waiting_or_placing_job() -> None:
    spent = replace(ALICE, month_spent_usd=100.0)
    for status in (S.PENDING, S.PLACING, S.RECOVERING):
        (failed,) = reconcile(view(status=status, attempt=int(status is S.RECOVERING), user=spent))
        assert isinstance(failed, Transition) and failed.target is S.FAILED
        assert failed.reason is FailureReason.OVER_BUDGET and "user 'alice' spent 100.00" in failed.message


def test_a_spent_month_stops_a_running_job_with_its_checkpoint() -> None:
    v = running(
        user=replace(ALICE, month_spent_usd=100.5),
        nodes=(node(0, NodePhase.RUNNING), node(1, NodePhase.RUNNING)),
    )
    actions = reconcile(v)
    assert actions[0] == StopNodes((), 30.0, "user over budget")
    assert CloseSegment("over budget") in actions and MarkNodesEnded(("t-a1-n0", "t-a1-n1")) in actions
    assert targets(actions) == [S.FAILED]


def test_a_launch_over_the_hourly_cap_uses_fewer_nodes_or_waits() -> None:
    elastic = view(
        "resources: {nodes: {min: 1, max: 4}}\n", status=S.PLACING, user=replace(ALICE, others_hourly_usd=0.1)
    )
    (start,) = [a for a in reconcile(elastic) if isinstance(a, StartAttempt)]
    assert start.nodes == 2, "1.9 USD/h of room at 0.9 a node"
    fixed = view("resources: {nodes: 3}\n", status=S.PLACING, user=ALICE)
    assert reconcile(fixed) == []
    (explained,) = reconcile_and_explain(fixed)
    assert isinstance(explained, SetWaiting) and explained.code == "user_hourly"
    assert targets(reconcile(replace(fixed, user=None))) == [S.LAUNCHING]


def test_a_running_job_over_the_hourly_cap_runs_on_but_does_not_grow() -> None:
    priced_up = replace(ALICE, others_hourly_usd=5.0)
    v = running("resources: {nodes: {min: 1, max: 2}}\n", nodes=(node(0, NodePhase.RUNNING),), open_segment_nodes=1,
                spot_capacity=2, user=priced_up)  # fmt: skip
    assert reconcile(v) == [], "neither stopped nor grown"
    assert targets(reconcile(replace(v, user=None))) == [S.RESCALING], "without the cap it would grow"
