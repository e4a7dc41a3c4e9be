"""The one host (orchestrator/controller/host.py) on the smallest backend side: state in memory, nodes
on the testing kit's simulated backend. What a new backend supplies is this side and nothing more."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from operators.kubernetes.step import load_state as status_state
from operators.kubernetes.step import status_of
from orchestrator.backends.base import LaunchRequest, NodeObservation, NodePhase, Progress
from orchestrator.controller import engine, host
from orchestrator.controller.admission import Refused
from orchestrator.controller.placement import candidates_for
from orchestrator.errors import InternalError
from orchestrator.notify import JobRef
from orchestrator.spec import JobSpec, load_spec_text
from orchestrator.state.job_state import JobState, NodeLaunch, ZoneMemory
from orchestrator.state.progress_state import ProgressState, ThroughputSum
from orchestrator.state.state_rows import load_state, save_state
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing import FakeClock, SimScript, SimulatedBackend
from orchestrator.testing.states import SPOT, running_job

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL


class MemoryJob:
    """A :class:`host.JobSide`: the job's state in memory, its nodes on a :class:`SimulatedBackend`."""

    def __init__(self, spec: JobSpec, world: SimulatedBackend, max_passes: int = host.MAX_PASSES) -> None:
        self.spec, self.world, self.max_passes = spec, world, max_passes
        self.job_id, self.submitted_at, self.ref = "j", world.clock.now(), JobRef("j", spec.team, spec.user)
        self.stored = JobState()
        self.calls: list[str] = []
        self.events: list[str] = []
        self.found = candidates_for(spec, world.own_placements(spec))

    def load(self) -> JobState:
        self.calls.append("load")
        return self.stored

    def finish_interrupted(self, state: JobState, now: datetime) -> JobState:
        return self._launch(state, state.node_ids(NodeLaunch.INTENT)) if state.attempt else state

    def observe(self, state: JobState, now: datetime) -> host.Observation:
        active = [n.node_id for n in state.attempt_nodes if n.launch is not NodeLaunch.ENDED]
        seen = self.world.observe(self.job_id, state.attempt, active)
        return host.Observation(
            nodes=seen.nodes,
            notices={n.node_id: n.notice_at for n in seen.nodes if n.notice_at},
            progress=seen.progress,
            spot=self.found.cheapest_spot,
            on_demand=self.found.on_demand,
        )

    def persist(self, tick: host.Tick, now: datetime) -> None:
        self.calls.append("persist")
        self.stored = tick.state
        self.events += [e.kind if e.status is None else str(e.status) for e in tick.events]

    def carry_out(self, tick: host.Tick) -> None:
        self.calls.append("carry_out")
        for effect in tick.effects:
            if isinstance(effect, engine.LaunchNodes):
                self.stored = self._launch(self.stored, effect.node_ids)
            elif isinstance(effect, engine.StopNodes):
                self.world.stop(self.job_id, effect.attempt, effect.node_ids, effect.grace_s)

    def _launch(self, state: JobState, node_ids: tuple[str, ...]) -> JobState:
        if not node_ids:
            return state
        assert state.placement is not None
        request = LaunchRequest(self.job_id, state.attempt, self.spec, state.placement, node_ids,
                                self.spec.resources.min_nodes, self.spec.resources.max_nodes, "", Path("."))  # fmt: skip
        self.world.launch(request)
        return engine.mark_launched(state, node_ids)


def side(script: SimScript, max_passes: int = host.MAX_PASSES) -> MemoryJob:
    world = SimulatedBackend(FakeClock())
    world.script("j", script)
    return MemoryJob(load_spec_text("name: j\ncommand: t.py\nresources: {nodes: 2}\n"), world, max_passes)


def run_until_ended(job: MemoryJob, ticks: int = 30) -> None:
    for _ in range(ticks):
        host.run_tick(job, job.world.clock.now())
        if job.stored.status.terminal:
            return
        job.world.advance()
        job.world.clock.advance(10)
    raise AssertionError(f"not ended after {ticks} ticks: {job.stored.status}")


def test_a_job_runs_to_success_with_its_state_persisted_before_each_effect() -> None:
    job = side(SimScript(steps=3))
    run_until_ended(job)
    assert job.stored.status is JobStatus.SUCCEEDED
    assert job.events[:3] == ["PLACING", "LAUNCHING", "attempt"]  # chained within the first tick
    assert set(job.world.starts.values()) == {1} and len(job.world.starts) == 2
    assert job.world.finished == {"j": 1}
    ticks = " ".join(job.calls).split("load")[1:]
    assert all(t.split() == ["persist", "carry_out"] for t in ticks), job.calls


def test_pure_transitions_chain_up_to_the_sides_passes() -> None:
    job = side(SimScript(steps=3), max_passes=1)
    tick = host.run_tick(job, job.world.clock.now())
    assert tick.state.status is JobStatus.PLACING and tick.effects == ()


def test_a_notice_is_recorded_once_as_one_event_per_node() -> None:
    job = side(SimScript(steps=5, reclaim_at_step=2))
    run_until_ended(job)
    assert job.stored.status is JobStatus.SUCCEEDED and job.stored.preemptions == 1
    assert Counter(job.events)["preemption_notice"] == 2


def test_failing_goes_through_the_engine_and_the_transitions_table() -> None:
    job = side(SimScript(steps=100))
    for _ in range(3):
        host.run_tick(job, job.world.clock.now())
        job.world.advance()
    running = job.stored
    assert running.status is JobStatus.RUNNING
    applied = host.fail(running, "j", FailureReason.INTERNAL_ERROR, "broken", job.world.clock.now(), 30.0)
    assert (applied.state.status, applied.state.failure_reason) == (
        JobStatus.FAILED,
        FailureReason.INTERNAL_ERROR,
    )
    assert applied.effects == (engine.StopNodes(1, running.node_ids(), 30.0),)
    assert applied.state.open_segment is None and applied.state.segments[-1].end_reason == "failed"
    with pytest.raises(InternalError):  # FAILED is terminal: a second failure is a gpuctl bug
        host.fail(applied.state, "j", FailureReason.INTERNAL_ERROR, "again", job.world.clock.now(), 30.0)


