"""Crash safety proven by injection: the controller dies at every kind of write→effect boundary.

200 jobs run on the simulated backend (no processes, no sleeps, a fake clock) with reclaims, lost
nodes of elastic jobs (rescale and growth), failing training and cancels. The controller is killed
again and again at the boundaries it passes (before and after each commit, launch and stop; the
gaps between crashes cycle through 17 to 41 boundaries, odd and even (boundaries come in before/after pairs), a fixed schedule); the simulated world
goes on for a round while it is down (attempts end, the market acts), and a new controller with no
memory takes over the same store. Afterwards every job has ended once, in the state its script
implies, every node was started exactly once, no training finished twice, nothing still runs, and
the segments add up to the ledger.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from orchestrator.controller.loop import Controller
from orchestrator.costs.inputs import read_ledger
from orchestrator.costs.ledger import job_costs
from orchestrator.spec import load_spec_text
from orchestrator.state.state_rows import load_state
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.state.tables import job_leases
from orchestrator.testing import (
    ControllerCrash,
    CrashingBackend,
    CrashingStore,
    CrashPlan,
    FakeClock,
    SimScript,
    SimulatedBackend,
)

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

ROUND_S = 10.0
BOUNDARY_KINDS = {
    "before commit",
    "after commit",
    "before launch",
    "after launch",
    "before stop",
    "after stop",
}


def _scenario(index: int) -> tuple[str, SimScript, int | None]:
    """(spec resources, world script, round of a cancel) of job ``index``: five kinds, in turn."""
    kind = index % 5
    if kind == 1:
        return "nodes: 2", SimScript(steps=5, reclaim_at_step=2), None
    if kind == 2:
        return "nodes: {min: 1, max: 2}", SimScript(steps=6, lose_node_at_step=2), None
    if kind == 3:
        return "nodes: 2", SimScript(steps=4, fail_at_step=2), None
    if kind == 4:
        return "nodes: 2", SimScript(steps=100_000), 3 + index % 7  # runs until cancelled
    return "nodes: 2", SimScript(steps=4), None


def _submit(store: JobStore, world: SimulatedBackend, clock: FakeClock, count: int) -> dict[str, int | None]:
    cancels: dict[str, int | None] = {}
    for i in range(count):
        resources, script, cancel_round = _scenario(i)
        spec = load_spec_text(f"name: job-{i}\ncommand: train.py\nresources: {{{resources}}}\n")
        job = store.create_job(name=spec.name, user="u", team="t", backend=world.name,
                               spec_json=spec.model_dump_json(), deadline=None, now=clock.now())  # fmt: skip
        world.script(job.id, script)
        cancels[job.id] = cancel_round
    return cancels


def _run(
    tmp_path: Path, jobs: int, plan: CrashPlan, max_rounds: int = 200
) -> tuple[JobStore, SimulatedBackend, dict[str, int | None], int]:
    clock = FakeClock()
    world = SimulatedBackend(clock)
    store = CrashingStore(tmp_path / "home", plan)
    plan.enabled = False
    cancels = _submit(store, world, clock, jobs)
    plan.enabled = True
    backend = CrashingBackend(world, plan)
    controller = Controller(store, backend)
    restarts = 0
    for round_no in range(max_rounds):
        clock.advance(ROUND_S)
        world.advance()
        for job_id, cancel_round in cancels.items():
            if cancel_round == round_no:
                plan.enabled = False  # the user's `gpuctl cancel` is another process: it does not crash
                store.request_cancel(job_id, clock.now())
                plan.enabled = True
        pending = [j.id for j in store.list_jobs() if not j.status.terminal]
        if not pending and not any(not n.phase.ended for n in world.nodes.values()):
            plan.enabled = False  # the run is over: the checks that read the store after it never crash
            return store, world, cancels, restarts
        for job in store.list_jobs():
            try:
                controller.tick_job(job.id, clock.now())
            except ControllerCrash:
                restarts += 1
                clock.advance(ROUND_S)  # down for a round: the world goes on without a controller
                world.advance()
                _lease_time_passes(store, plan, controller.leases.holder)
                store = CrashingStore(tmp_path / "home", plan)
                controller = Controller(store, backend)  # a new process: nothing carried over in memory
    raise AssertionError(f"not every job ended within {max_rounds} rounds")


def _lease_time_passes(store: JobStore, plan: CrashPlan, dead: str) -> None:
    """The dead controller's leases run out while it is down (the lease time passing, as the clock
    advancing is the world's time passing): the next controller may take its jobs."""
    plan.enabled = False
    with store.transaction() as conn:
        conn.execute(update(job_leases).where(job_leases.c.holder == dead).values(expires_at=0.0))
    plan.enabled = True


