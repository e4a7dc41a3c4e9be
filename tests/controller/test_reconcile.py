"""The pure reconcile step, table by table: same view in, same actions out."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from orchestrator.backends.base import NodeObservation, NodePhase, Placement, Progress
from orchestrator.catalog.offers import MarketKind
from orchestrator.controller.actions import (
    CloseSegment,
    CountPreemption,
    CountRestart,
    MarkNodesEnded,
    OpenSegment,
    SegmentStartsNow,
    StartAttempt,
    StopNodes,
    Transition,
)
from orchestrator.controller.reconcile import JobView, reconcile
from orchestrator.spec import load_spec_text
from orchestrator.state.status import FailureReason, JobStatus

S = JobStatus
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SPOT = Placement("V100", MarketKind.SPOT, "aws", "us-east-1", "use1-az1", "p3.2xlarge", 1, 0.9, 3.06, "test")
ON_DEMAND = replace(SPOT, market=MarketKind.ON_DEMAND, node_price_usd_per_hour=3.06)


def view(body: str = "", **kw: object) -> JobView:
    spec = load_spec_text("name: t\ncommand: train.py\n" + body)
    base = JobView(spec=spec, status=S.PENDING, now=NOW, submitted_at=NOW, deadline=None, attempt=0,
                   placement=None, spot=SPOT, on_demand=ON_DEMAND)  # fmt: skip
    return replace(base, **kw)  # type: ignore[arg-type]


def node(i: int, phase: NodePhase, code: int | None = None, notice: bool = False) -> NodeObservation:
    return NodeObservation(f"t-a1-n{i}", phase, code, NOW if notice else None)


def targets(actions: list[object]) -> list[JobStatus]:
    return [a.target for a in actions if isinstance(a, Transition)]


def test_pending_goes_placing() -> None:
    assert targets(reconcile(view())) == [S.PLACING]


def test_spot_capacity_launches_spot_on_as_many_nodes_as_allowed() -> None:
    actions = reconcile(view("resources: {nodes: {min: 1, max: 4}}\n", status=S.PLACING, spot_capacity=3))
    assert targets(actions) == [S.LAUNCHING]
    (start,) = [a for a in actions if isinstance(a, StartAttempt)]
    assert start.placement is SPOT and start.nodes == 3


def test_no_spot_without_deadline_waits_instead_of_paying_on_demand() -> None:
    assert reconcile(view("resources: {nodes: 2}\n", status=S.PLACING, spot_capacity=1)) == []


def test_no_spot_and_a_deadline_that_needs_it_falls_back_to_on_demand() -> None:
    v = view("goals: {deadline: 3h, compute_hours: 2.9}\n", status=S.RECOVERING, attempt=1, spot_capacity=0,
             deadline=NOW + timedelta(hours=3))  # fmt: skip
    (start,) = [a for a in reconcile(v) if isinstance(a, StartAttempt)]
    assert start.placement is ON_DEMAND


def test_no_spot_with_slack_before_the_deadline_keeps_waiting() -> None:
    v = view("goals: {deadline: 30h, compute_hours: 2}\n", status=S.RECOVERING, attempt=1, spot_capacity=0,
             deadline=NOW + timedelta(hours=30))  # fmt: skip
    assert reconcile(v) == []


def test_on_demand_mode_never_uses_spot() -> None:
    (start,) = [
        a
        for a in reconcile(view("market: {mode: on-demand}\n", status=S.PLACING))
        if isinstance(a, StartAttempt)
    ]
    assert start.placement is ON_DEMAND


def test_hourly_cap_refuses_with_the_numbers() -> None:
    actions = reconcile(view("resources: {nodes: 2}\nmarket: {max_hourly_usd: 1.0}\n", status=S.PLACING))
    (t,) = [a for a in actions if isinstance(a, Transition)]
    assert t.target is S.FAILED and t.reason is FailureReason.OVER_BUDGET and "1.80 USD/h" in t.message


def test_waits_for_old_nodes_to_save_before_relaunching() -> None:
    assert reconcile(view(status=S.RECOVERING, attempt=1, draining=True)) == []


def running(body: str = "resources: {nodes: 2}\n", **kw: object) -> JobView:
    fields: dict[str, object] = {
        "status": S.RUNNING,
        "attempt": 1,
        "placement": SPOT,
        "open_segment_nodes": 2,
        **kw,
    }
    return view(body, **fields)


def test_all_nodes_succeeded_finishes() -> None:
    actions = reconcile(running(nodes=(node(0, NodePhase.SUCCEEDED, 0), node(1, NodePhase.SUCCEEDED, 0))))
    assert targets(actions) == [S.SUCCEEDED] and CloseSegment("finished") in actions


def test_a_reclaimed_node_ends_a_fixed_size_attempt() -> None:
    actions = reconcile(running(nodes=(node(0, NodePhase.RUNNING), node(1, NodePhase.PREEMPTED, 1, notice=True)),
                                preempted_in_attempt=True))  # fmt: skip
    assert targets(actions) == [S.PREEMPTED]
    assert CountPreemption() in actions and CloseSegment("preempted") in actions
    assert StopNodes(("t-a1-n0",), 30.0, "attempt preempted") in actions


def test_collateral_failures_after_a_notice_are_a_preemption_not_a_crash() -> None:
    actions = reconcile(running(nodes=(node(0, NodePhase.FAILED, 1), node(1, NodePhase.RUNNING, notice=True)),
                                preempted_in_attempt=True))  # fmt: skip
    assert targets(actions) == [S.PREEMPTED] and CountRestart() not in actions


def test_elastic_job_keeps_running_on_fewer_nodes() -> None:
    v = running("resources: {nodes: {min: 1, max: 2}}\n",
                nodes=(node(0, NodePhase.RUNNING), node(1, NodePhase.PREEMPTED, 1, notice=True)))  # fmt: skip
    actions = reconcile(v)
    assert targets(actions) == [S.RESCALING]
    assert OpenSegment(1) in actions and MarkNodesEnded(("t-a1-n1",)) in actions


def test_elastic_job_grows_by_checkpoint_restart_when_capacity_returns() -> None:
    v = running("resources: {nodes: {min: 1, max: 2}}\n", nodes=(node(0, NodePhase.RUNNING),), open_segment_nodes=1,
                spot_capacity=2)  # fmt: skip
    actions = reconcile(v)
    assert targets(actions) == [S.RESCALING]
    assert StopNodes(("t-a1-n0",), 30.0, "growing") in actions
    relaunch = reconcile(replace(v, status=S.RESCALING, nodes=(), open_segment_nodes=None))
    (start,) = [a for a in relaunch if isinstance(a, StartAttempt)]
    assert start.nodes == 2


def test_elastic_job_does_not_grow_past_capacity() -> None:
    v = running("resources: {nodes: {min: 1, max: 3}}\n", nodes=(node(0, NodePhase.RUNNING),), open_segment_nodes=1,
                spot_capacity=1)  # fmt: skip
    assert reconcile(v) == []


def test_crash_is_retried_then_fails_with_the_reason() -> None:
    crashed = running(nodes=(node(0, NodePhase.FAILED, 3), node(1, NodePhase.RUNNING)))
    first = reconcile(crashed)
    assert targets(first) == [S.RECOVERING] and CountRestart() in first
    last = reconcile(replace(crashed, restarts=3))
    (t,) = [a for a in last if isinstance(a, Transition)]
    assert t.target is S.FAILED and t.reason is FailureReason.TOO_MANY_RESTARTS


def test_exit_code_outside_retry_list_is_a_user_error() -> None:
    v = running("resources: {nodes: 2}\nrecovery: {retry_exit_codes: [75]}\n",
                nodes=(node(0, NodePhase.FAILED, 2), node(1, NodePhase.RUNNING)))  # fmt: skip
    (t,) = [a for a in reconcile(v) if isinstance(a, Transition)]
    assert t.reason is FailureReason.USER_CODE_ERROR


def test_budget_reached_stops_with_checkpoint_and_fails_over_budget() -> None:
    v = running("resources: {nodes: 2}\ngoals: {budget_usd: 1.0}\n", cost_usd=1.01,
                nodes=(node(0, NodePhase.RUNNING), node(1, NodePhase.RUNNING)))  # fmt: skip
    actions = reconcile(v)
    assert StopNodes((), 30.0, "over budget") in actions
    assert [a.reason for a in actions if isinstance(a, Transition)] == [FailureReason.OVER_BUDGET]


def test_cancel_wins() -> None:
    actions = reconcile(running(cancel_requested=True, nodes=(node(0, NodePhase.RUNNING),)))
    assert targets(actions) == [S.CANCELLED]


def test_launching_becomes_running_on_fresh_progress_only() -> None:
    v = view(status=S.LAUNCHING, attempt=1, placement=SPOT, open_segment_nodes=1, nodes=(node(0, NodePhase.RUNNING),),
             progress=Progress(step=5))  # fmt: skip
    assert reconcile(v) == []
    assert targets(reconcile(replace(v, progress_fresh=True))) == [S.RUNNING]


def test_a_queued_attempt_restarts_its_segment_clock_until_a_node_runs() -> None:
    queued = replace(node(0, NodePhase.STARTING), queued=True)
    v = view(status=S.LAUNCHING, attempt=1, placement=SPOT, open_segment_nodes=1, nodes=(queued,))
    assert reconcile(v) == [SegmentStartsNow()]
    booting = view(status=S.LAUNCHING, attempt=1, placement=SPOT, open_segment_nodes=1,
                   nodes=(node(0, NodePhase.STARTING),))  # fmt: skip
    assert reconcile(booting) == []  # a cloud node that boots is billed
    assert reconcile(replace(v, nodes=(queued, node(1, NodePhase.RUNNING)))) == []


def test_an_attempt_that_never_left_the_queue_ends_with_a_free_segment() -> None:
    """Nodes reclaimed while still queued (Kubernetes pods unschedulable past the spot-shortage limit)
    held nothing: their segment restarts now before it closes, so it costs nothing."""
    gone = replace(node(0, NodePhase.PREEMPTED), queued=True)
    v = view(status=S.LAUNCHING, attempt=1, placement=SPOT, open_segment_nodes=1, nodes=(gone,))
    actions = reconcile(v)
    assert actions.index(SegmentStartsNow()) < actions.index(CloseSegment("preempted"))
    assert targets(actions) == [S.PREEMPTED]
    ran = replace(v, nodes=(node(0, NodePhase.PREEMPTED),))
    assert SegmentStartsNow() not in reconcile(ran)


def test_deadline_passed_while_waiting_fails_with_reason() -> None:
    v = view(status=S.RECOVERING, attempt=1, spot_capacity=0, deadline=NOW - timedelta(minutes=1))
    (t,) = reconcile(v)
    assert isinstance(t, Transition) and t.reason is FailureReason.DEADLINE_IMPOSSIBLE


def test_terminal_is_quiet() -> None:
    assert reconcile(view(status=S.SUCCEEDED)) == []


def test_growth_while_still_rescaling_records_an_event_instead_of_a_transition() -> None:
    v = running("resources: {nodes: {min: 1, max: 2}}\n", status=S.RESCALING, nodes=(node(0, NodePhase.RUNNING),),
                open_segment_nodes=1, spot_capacity=2)  # fmt: skip
    actions = reconcile(v)
    assert targets(actions) == [] and StopNodes(("t-a1-n0",), 30.0, "growing") in actions


def test_max_preemptions_ends_the_job() -> None:
    v = running("resources: {nodes: 2}\nrecovery: {max_preemptions: 2}\n", preemptions=2, preempted_in_attempt=True,
                nodes=(node(0, NodePhase.RUNNING), node(1, NodePhase.PREEMPTED, 1, notice=True)))  # fmt: skip
    (t,) = [a for a in reconcile(v) if isinstance(a, Transition)]
    assert (
        t.target is S.FAILED
        and t.reason is FailureReason.TOO_MANY_RESTARTS
        and "max_preemptions (2)" in t.message
    )
    assert targets(reconcile(replace(v, preemptions=1))) == [S.PREEMPTED]


def test_an_eviction_without_a_notice_time_is_a_preemption_too() -> None:
    actions = reconcile(running(nodes=(node(0, NodePhase.RUNNING), node(1, NodePhase.PREEMPTED, 75))))
    assert targets(actions) == [S.PREEMPTED] and CountPreemption() in actions


FINISHED = Progress(step=60, total_steps=60, finished=True)


def test_nodes_reclaimed_after_training_finished_end_the_job_succeeded_not_preempted() -> None:
    """The controller was down while the attempt finished and the market then reclaimed the nodes:
    the notice is moot, the job must not be preempted and run again."""
    for phase, notice in ((NodePhase.PREEMPTED, True), (NodePhase.LOST, False)):
        nodes = (node(0, phase, 143 if notice else None, notice), node(1, NodePhase.SUCCEEDED, 0))
        v = view("resources: {nodes: 2}\n", status=S.RUNNING, attempt=1, placement=SPOT, nodes=nodes,
                 open_segment_nodes=2, progress=FINISHED, progress_fresh=True, preempted_in_attempt=notice)  # fmt: skip
        actions = reconcile(v)
        assert targets(actions) == [S.SUCCEEDED]
        assert not [a for a in actions if isinstance(a, (CountPreemption, StartAttempt))]
        all_reclaimed = tuple(node(i, phase, 143 if notice else None, notice) for i in range(2))
        assert targets(reconcile(replace(v, nodes=all_reclaimed))) == [S.SUCCEEDED]


def test_a_finished_line_from_before_this_segment_does_not_count() -> None:
    nodes = (node(0, NodePhase.PREEMPTED, 143, True), node(1, NodePhase.PREEMPTED, 143, True))
    v = view("resources: {nodes: 2}\n", status=S.RUNNING, attempt=2, placement=SPOT, nodes=nodes,
             open_segment_nodes=2, progress=FINISHED, progress_fresh=False, preempted_in_attempt=True)  # fmt: skip
    assert targets(reconcile(v)) == [S.PREEMPTED]


def test_an_elastic_node_lost_after_training_finished_is_not_a_rescale() -> None:
    nodes = (node(0, NodePhase.RUNNING), node(1, NodePhase.LOST))
    v = view("resources: {nodes: {min: 1, max: 2}}\n", status=S.RUNNING, attempt=1, placement=SPOT,
             nodes=nodes, open_segment_nodes=2, progress=FINISHED, progress_fresh=True)  # fmt: skip
    assert reconcile(v) == []


def test_training_that_finished_before_a_stop_took_effect_is_not_placed_again() -> None:
    """The controller decided to grow (or move) the job and stopped its nodes, but training finished
    first, while the controller was down: the job succeeded; placing it again would run it twice."""
    for status in (S.RESCALING, S.RECOVERING):
        v = view("resources: {nodes: {min: 1, max: 2}}\n", status=status, attempt=1, placement=SPOT,
                 progress=FINISHED, attempt_finished=True)  # fmt: skip
        actions = reconcile(v)
        assert targets(actions) == [S.SUCCEEDED]
        assert not [a for a in actions if isinstance(a, StartAttempt)]
    assert targets(reconcile(replace(v, attempt_finished=False))) == [S.LAUNCHING]


def test_nodes_lingering_after_training_finished_are_stopped_and_the_job_succeeds() -> None:
    """torchrun's exit barrier can hold an agent for minutes after its workers are done: the final
    checkpoint is saved, so after a short wait the controller stops the nodes instead of paying."""
    nodes = (node(0, NodePhase.RUNNING), node(1, NodePhase.SUCCEEDED, 0))
    finished = replace(FINISHED, time=NOW - timedelta(seconds=5))
    v = view("resources: {nodes: 2}\n", status=S.RUNNING, attempt=1, placement=SPOT, nodes=nodes,
             open_segment_nodes=2, progress=finished, progress_fresh=True)  # fmt: skip
    assert reconcile(v) == []  # still exiting normally
    later = replace(v, now=NOW + timedelta(seconds=60))
    actions = reconcile(later)
    assert targets(actions) == [S.SUCCEEDED]
    (stop,) = [a for a in actions if isinstance(a, StopNodes)]
    assert stop.node_ids == ("t-a1-n0",)
    assert CloseSegment("finished") in actions and not [a for a in actions if isinstance(a, StartAttempt)]