def test_a_refusal_is_a_transition_of_the_engine() -> None:
    refused = Refused(FailureReason.OVER_BUDGET, "too dear", "raise the budget")
    applied = host.refuse(JobState(), "j", refused, FakeClock().now())
    assert (
        applied.state.status is JobStatus.FAILED and applied.state.failure_reason is FailureReason.OVER_BUDGET
    )
    assert applied.state.message == "too dear (to fix: raise the budget)"
    assert [e.status for e in applied.events] == [JobStatus.FAILED] and applied.effects == ()
    with pytest.raises(InternalError):
        host.refuse(JobState(status=JobStatus.SUCCEEDED), "j", refused, FakeClock().now())


def test_running_nodes_stand_in_for_progress_only_where_the_side_says_so() -> None:
    spec = load_spec_text("name: j\ncommand: t.py\n")
    state = JobState(status=JobStatus.LAUNCHING)
    nodes = (NodeObservation("j-a1-n0", NodePhase.RUNNING),)
    now = FakeClock().now()
    plain = host.build_view(spec, state, host.Observation(nodes=nodes), now, now)
    assert plain.progress is None and not plain.progress_fresh
    stand_in = host.build_view(spec, state, host.Observation(nodes=nodes, running_stands_in=True), now, now)
    assert stand_in.progress is not None and stand_in.progress.step == 0 and stand_in.progress_fresh


def test_the_zone_history_is_kept_in_the_state() -> None:
    clock = FakeClock()
    first, tick_h = host.watched(None, {"a": True, "b": False}, clock.now())
    assert tick_h == 0.0 and first.at == clock.now()
    later, tick_h = host.watched(first, {"a": True, "b": True}, clock.advance(1800))
    assert tick_h == 0.5 and later.available_h == {"a": 0.5, "b": 0.5} and later.up_runs == {"a": 1, "b": 1}
    kept = JobState(zone_history=later)
    assert JobState.from_status(kept.to_status()).zone_history == later
    assert host.zone_history(ZoneMemory()).observed_h == 0.0


def test_the_spread_of_ended_runs_is_kept_in_the_state() -> None:
    """The ended runs' counts and lengths (what plan-ahead's corridor reads) are kept from pass to
    pass and through the stored state; a state stored before they were reads as none seen."""
    clock = FakeClock()
    memory, _ = host.watched(None, {"a": True}, clock.now())
    for seconds, up in ((1800, True), (1800, False), (900, True), (900, False)):
        memory, _ = host.watched(memory, {"a": up}, clock.advance(seconds))
    history = host.zone_history(memory)
    assert history.ended_runs == {"a": 2}
    assert history.ended_run_h == pytest.approx({"a": 0.5 + 0.25})
    assert history.ended_run_h2 == pytest.approx({"a": 0.25 + 0.0625})
    assert JobState.from_status(JobState(zone_history=memory).to_status()).zone_history == memory
    older = memory.model_dump(mode="json")
    for key in ("ended_runs", "ended_run_h", "ended_run_h2"):
        del older[key]
    assert host.zone_history(ZoneMemory.model_validate(older)).ended_runs == {}


def test_progress_and_measurements_are_recorded_in_the_state_and_kept_the_same_by_both_stores(
    tmp_path: Path,
) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    store = JobStore(tmp_path)
    job_id = running_job(store, start, nodes=2)
    spec = load_spec_text("name: j\ncommand: t.py\nresources: {nodes: 2}\n")
    sql = load_state(store, job_id)  # a job kept before progress was: none yet
    assert sql.progress is None and sql.measurements is None
    status: dict[str, Any] = status_of({}, sql, (), start)  # the same job kept in a GPUJob's status
    nodes = tuple(NodeObservation(n, NodePhase.RUNNING) for n in sql.node_ids())
    for step, at_s in ((10, 30), (40, 60)):
        now = start + timedelta(seconds=at_s + 1)
        record = Progress(step=step, total_steps=100, loss=0.5, time=start + timedelta(seconds=at_s))
        seen = host.Observation(nodes=nodes, progress=record)
        tick = host.decide(spec, sql, seen, job_id, start, now)
        with store.transaction() as conn:
            save_state(conn, job_id, tick.loaded, tick.state, tick.events, now)
        sql = load_state(store, job_id)
        kube = host.decide(spec, status_state(status, job_id), seen, job_id, start, now)
        status = status_of(status, kube.state, kube.events, now)
    on_kube = status_state(status, job_id)
    assert sql.progress == on_kube.progress == ProgressState(step=40, total_steps=100, loss=0.5,
                                                             time=start + timedelta(seconds=60))  # fmt: skip
    assert sql.measurements == on_kube.measurements
    assert sql.measurements is not None and sql.measurements.by_gpu_type == {
        SPOT.gpu_type: ThroughputSum(steps=30, gpu_seconds=30.0 * 2 * SPOT.gpus_per_node, seconds=30.0)
    }
    assert status["progress"]["step"] == 40 and status["gpuMeasurements"]["last"]["step"] == 40
    # nothing new seen: the view reads the progress the state keeps (one path for every backend)
    later = host.decide(
        spec, sql, host.Observation(nodes=nodes), job_id, start, start + timedelta(seconds=90)
    )
    assert later.view.progress is not None and later.view.progress.step == 40
    assert later.state.measurements == sql.measurements
