"""Per-user limits through the real engine on the local side (the controller, the SQL store, the
simulated backend, a fake clock): a user's job beyond ``max_jobs`` waits PENDING with its reason and
starts when one ends; a launch over the hourly cap waits; a submission over the user's month is refused
with the numbers; once the month is spent, a running job is stopped FAILED (over_budget)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.controller.admission import Refused, admit
from orchestrator.controller.loop import Controller
from orchestrator.controller.placement import candidates_for
from orchestrator.costs.budgets import load_cost_config, submitted_user_standing, team_month_spent
from orchestrator.spec import load_spec_text
from orchestrator.state.state_rows import load_state
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing import FakeClock, SimScript, SimulatedBackend

START = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
SPEC = "command: train.py\nresources: {nodes: 1}\nmarket: {mode: spot}\n"
"""One simulated spot node: 1 USD an hour."""


class World:
    def __init__(self, tmp_path: Path, budgets: str) -> None:
        (tmp_path / "config.yaml").write_text(f"budgets: {budgets}\n")
        self.clock = FakeClock(START)
        self.backend = SimulatedBackend(self.clock)
        self.store = JobStore(tmp_path)
        self.controller = Controller(self.store, self.backend)  # reads the budgets of tmp_path/config.yaml
        self.ids: list[str] = []

    def submit(self, name: str, steps: int, user: str = "alice") -> str:
        spec = load_spec_text(f"name: {name}\nuser: {user}\n{SPEC}")
        job = self.store.create_job(name=name, user=user, team="t", backend=self.backend.name,
                                    spec_json=spec.model_dump_json(), deadline=None, now=self.clock.now())  # fmt: skip
        self.backend.script(job.id, SimScript(steps=steps))
        self.ids.append(job.id)
        return job.id

    def round(self, seconds: float = 60.0) -> None:
        """A minute: the world moves, then the controller ticks every job, oldest first."""
        self.clock.advance(seconds)
        self.backend.advance()
        for job_id in self.ids:
            self.controller.tick_job(job_id, self.clock.now())

    def status(self, job_id: str) -> JobStatus:
        return self.store.job(job_id).status

    def until(self, job_id: str, status: JobStatus, rounds: int = 60) -> None:
        for _ in range(rounds):
            if self.status(job_id) is status:
                return
            self.round()
        raise AssertionError(f"{job_id} is {self.status(job_id)}, not {status}, after {rounds} rounds")


def test_a_users_third_job_waits_pending_and_starts_when_one_ends(tmp_path: Path) -> None:
    world = World(tmp_path, "{users: {alice: {max_jobs: 2}}}")
    short = world.submit("short", steps=5)
    long = world.submit("long", steps=10**6)
    third = world.submit("third", steps=10**6)
    other = world.submit("bobs", steps=10**6, user="bob")  # another user: not held
    world.until(long, JobStatus.RUNNING)
    assert world.status(short) is JobStatus.RUNNING and world.status(other) is JobStatus.RUNNING
    assert world.status(third) is JobStatus.PENDING
    waiting = load_state(world.store, third).waiting
    assert waiting is not None and waiting.code == "user_jobs"
    assert waiting.message == (
        "user 'alice' has 2 job(s) running or ahead in line, its limit (budgets.users.alice.max_jobs = 2); "
        "starts when one of them ends"
    )
    assert world.backend.starts.keys().isdisjoint(n for n in world.backend.nodes if third in n)

    world.until(short, JobStatus.SUCCEEDED)
    world.until(third, JobStatus.RUNNING, rounds=6)
    assert world.status(long) is JobStatus.RUNNING


def test_a_launch_over_the_users_hourly_cap_waits_for_room(tmp_path: Path) -> None:
    world = World(tmp_path, "{default_user: {hourly_usd: 1.5}}")
    first = world.submit("first", steps=5)
    world.until(first, JobStatus.RUNNING)
    second = world.submit("second", steps=5)
    for _ in range(3):
        world.round()
    assert world.status(second) is JobStatus.PLACING and world.status(first) is JobStatus.RUNNING
    waiting = load_state(world.store, second).waiting
    assert waiting is not None and waiting.code == "user_hourly"
    assert "runs 1.00 USD/h; this launch adds 1.00, above its 1.50 USD/h cap" in waiting.message
    world.until(first, JobStatus.SUCCEEDED)
    world.until(second, JobStatus.SUCCEEDED)


def test_a_running_job_stops_when_its_users_month_is_spent(tmp_path: Path) -> None:
    world = World(tmp_path, "{users: {alice: {monthly_usd: 0.5}}}")
    job = world.submit("j", steps=10**6)
    world.until(job, JobStatus.RUNNING)
    world.until(job, JobStatus.FAILED, rounds=40)  # half an hour at 1 USD/h
    record = world.store.job(job)
    assert record.failure_reason is FailureReason.OVER_BUDGET
    assert "user 'alice' spent 0.5" in record.message and "budgets.users.alice.monthly_usd" in record.message
    state = load_state(world.store, job)
    assert state.open_segment is None, "its segment closed: the ledger has what it cost"
    world.round()
    assert all(n.phase.ended for n in world.backend.nodes.values()), "its nodes were stopped"


@pytest.mark.parametrize("spent_h", [290.5, 299.5])
def test_a_submission_over_the_users_month_is_refused_with_the_numbers(
    tmp_path: Path, spent_h: float
) -> None:
    """What ``gpuctl submit`` runs: admission with the user's spend from the store."""
    world = World(tmp_path, "{users: {alice: {monthly_usd: 300}}}")
    spent = world.submit("spent", steps=10**6)
    world.until(spent, JobStatus.RUNNING)
    world.clock.advance(spent_h * 3600)
    store, now = world.store, world.clock.now()
    spec = load_spec_text(f"name: next\nuser: alice\n{SPEC}goals: {{compute_hours: 5}}\n")
    decision = admit(
        spec,
        lambda s: candidates_for(s, world.backend.own_placements(s)),
        load_cost_config(tmp_path / "config.yaml"),
        lambda budget: team_month_spent(store.list_jobs(), store.segments(), budget.counts, now),
        user_spent=lambda user, limits: submitted_user_standing(
            store.list_jobs(), store.segments(), user, limits, now
        ),
    )
    if spent_h < 295:
        assert not isinstance(decision, Refused)
        return
    assert isinstance(decision, Refused) and decision.reason is FailureReason.OVER_BUDGET
    assert decision.message.startswith("user 'alice' has $0.")
    assert "left of its $300.00 monthly budget (spent $299." in decision.message
    assert decision.message.endswith("the estimated cost of job 'next' is $5.00")
    assert "budgets.users.alice.monthly_usd" in decision.how_to_fix
