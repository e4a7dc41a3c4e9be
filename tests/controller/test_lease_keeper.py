"""Controllers sharing one database tick only the jobs whose leases they hold; a controller whose
lease ran out (stalled) writes nothing and launches nothing; a stopping controller hands its jobs over."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.backends.base import LaunchRequest
from orchestrator.controller.loop import Controller
from orchestrator.spec import load_spec_text
from orchestrator.state.status import FailureReason, JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing import FakeClock, SimScript, SimulatedBackend

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL


def _job(store: JobStore, world: SimulatedBackend, clock: FakeClock) -> str:
    spec = load_spec_text("name: leased\ncommand: train.py\nresources: {nodes: 2}\n")
    job = store.create_job(name=spec.name, user="u", team="t", backend=world.name,
                           spec_json=spec.model_dump_json(), deadline=None, now=clock.now())  # fmt: skip
    world.script(job.id, SimScript(steps=4))
    return job.id


def _rounds(controller: Controller, world: SimulatedBackend, clock: FakeClock, count: int) -> None:
    for _ in range(count):
        clock.advance(10.0)
        world.advance()
        controller.tick_all(clock.now())


def test_only_the_holder_ticks_and_a_stopped_one_hands_the_job_over(tmp_path: Path) -> None:
    clock = FakeClock()
    world = SimulatedBackend(clock)
    store = JobStore(tmp_path / "home")
    job_id = _job(store, world, clock)
    first, second = Controller(store, world), Controller(store, world)
    _rounds(first, world, clock, 3)
    assert store.job(job_id).status is JobStatus.RUNNING
    events = len(store.events(job_id))
    _rounds(second, world, clock, 3)
    assert len(store.events(job_id)) == events, "the second controller does not hold the job: no tick"
    assert first.leases.held and not second.leases.held
    first.stop()  # hands its leases back
    _rounds(second, world, clock, 10)
    assert store.job(job_id).status is JobStatus.SUCCEEDED
    assert all(count == 1 for count in world.starts.values()) and len(world.starts) == 2


def test_a_controller_whose_lease_ran_out_writes_and_launches_nothing(tmp_path: Path) -> None:
    clock = FakeClock()
    world = SimulatedBackend(clock)
    store = JobStore(tmp_path / "home")
    job_id = _job(store, world, clock)
    stalled = Controller(store, world, lease_s=-1.0)  # every lease it takes has run out when it writes
    _rounds(stalled, world, clock, 3)
    assert store.job(job_id).status is JobStatus.PENDING
    assert [e.message for e in store.events(job_id)] == ["submitted"], "no event of its ticks"
    assert not world.starts, "nothing launched"
    live = Controller(store, world)
    _rounds(live, world, clock, 10)
    assert store.job(job_id).status is JobStatus.SUCCEEDED
    _rounds(stalled, world, clock, 2)  # the live controller's lease stands: the stalled one stays out
    assert all(count == 1 for count in world.starts.values()) and len(world.starts) == 2


class _SlowLaunch(SimulatedBackend):
    """A backend whose first launch runs ``during_launch`` before it returns (a launch that outlasts
    the lease: a rendezvous store slow to start on a busy machine)."""

    during_launch: Callable[[], None] | None = None

    def launch(self, request: LaunchRequest) -> None:
        during, self.during_launch = self.during_launch, None
        if during is not None:
            during()
        super().launch(request)


def test_a_tick_that_outlasts_the_lease_keeps_its_job(tmp_path: Path) -> None:
    clock = FakeClock()
    world = _SlowLaunch(clock)
    store = JobStore(tmp_path / "home")
    job_id = _job(store, world, clock)
    lease_s = 1.2
    holder, other = Controller(store, world, lease_s=lease_s), Controller(store, world)
    taken: list[set[str]] = []

    def contend() -> None:  # the other controller tries to take the job all through a long launch
        deadline = time.monotonic() + 2.5 * lease_s
        while time.monotonic() < deadline:
            taken.append(other.leases.take_round([job_id]))
            time.sleep(0.05)

    world.during_launch = contend
    holder.leases.start()
    try:
        _rounds(holder, world, clock, 3)
    finally:
        holder.leases.stop()
    assert taken and not any(taken), "the job changed hands in the middle of its holder's launch"
    assert store.job(job_id).status is JobStatus.RUNNING
    assert world.starts == {node: 1 for node in world.starts} and len(world.starts) == 2


def _running_job(tmp_path: Path) -> tuple[JobStore, SimulatedBackend, FakeClock, Controller, str]:
    clock = FakeClock()
    world = SimulatedBackend(clock)
    store = JobStore(tmp_path / "home")
    spec = load_spec_text("name: steady\ncommand: train.py\nresources: {nodes: 1}\n")
    job = store.create_job(name=spec.name, user="u", team="t", backend=world.name,
                           spec_json=spec.model_dump_json(), deadline=None, now=clock.now())  # fmt: skip
    world.script(job.id, SimScript(steps=10**9))
    controller = Controller(store, world)
    _rounds(controller, world, clock, 4)
    assert store.job(job.id).status is JobStatus.RUNNING
    return store, world, clock, controller, job.id


def test_a_controller_whose_lease_ran_out_records_nothing_of_a_running_jobs_tick(tmp_path: Path) -> None:
    store, world, clock, holder, job_id = _running_job(tmp_path)
    before = store.job(job_id)
    holder.leases.leases.lease_s = -1.0  # its leases run out before the round's writes
    _rounds(holder, world, clock, 2)
    assert store.job(job_id) == before, "the running job's row was not written"
    assert job_id not in holder.leases.held, "the job is known lost"
    other = Controller(store, world)
    _rounds(other, world, clock, 1)
    assert store.job(job_id).updated_at > before.updated_at, "the controller that took it over ticks it"


def test_rows_read_under_a_lease_of_another_generation_are_read_again(tmp_path: Path) -> None:
    store, world, clock, controller, job_id = _running_job(tmp_path)
    generation = controller.leases.generation(job_id)
    assert generation is not None
    read = controller.driver.read_round([job_id])[job_id]  # read before the cancel below
    store.request_cancel(job_id, clock.now())
    clock.advance(1.0)
    world.advance()
    controller.tick_job(job_id, clock.now(), (generation - 1, read))  # the job changed hands since
    assert store.job(job_id).status is JobStatus.CANCELLED, "the tick read the job's rows as they are now"


def test_a_write_later_in_the_round_supersedes_the_rows_left_for_its_end(tmp_path: Path) -> None:
    store, world, clock, controller, job_id = _running_job(tmp_path)
    clock.advance(1.0)
    world.advance()
    with controller.driver.round():
        controller.tick_job(job_id, clock.now())  # only observed: its row is left for the round's end
        assert controller.driver.fail(job_id, FailureReason.INTERNAL_ERROR, "broken", clock.now())
    assert store.job(job_id).status is JobStatus.FAILED, "the round's end did not set the row back"
