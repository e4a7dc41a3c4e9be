"""The stall watchdog and the forecasts' alerts, on the engine's simulated backend with a fake clock.

Training in the simulated world advances one step per round while its nodes run; ``stall_at_step``
hangs it there with every node still running (what a rank stuck in a collective looks like from
outside). The controller must raise ``stalled`` once, within the configured time, and take the action.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.controller.loop import Controller
from orchestrator.spec import load_spec_text
from orchestrator.state.forecast import forecast
from orchestrator.state.state_rows import load_state
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing import FakeClock, SimScript, SimulatedBackend

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL


class World:
    def __init__(self, tmp_path: Path, body: str, script: SimScript) -> None:
        self.clock = FakeClock()
        self.backend = SimulatedBackend(self.clock)
        self.store = JobStore(tmp_path / "home")
        spec = load_spec_text(
            "name: w\ncommand: train.py\nresources: {nodes: 2}\nmarket: {mode: spot}\n" + body
        )
        job = self.store.create_job(name=spec.name, user="u", team="t", backend=self.backend.name,
                                    spec_json=spec.model_dump_json(), deadline=None, now=self.clock.now())  # fmt: skip
        self.job_id = job.id
        self.backend.script(job.id, script)
        self.controller = Controller(self.store, self.backend)

    def round(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.backend.advance()
        self.controller.tick_job(self.job_id, self.clock.now())

    def events(self, kind: str) -> list[str]:
        return [e.message for e in self.store.events(self.job_id) if e.kind == kind]

    def status(self) -> JobStatus:
        return self.store.job(self.job_id).status

    def run_until_stalled(self, seconds: float, limit: int = 200) -> float:
        """Rounds until the job's step stops moving; returns the fake time (s) at which it stopped."""
        for _ in range(limit):
            self.round(seconds)
            job = self.backend.jobs[self.job_id]
            if job.script.stall_at_step == job.step and "stall" in job.fired:
                assert job.progress_at is not None
                return (job.progress_at - FakeClock().now()).total_seconds()
        raise AssertionError("training never reached the stall")


def _ago(world: World, since_s: float) -> float:
    return (world.clock.now() - FakeClock().now()).total_seconds() - since_s


def test_a_hung_step_raises_stalled_once_within_stall_after_and_alert_changes_nothing(tmp_path: Path) -> None:
    world = World(tmp_path, "watchdog: {stall_after: 60s}\n", SimScript(steps=1000, stall_at_step=5))
    stalled_at = world.run_until_stalled(10.0)
    detected = None
    for _ in range(30):
        world.round(10.0)
        if world.events("stalled") and detected is None:
            detected = _ago(world, stalled_at)
    assert detected is not None and 60.0 <= detected <= 70.0, detected
    (message,) = world.events("stalled")  # once per episode, not every tick
    assert "step 5 has not advanced" in message and "stall_after 60 s" in message
    assert world.status() is JobStatus.RUNNING  # alert: nothing else happens


def test_restart_action_resumes_on_a_new_attempt_and_finishes(tmp_path: Path) -> None:
    world = World(
        tmp_path, "watchdog: {stall_after: 60s, action: restart}\n", SimScript(steps=12, stall_at_step=5)
    )
    world.run_until_stalled(10.0)
    for _ in range(60):
        world.round(10.0)
        if world.status().terminal:
            break
    job = world.store.job(world.job_id)
    assert job.status is JobStatus.SUCCEEDED, job.message
    assert (job.attempts, job.restarts) == (2, 1)
    assert len(world.events("stalled")) == 1
    assert any("watchdog: step 5 has not advanced" in m for m in world.events("transition"))
    assert world.backend.finished[world.job_id] == 1


def test_checkpoint_and_stop_fails_the_job_as_stalled_and_stops_every_node(tmp_path: Path) -> None:
    world = World(
        tmp_path,
        "watchdog: {stall_after: 60s, action: checkpoint-and-stop}\n",
        SimScript(steps=100, stall_at_step=3),
    )
    world.run_until_stalled(10.0)
    for _ in range(12):
        world.round(10.0)
    job = world.store.job(world.job_id)
    assert job.status is JobStatus.FAILED and job.failure_reason is FailureReason.STALLED, job.message
    assert all(n.phase.ended for n in world.backend.nodes.values())
    assert all(s.ended_at is not None for s in load_state(world.store, world.job_id).segments)


def test_default_stall_after_is_20_median_step_times_when_above_10_minutes(tmp_path: Path) -> None:
    world = World(tmp_path, "", SimScript(steps=1000, stall_at_step=6))
    stalled_at = world.run_until_stalled(60.0)  # a step a minute: 20 of them = 20 min > 10 min
    seen_at = None
    for _ in range(30):
        world.round(60.0)
        if world.events("stalled"):
            seen_at = _ago(world, stalled_at)
            break
    assert seen_at is not None and 1200.0 <= seen_at <= 1260.0, seen_at
    assert "stall_after 20.0 min" in world.events("stalled")[0]


def test_a_job_that_advances_never_stalls(tmp_path: Path) -> None:
    world = World(tmp_path, "watchdog: {stall_after: 30s}\n", SimScript(steps=40))
    for _ in range(60):
        world.round(10.0)
    assert world.status() is JobStatus.SUCCEEDED
    assert world.events("stalled") == []


def test_forecast_eta_and_cost_match_hand_computed_values(tmp_path: Path) -> None:
    # 2 spot nodes at 1 USD/h (on-demand 3 USD/h), one step per 10 s round: 0.1 steps/s.
    world = World(tmp_path, "", SimScript(steps=1000))
    for _ in range(40):
        world.round(10.0)
    state = load_state(world.store, world.job_id)
    now = world.clock.now()
    found = forecast(state, now)
    assert found is not None
    step = found.step
    eta_s = (1000 - step) / 0.1
    assert found.steps_per_second == pytest.approx(0.1, rel=0.02)
    assert found.eta_seconds == pytest.approx(eta_s, rel=0.02)
    assert found.finish_at == pytest.approx(
        now + timedelta(seconds=eta_s), abs=timedelta(seconds=eta_s * 0.02)
    )
    assert found.cost_to_finish_usd == pytest.approx(eta_s / 3600 * 2 * 1.0, rel=0.02)
    assert found.cost_to_finish_on_demand_usd == pytest.approx(eta_s / 3600 * 2 * 3.0, rel=0.02)
    assert found.projected_cost_usd == pytest.approx(state.cost_usd(now) + eta_s / 3600 * 2.0, rel=0.02)


def test_a_budget_the_forecast_exceeds_is_alerted_before_it_is_spent(tmp_path: Path) -> None:
    # 1000 steps at 0.1 steps/s on 2 x 1 USD/h: about 5.6 USD to finish, over a 3 USD budget.
    world = World(tmp_path, "goals: {budget_usd: 3}\n", SimScript(steps=1000))
    spent_at_alert = None
    for _ in range(60):
        world.round(10.0)
        if world.events("budget_at_risk"):
            spent_at_alert = load_state(world.store, world.job_id).cost_usd(world.clock.now())
            break
    assert spent_at_alert is not None and spent_at_alert < 3.0
    (message,) = world.events("budget_at_risk")
    assert "over the 3.00 USD budget" in message
    for _ in range(20):
        world.round(10.0)
    assert len(world.events("budget_at_risk")) == 1  # once per episode
