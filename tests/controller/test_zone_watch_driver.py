"""The local and SLURM controllers keep a market log across jobs and give each job the week before it.

A backend whose one spot zone has capacity only at night (22:00 to 06:00 UTC): the driver records
what it sees at every tick of every job; a job submitted after a week of that starts with a log whose
days agree on a daily cycle, kept with the job, the same after a controller restart.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.controller.driver import stored_spec
from orchestrator.controller.loop import Controller
from orchestrator.policies.context import MarketLog
from orchestrator.spec import load_spec_text
from orchestrator.state.state_rows import load_state
from orchestrator.state.store import JobStore
from orchestrator.state.zone_watch import ZoneWatch
from orchestrator.testing import FakeClock, SimScript, SimulatedBackend
from orchestrator.testing.backend import SIM_SPOT

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

START = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


class NightSpot(SimulatedBackend):
    def spot_capacity(self, job_id: str, zone: str, now: datetime) -> int | None:
        return 1 if now.hour >= 22 or now.hour < 6 else 0


def submit(store: JobStore, world: SimulatedBackend, now: datetime, name: str) -> str:
    spec = load_spec_text(f"name: {name}\ncommand: train.py\nresources: {{nodes: 1}}\n")
    job = store.create_job(name=name, user="u", team="t", backend=world.name, spec_json=spec.model_dump_json(),
                           deadline=None, now=now)  # fmt: skip
    world.script(job.id, SimScript(steps=10**6))
    return job.id


def night_market(tmp_path: Path) -> tuple[FakeClock, NightSpot, JobStore]:
    clock = FakeClock(START)
    return clock, NightSpot(clock), JobStore(tmp_path)


def test_a_job_starts_with_the_week_the_controller_watched(tmp_path: Path) -> None:
    clock, world, store = night_market(tmp_path)
    watcher = submit(store, world, clock.now(), "watcher")
    controller = Controller(store, world)
    for _ in range(8 * 24 * 4):  # eight days, a pass every 15 minutes
        clock.advance(900)
        world.advance()
        controller.tick_job(watcher, clock.now())
    watched = ZoneWatch(store).spans([SIM_SPOT.zone], START, clock.now())
    assert 8 <= len(watched) <= 20  # a span a night and a day (spans of one capacity, not a row a pass)
    assert ZoneWatch(store).job_log(watcher) is not None  # its own (empty: nothing before it)

    newcomer = submit(store, world, clock.now(), "newcomer")
    Controller(store, world).tick_job(newcomer, clock.now())
    kept = ZoneWatch(store).job_log(newcomer)
    assert kept is not None
    log = MarketLog.from_dict(kept)
    assert log.history.observed_h >= 167.0 and len(log.hourly_any_up) == 168
    assert log.history.available_h[SIM_SPOT.zone] == 7 * 8  # eight hours a night, seven nights
    batch = log.to_batch([SIM_SPOT.zone])
    assert batch.cycle_strength[0] > 1.0  # the days agree: spot at night
    assert abs((batch.cycle_peak_h[0] - 2.0 + 12.0) % 24.0 - 12.0) < 1.5  # the middle of the night

    # a restarted controller, an hour later: the same log (kept with the job, not rebuilt)
    clock.advance(3600)
    world.advance()
    restarted = Controller(store, world)
    restarted.tick_job(newcomer, clock.now())
    assert ZoneWatch(store).job_log(newcomer) == kept


def test_the_policy_is_given_the_kept_log(tmp_path: Path) -> None:
    """What the driver gives the market policy: the job's kept log, through its market view."""
    clock, world, store = night_market(tmp_path)
    job_id = submit(store, world, clock.now(), "j")
    controller = Controller(store, world)
    controller.tick_job(job_id, clock.now())
    job = store.job(job_id)
    view = controller.driver._observe(job, load_state(store, job_id), stored_spec(job), clock.now())
    assert view.market is not None and view.market.market_log is not None
    assert view.market.market_log == MarketLog.from_dict(ZoneWatch(store).job_log(job_id) or {})