def _run_shared(tmp_path: Path, jobs: int, plan: CrashPlan, max_rounds: int = 200) -> tuple[
    JobStore, SimulatedBackend, dict[str, int | None], int
]:  # fmt: skip
    """Two controllers on one database, each ticking the jobs whose leases it holds (every round,
    in turn first); one that crashes is replaced by a new process, and its jobs go to whichever
    controller takes their leases first once they run out."""
    clock = FakeClock()
    world = SimulatedBackend(clock)
    store = CrashingStore(tmp_path / "home", plan)
    plan.enabled = False
    cancels = _submit(store, world, clock, jobs)
    plan.enabled = True
    backend = CrashingBackend(world, plan)
    controllers = [Controller(CrashingStore(tmp_path / "home", plan), backend) for _ in range(2)]
    restarts = 0
    for round_no in range(max_rounds):
        clock.advance(ROUND_S)
        world.advance()
        for job_id, cancel_round in cancels.items():
            if cancel_round == round_no:
                plan.enabled = False
                store.request_cancel(job_id, clock.now())
                plan.enabled = True
        pending = [j.id for j in store.list_jobs() if not j.status.terminal]
        if not pending and not any(not n.phase.ended for n in world.nodes.values()):
            plan.enabled = False  # the run is over: the checks that read the store after it never crash
            return store, world, cancels, restarts
        for index in (0, 1) if round_no % 2 == 0 else (1, 0):
            try:
                controllers[index].tick_all(clock.now())
            except ControllerCrash:
                restarts += 1
                _lease_time_passes(store, plan, controllers[index].leases.holder)
                controllers[index] = Controller(CrashingStore(tmp_path / "home", plan), backend)
    raise AssertionError(f"not every job ended within {max_rounds} rounds")


def _check_every_invariant(store: JobStore, world: SimulatedBackend, cancels: dict[str, int | None]) -> None:
    jobs = store.list_jobs()
    states = Counter(j.status for j in jobs)
    for job in jobs:
        expected = JobStatus.CANCELLED if cancels[job.id] is not None else JobStatus.SUCCEEDED
        assert job.status is expected, (job.id, job.status, job.message, world.jobs[job.id].script)
        assert world.finished.get(job.id, 0) == (1 if expected is JobStatus.SUCCEEDED else 0), job.id
        state = load_state(store, job.id)
        assert all(s.ended_at is not None for s in state.segments), (job.id, "a segment left open")
        for before, after in zip(state.segments, state.segments[1:], strict=False):
            assert before.ended_at is not None and before.ended_at <= after.started_at, (job.id, "overlap")
        recorded = {n.node_id for n in store.nodes(job.id)}
        started = {n for n, node in world.nodes.items() if node.job_id == job.id}
        assert started <= recorded, (job.id, "a node ran that the store does not know")
    assert all(count == 1 for count in world.starts.values()), {
        n: c for n, c in world.starts.items() if c != 1
    }
    assert not [n for n, node in world.nodes.items() if not node.phase.ended], "nodes still running"
    ledger = read_ledger(store)
    end = max(s.ended_at or s.started_at for s in ledger.segments)
    billed = {c.job_id: c.cost_usd for c in job_costs(ledger.jobs, ledger.segments, end)}
    for job in jobs:  # the ledger (what reports sum) and the job's own state agree, job by job
        assert billed.get(job.id, 0.0) == pytest.approx(load_state(store, job.id).cost_usd(end)), job.id
    assert states[JobStatus.SUCCEEDED] and states[JobStatus.CANCELLED]


def test_without_crashes_every_scenario_ends_as_scripted(tmp_path: Path) -> None:
    store, world, cancels, restarts = _run(tmp_path, 25, CrashPlan())
    assert restarts == 0
    _check_every_invariant(store, world, cancels)
    reclaimed = [j for j in store.list_jobs() if j.name.endswith(("-1", "-6"))]
    assert all(j.preemptions == 1 and j.attempts == 2 for j in reclaimed)
    elastic = load_state(store, next(j.id for j in store.list_jobs() if j.name == "job-2"))
    assert [s.nodes for s in elastic.segments][:2] == [2, 1], "lost a node, continued on one"


GAPS = (17, 22, 29, 30, 37, 26, 41, 34)
"""Boundaries between two crashes, in turn: a tick passes about six, so a crash every few ticks."""


def test_hundreds_of_crashes_at_every_kind_of_boundary_lose_nothing_and_run_nothing_twice(
    tmp_path: Path,
) -> None:
    plan = CrashPlan(gaps=GAPS, first=3)
    store, world, cancels, restarts = _run(tmp_path, 200, plan)
    assert restarts >= 100
    assert set(plan.crashes) == BOUNDARY_KINDS, plan.crashes  # every kind of boundary was hit
    _check_every_invariant(store, world, cancels)


@pytest.mark.parametrize("first", range(12))
def test_each_early_boundary_of_a_small_run(tmp_path: Path, first: int) -> None:
    """Twelve small runs, the first crash at boundary 0, 1, ... 11 (every boundary of the first ticks)."""
    plan = CrashPlan(gaps=GAPS, first=first)
    store, world, cancels, _ = _run(tmp_path, 10, plan)
    _check_every_invariant(store, world, cancels)


def test_two_controllers_sharing_the_database_crash_and_take_each_others_jobs_over(tmp_path: Path) -> None:
    plan = CrashPlan(gaps=GAPS, first=3)
    store, world, cancels, restarts = _run_shared(tmp_path, 30, plan)
    assert restarts >= 10
    _check_every_invariant(store, world, cancels)
    with store.transaction() as conn:
        changed_hands = conn.execute(select(func.count()).where(job_leases.c.generation > 1)).scalar()
        holders = conn.execute(select(func.count(job_leases.c.holder.distinct()))).scalar()
    assert changed_hands, "no job was taken over by another controller"
    assert holders and holders > 2, "the jobs were ticked by one controller only"
