""" "Why is it waiting?": every waiting state of the reconcile table has a one-line reason with evidence,
and the idle watchdog reads the GPU monitors' activity (pure reconcile, no I/O)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from orchestrator.backends.base import NodeObservation, NodePhase
from orchestrator.controller.actions import Alert, SetWaiting, StopNodes, Transition
from orchestrator.controller.engine import apply
from orchestrator.controller.reconcile import JobView, market_view, reconcile_and_explain
from orchestrator.controller.waiting import WAITING_REASONS, WAITING_STATES
from orchestrator.spec import load_spec_text
from orchestrator.state.job_state import JobState, SegmentState
from orchestrator.state.status import JobStatus
from orchestrator.state.watch import GpuActivity, StepSample, WaitReason, WatchState
from tests.controller.test_reconcile import NOW, ON_DEMAND, SPOT, view

S = JobStatus

# One view per waiting state: a situation in which reconcile leaves the job in that state (or moves it).
WAITING_VIEWS: dict[JobStatus, JobView] = {
    S.PENDING: view(),
    S.PLACING: view("resources: {nodes: 2}\nmarket: {mode: spot}\n", status=S.PLACING, spot_capacity=0),
    S.RECOVERING: view(status=S.RECOVERING, attempt=1, draining=True),
    S.LAUNCHING: view(
        status=S.LAUNCHING,
        attempt=1,
        placement=SPOT,
        open_segment_nodes=1,
        nodes=(
            NodeObservation(
                "t-a1-n0",
                NodePhase.STARTING,
                queued=True,
                wait_reason="queued in SLURM job 7 on partition spot (squeue reason: Resources)",
            ),
        ),
    ),
    S.RESCALING: view(
        status=S.RESCALING,
        attempt=1,
        placement=SPOT,
        open_segment_nodes=1,
        nodes=(NodeObservation("t-a1-n0", NodePhase.RUNNING),),
    ),
    S.PREEMPTED: view(status=S.PREEMPTED, attempt=1),
}


def test_every_waiting_state_of_the_reconcile_table_has_a_reason() -> None:
    """A new non-terminal state other than RUNNING fails here until it gets its entry."""
    assert set(WAITING_REASONS) == WAITING_STATES
    assert set(WAITING_VIEWS) == WAITING_STATES
    for state, seen in WAITING_VIEWS.items():
        code, message = WAITING_REASONS[state](seen, market_view(seen))
        assert code and len(message) > 20 and "\n" not in message, (state, message)


@pytest.mark.parametrize(
    ("state", "code", "evidence"),
    [
        (S.PLACING, "no_spot", "no spot capacity in use1-az1 since 2026-11-22 12:00 UTC; waiting for spot"),
        (S.RECOVERING, "checkpoint", "stopped nodes of attempt 1 to save their checkpoint"),
        (
            S.LAUNCHING,
            "queued",
            "1 of 1 node(s) queued in SLURM job 7 on partition spot (squeue reason: Resources)",
        ),
    ],
)
def test_a_job_left_waiting_records_why_with_its_evidence(state: JobStatus, code: str, evidence: str) -> None:
    actions = reconcile_and_explain(WAITING_VIEWS[state])
    waits = [a for a in actions if isinstance(a, SetWaiting)]
    assert [w.code for w in waits] == [code]
    assert evidence in waits[0].message


def test_an_unschedulable_pod_gives_the_schedulers_message() -> None:
    pod = NodeObservation("t-a1-n0", NodePhase.STARTING, queued=True,
                          wait_reason="unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")  # fmt: skip
    (wait,) = [a for a in reconcile_and_explain(replace(WAITING_VIEWS[S.LAUNCHING], nodes=(pod,)))
               if isinstance(a, SetWaiting)]  # fmt: skip
    assert wait.code == "unschedulable" and "3 Insufficient nvidia.com/gpu" in wait.message


def test_the_same_reason_is_not_written_again_and_keeps_its_since() -> None:
    seen = WAITING_VIEWS[S.PLACING]
    (first,) = reconcile_and_explain(seen)
    assert isinstance(first, SetWaiting)
    assert "since 2026-11-22 12:00 UTC" in first.message
    recorded = WaitReason(code=first.code, message=first.message, since=NOW)
    assert reconcile_and_explain(replace(seen, waiting=recorded)) == []
    assert reconcile_and_explain(replace(seen, waiting=recorded, now=NOW + timedelta(minutes=5))) == []


def test_a_transition_into_a_waiting_state_records_its_message_and_running_clears_it() -> None:
    state = JobState(status=S.PENDING)
    placed = apply([Transition(S.PLACING, "choosing GPU type, market and zone")], state, "t", (), NOW).state
    assert placed.waiting is not None and placed.waiting.code == "placing"
    assert placed.waiting.message == "choosing GPU type, market and zone"
    launching = placed.model_copy(update={"status": S.LAUNCHING})
    assert apply([Transition(S.RUNNING, "training")], launching, "t", (), NOW).state.waiting is None


def _running(gpu: GpuActivity, body: str = "watchdog: {idle_after: 10m}\n") -> JobView:
    start = NOW - timedelta(hours=1)
    segment = SegmentState(attempt=1, placement=SPOT, nodes=1, started_at=start)
    steps = WatchState(samples=(StepSample(step=1, at=NOW - timedelta(seconds=20)),
                                StepSample(step=3, at=NOW - timedelta(seconds=1))), total_steps=100)  # fmt: skip
    spec = load_spec_text("name: t\ncommand: train.py\n" + body)
    return JobView(spec=spec, status=S.RUNNING, now=NOW, submitted_at=start, deadline=None, attempt=1,
                   placement=SPOT, nodes=(NodeObservation("t-a1-n0", NodePhase.RUNNING),), open_segment_nodes=1,
                   spot=SPOT, on_demand=ON_DEMAND, segments=(segment,), watch=steps, gpu=gpu)  # fmt: skip


def test_gpus_idle_for_idle_after_raise_idle_with_the_measured_evidence() -> None:
    idle_since = NOW - timedelta(minutes=11)
    actions = reconcile_and_explain(_running(GpuActivity(NOW, idle_since, 1.5)))
    (alert,) = [a for a in actions if isinstance(a, Alert)]
    assert alert.kind == "idle" and alert.episode == idle_since
    assert "under 5 % utilization for 11.0 min" in alert.message and "1.5 %" in alert.message
    episode = replace(_running(GpuActivity(NOW, idle_since, 1.5)),
                      watch=_running(GpuActivity(NOW, idle_since, 1.5)).watch.model_copy(update={"idle_for": idle_since}))  # fmt: skip
    assert reconcile_and_explain(episode) == []  # raised once per episode
    assert reconcile_and_explain(_running(GpuActivity(NOW, NOW - timedelta(minutes=9), 1.5))) == []


def test_idle_with_checkpoint_and_stop_stops_the_nodes() -> None:
    body = "watchdog: {idle_after: 5m, action: checkpoint-and-stop}\n"
    actions = reconcile_and_explain(_running(GpuActivity(NOW, NOW - timedelta(minutes=6), 0.0), body))
    assert any(isinstance(a, StopNodes) for a in actions)
    assert [a.target for a in actions if isinstance(a, Transition)] == [S.FAILED]


def test_a_placing_line_names_the_placement_once() -> None:
    """Issue 32: "placing on spot use2-az2: spot in use2-az2 (...)" said the zone twice."""
    placing = view("resources: {nodes: 1}\n", status=S.PLACING, spot_capacity=2)
    code, message = WAITING_REASONS[S.PLACING](placing, market_view(placing))
    zone = SPOT.zone
    assert code == "placing" and message.startswith(f"placing on spot {zone} (")
    assert message.count(zone) == 1, message
