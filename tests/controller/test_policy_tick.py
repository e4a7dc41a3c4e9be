"""The market policy's tick (``MarketView.tick_h``: how late a decision may be carried out, part of its
safety margin) is never shorter than the controller's interval between passes, however soon one pass
follows another; later passes count the time that actually passed."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.controller import host
from orchestrator.controller.driver import stored_spec
from orchestrator.controller.loop import Controller
from orchestrator.spec import load_spec_text
from orchestrator.state.job_state import ZoneMemory
from orchestrator.state.state_rows import load_state
from orchestrator.state.store import JobStore
from orchestrator.testing import FakeClock, SimScript, SimulatedBackend

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

START = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


def test_the_tick_is_at_least_the_interval() -> None:
    assert host.decision_tick_h(None, START, 5.0) == 5.0 / 3600  # a first look
    assert host.decision_tick_h(ZoneMemory(at=START), START, 5.0) == 5.0 / 3600  # a pass right after
    clock = FakeClock(START)
    assert host.decision_tick_h(ZoneMemory(at=START), clock.advance(30), 5.0) == 30.0 / 3600  # a late pass


def test_the_driver_gives_the_policy_at_least_its_interval(tmp_path: Path) -> None:
    clock = FakeClock(START)
    world, store = SimulatedBackend(clock), JobStore(tmp_path)
    spec = load_spec_text("name: j\ncommand: train.py\nresources: {nodes: 1}\n")
    job = store.create_job(name="j", user="u", team="t", backend=world.name, spec_json=spec.model_dump_json(),
                           deadline=None, now=clock.now())  # fmt: skip
    world.script(job.id, SimScript(steps=10**6))
    controller = Controller(store, world, tick_seconds=5.0)
    controller.tick_job(job.id, clock.now())

    def policy_tick_h() -> float:
        found = store.job(job.id)
        view = controller.driver._observe(found, load_state(store, job.id), stored_spec(found), clock.now())
        assert view.market is not None
        return view.market.tick_h

    assert policy_tick_h() == 5.0 / 3600  # a pass at once after the last: still a whole interval
    clock.advance(20)
    assert policy_tick_h() == 20.0 / 3600  # a pass 20 s on: the time that passed
