"""The one engine: every action type is applied, transitions are checked, effects follow the state."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.backends.base import Placement
from orchestrator.catalog.offers import MarketKind
from orchestrator.controller import actions as act
from orchestrator.controller import engine
from orchestrator.errors import InternalError
from orchestrator.state.job_state import JobState, NodeLaunch
from orchestrator.state.status import FailureReason, JobStatus

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SPOT = Placement("V100", MarketKind.SPOT, "aws", "us-east-1", "use1-az1", "p3.2xlarge", 1, 0.9, 3.06, "test")

SAMPLES: dict[type, act.Action] = {
    act.Transition: act.Transition(JobStatus.PLACING, "placing"),
    act.StartAttempt: act.StartAttempt(SPOT, 2),
    act.StopNodes: act.StopNodes((), 5.0, "stop"),
    act.CloseSegment: act.CloseSegment("closed"),
    act.OpenSegment: act.OpenSegment(1),
    act.SegmentStartsNow: act.SegmentStartsNow(),
    act.MarkNodesEnded: act.MarkNodesEnded(("j-a1-n0",)),
    act.CountPreemption: act.CountPreemption(),
    act.CountRestart: act.CountRestart(),
    act.RightSize: act.RightSize("A100", True, "cheaper per step"),
    act.RecordEvent: act.RecordEvent("note", "hello"),
    act.Alert: act.Alert("stalled", "step 3 has not advanced", NOW),
    act.ClearAlert: act.ClearAlert("budget_at_risk"),
    act.SetWaiting: act.SetWaiting("no_spot", "no spot capacity"),
}


def _running() -> JobState:
    applied = engine.apply([act.StartAttempt(SPOT, 2)], JobState(status=JobStatus.LAUNCHING), "j", (), NOW)
    return applied.state


def test_every_action_type_is_in_the_union_and_applied_by_the_engine() -> None:
    """A new action class must join the ``Action`` union and be handled here (``assert_never`` fails
    type checking; this fails at run time)."""
    declared = {
        obj for _, obj in inspect.getmembers(act, inspect.isclass)
        if dataclasses.is_dataclass(obj) and obj.__module__ == act.__name__
    }  # fmt: skip
    assert set(typing.get_args(act.Action)) == declared
    assert set(SAMPLES) == declared, "add a sample of the new action to SAMPLES"
    state = _running().model_copy(update={"status": JobStatus.PENDING})
    for kind, sample in SAMPLES.items():
        engine.apply([sample], state, "j", ("j-a1-n0", "j-a1-n1"), NOW)  # raises if not handled
        assert kind in declared


def test_an_illegal_transition_raises_and_changes_nothing() -> None:
    state = JobState(status=JobStatus.SUCCEEDED)
    with pytest.raises(InternalError, match="illegal job status transition SUCCEEDED -> RUNNING"):
        engine.apply([act.Transition(JobStatus.RUNNING, "again")], state, "j", (), NOW)


def test_start_attempt_records_intents_and_asks_the_backend_to_launch_them() -> None:
    applied = engine.apply([act.StartAttempt(SPOT, 2)], JobState(status=JobStatus.LAUNCHING), "j", (), NOW)
    assert applied.state.attempt == 1
    assert [(n.node_id, n.launch) for n in applied.state.attempt_nodes] == [
        ("j-a1-n0", NodeLaunch.INTENT),
        ("j-a1-n1", NodeLaunch.INTENT),
    ]
    assert applied.effects == (engine.LaunchNodes(1, ("j-a1-n0", "j-a1-n1")),)
    (segment,) = applied.state.segments
    assert (segment.nodes, segment.started_at, segment.ended_at) == (2, NOW, None)


def test_preemption_ends_nodes_closes_the_segment_and_stops_what_runs() -> None:
    state = _running()
    later = NOW + timedelta(hours=1)
    actions: list[act.Action] = [
        act.CountPreemption(),
        act.StopNodes(("j-a1-n1",), 30.0, "attempt preempted"),
        act.CloseSegment("preempted"),
        act.MarkNodesEnded(("j-a1-n0", "j-a1-n1")),
        act.Transition(JobStatus.PREEMPTED, "reclaimed"),
    ]
    applied = engine.apply(actions, state.model_copy(update={"status": JobStatus.RUNNING}), "j", (), later)
    s = applied.state
    assert s.status is JobStatus.PREEMPTED and s.preemptions == 1 and s.preempted_in_attempt
    assert all(n.launch is NodeLaunch.ENDED for n in s.attempt_nodes)
    assert s.segments[-1].ended_at == later and s.segments[-1].end_reason == "preempted"
    assert s.cost_usd(later) == pytest.approx(2 * 0.9)
    assert applied.effects == (
        engine.StopNodes(1, ("j-a1-n1",), 30.0),
        engine.ReleaseNodes(1, ("j-a1-n0", "j-a1-n1")),
    )
    assert [e.status for e in applied.events if e.kind == "transition"] == [JobStatus.PREEMPTED]


def test_stop_without_ids_stops_the_nodes_observed_alive() -> None:
    applied = engine.apply([act.StopNodes((), 5.0, "cancelled")], _running(), "j", ("j-a1-n0",), NOW)
    assert applied.effects == (engine.StopNodes(1, ("j-a1-n0",), 5.0),)


def test_failed_terminal_transition_is_reported_as_ended() -> None:
    reason = FailureReason.OVER_BUDGET
    applied = engine.apply([act.Transition(JobStatus.FAILED, "spent", reason)], _running(), "j", (), NOW)
    assert applied.ended and applied.state.failure_reason is reason


def test_the_state_round_trips_through_a_gpujob_status() -> None:
    state = engine.apply([act.CountRestart()], _running(), "j", (), NOW).state
    status = state.to_status()
    assert status["attempt"] == 1 and status["attemptNodes"][0]["nodeId"] == "j-a1-n0"
    assert JobState.from_status(status) == state
