"""How many statements a steady job's tick sends to the database: on PostgreSQL each is a round trip
to the server, what a controller round over many jobs costs."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.controller.loop import Controller
from orchestrator.spec import load_spec_text
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.testing import FakeClock, SimScript, SimulatedBackend
from tests.state.statements import counted

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

STEADY_TICK_STATEMENTS = 8
"""A running job's tick: its row (with options, cancel request, placement), nodes, segments, GPU
activity; one write transaction (BEGIN, the lease's fence, the row and its options, COMMIT)."""


ROUND_STATEMENTS = 10
"""A round's own statements, however many jobs it ticks: the jobs' rows, their leases (one
transaction), the rows, nodes, segments and GPU activity of the jobs it holds, and (PostgreSQL) the
running jobs' rows written at its end, all at once."""
ROUND_STATEMENTS_PER_JOB = {"sqlite": 4, "postgresql": 0}
"""A running job's tick in a round: its write transaction on SQLite (``BEGIN IMMEDIATE``, the fence,
the row and its options, ``COMMIT``: no round trips there); nothing of its own on PostgreSQL."""


def _running(tmp_path: Path, jobs: int = 1) -> tuple[JobStore, SimulatedBackend, Controller, str]:
    store = JobStore(tmp_path / "home")
    world = SimulatedBackend(FakeClock(datetime(2026, 11, 22, 12, 0, tzinfo=UTC)))
    spec = load_spec_text("name: steady\ncommand: train.py\nresources: {nodes: 1}\n")
    ids = []
    for _ in range(jobs):
        job = store.create_job(name=spec.name, user="u", team="t", backend=world.name,
                               spec_json=spec.model_dump_json(), deadline=None, now=world.clock.now())  # fmt: skip
        world.script(job.id, SimScript(steps=10**9))
        ids.append(job.id)
    controller = Controller(store, world)
    for _ in range(10):
        world.clock.advance(10.0)
        world.advance()
        controller.tick_all(world.clock.now())
        if all(store.job(i).status is JobStatus.RUNNING for i in ids):
            break
    assert all(store.job(i).status is JobStatus.RUNNING for i in ids)
    return store, world, controller, ids[0]


def test_a_running_jobs_tick_sends_few_statements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, world, controller, job_id = _running(tmp_path)
    world.clock.advance(1.0)  # within the zone watch's rewrite time: it writes once per round, not per job
    world.advance()
    controller.leases.take_round([job_id])
    with counted(store, monkeypatch) as sent:
        controller.tick_job(job_id, world.clock.now())
    assert controller.errors == {}
    assert len(sent) <= STEADY_TICK_STATEMENTS, "\n".join(s[:100] for s in sent)
    assert sum(1 for s in sent if "FROM jobs" in s) == 1, "the job's row is read once"


def test_a_cancel_requested_before_the_tick_is_seen_by_it(tmp_path: Path) -> None:
    store, world, controller, job_id = _running(tmp_path)
    store.request_cancel(job_id, world.clock.now())
    world.clock.advance(1.0)
    controller.tick_all(world.clock.now())  # the job's row, read with its cancel request at once
    assert store.job(job_id).status is JobStatus.CANCELLED


def test_a_round_reads_its_jobs_at_once_and_writes_their_rows_at_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = 5
    store, world, controller, _ = _running(tmp_path, jobs)
    world.clock.advance(1.0)
    world.advance()
    before = {job.id: job.updated_at for job in store.list_jobs()}
    with counted(store, monkeypatch) as sent:
        controller.tick_all(world.clock.now())
    assert controller.errors == {}
    per_job = ROUND_STATEMENTS_PER_JOB[store.engine.dialect.name]
    assert len(sent) <= ROUND_STATEMENTS + per_job * jobs, "\n".join(s[:100] for s in sent)
    after = {job.id: job.updated_at for job in store.list_jobs()}
    assert all(after[i] > before[i] for i in before), "every running job's tick was recorded"
