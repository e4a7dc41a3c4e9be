"""Notifications through the controller, on the simulated backend: what a job's events send, once each,
whatever crashes; a receiver that is down costs retries and one ``notify_failed`` event, never tick time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from orchestrator.controller.loop import Controller
from orchestrator.notify import RetryPolicy
from orchestrator.spec import load_spec_text
from orchestrator.state.store import JobStore
from orchestrator.testing import FakeClock, SimScript, SimulatedBackend
from tests.notify.receivers import WebhookReceiver, down_url_fixture, webhook_fixture  # noqa: F401 - fixtures

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

ROUND_S = 10.0
FAST = RetryPolicy(first_delay_s=0.01, factor=2.0, max_attempts=3)


def submit(store: JobStore, world: SimulatedBackend, clock: FakeClock, yaml: str, script: SimScript) -> str:
    spec = load_spec_text(yaml)
    job = store.create_job(name=spec.name, user="ana", team=spec.team, backend=world.name,
                           spec_json=spec.model_dump_json(), deadline=None, now=clock.now())  # fmt: skip
    world.script(job.id, script)
    return job.id


def run_job(store: JobStore, world: SimulatedBackend, clock: FakeClock, controller: Controller, job_id: str,
            rounds: int = 60) -> list[float]:  # fmt: skip
    """Tick until the job ends; returns each tick's duration."""
    took = []
    for _ in range(rounds):
        clock.advance(ROUND_S)
        world.advance()
        start = time.perf_counter()
        controller.tick_job(job_id, clock.now())
        took.append(time.perf_counter() - start)
        if store.job(job_id).status.terminal:
            return took
    raise AssertionError(f"job still {store.job(job_id).status} after {rounds} rounds")


def deliver_all(controller: Controller, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while controller.notifier.outbox.pending():
        assert time.monotonic() < deadline, "notifications still waiting"
        controller.notifier.deliver_due()
        controller.notifier._wake.wait(0.01)


def job_yaml(url: str, events: str, extra: str = "") -> str:
    return (f"name: nj\ncommand: train.py\nresources: {{nodes: 2}}\n{extra}"
            f"notify:\n  - webhook: {url}\n    format: json\n    events: {events}\n")  # fmt: skip


def test_preemption_and_success_notify_once_even_across_a_controller_restart(
    tmp_path: Path, webhook: WebhookReceiver
) -> None:
    clock = FakeClock()
    world = SimulatedBackend(clock)
    store = JobStore(tmp_path / "home")
    job_id = submit(store, world, clock, job_yaml(webhook.url, "[preempted, succeeded]"),
                    SimScript(steps=5, reclaim_at_step=2))  # fmt: skip
    ticking = Controller(store, world, retry=FAST)  # its delivery worker never runs: "killed" after the job
    run_job(store, world, clock, ticking, job_id)
    assert webhook.requests == []
    fresh = Controller(JobStore(tmp_path / "home"), world, retry=FAST)  # a new process finds the outbox
    deliver_all(fresh)
    bodies = webhook.wait_for(2)
    assert [b["event"] for b in bodies] == ["preempted", "succeeded"]
    preempted, succeeded = bodies
    assert preempted["job"] == job_id and preempted["team"] == "default" and preempted["user"] == "ana"
    assert "reclaimed by the market" in preempted["message"]
    assert preempted["evidence"]["preemptions"] == 1 and preempted["evidence"]["zone"] == "sim-1a"
    assert succeeded["message"] == "training finished" and succeeded["evidence"]["attempt"] == 2
    deliver_all(fresh)
    assert len(webhook.requests) == 2  # sent once


def test_budget_thresholds_notify_once_each_across_restarts(tmp_path: Path, webhook: WebhookReceiver) -> None:
    clock = FakeClock()
    world = SimulatedBackend(clock)
    store = JobStore(tmp_path / "home")
    yaml = job_yaml(webhook.url, "[budget, failed]", extra="goals: {budget_usd: 0.05}\n")
    job_id = submit(store, world, clock, yaml, SimScript(steps=10_000))
    for _ in range(60):  # a new controller every round: what was announced is remembered in the store
        clock.advance(ROUND_S)
        world.advance()
        controller = Controller(JobStore(tmp_path / "home"), world, retry=FAST)
        controller.tick_job(job_id, clock.now())
        controller.hand_back()  # it stops: the next one takes the job's lease at once
        if store.job(job_id).status.terminal:
            break
    deliver_all(Controller(store, world, retry=FAST))
    bodies = webhook.wait_for(5)
    # The forecast warns first (budget_at_risk, on the budget topic), then each share once.
    assert [(b["event"], b["kind"], b["evidence"].get("percent")) for b in bodies][:1] == [
        ("budget", "budget_at_risk", None)
    ]
    assert [(b["event"], b["evidence"].get("percent")) for b in bodies[1:]] == [
        ("budget", 50),
        ("budget", 80),
        ("budget", 100),
        ("failed", None),
    ]
    risk = bodies[0]["evidence"]
    assert risk["budget_usd"] == 0.05 and risk["projected_cost_usd"] > 0.05 > risk["spent_usd"]
    assert bodies[1]["evidence"]["budget_usd"] == 0.05 and bodies[1]["evidence"]["spent_usd"] >= 0.025
    assert bodies[-1]["evidence"]["reason"] == "over_budget"
    assert [e.kind for e in store.events(job_id)].count("budget") == 3


def test_a_failing_receiver_is_retried_then_one_notify_failed_event(
    tmp_path: Path, webhook: WebhookReceiver
) -> None:
    webhook.status = 503
    clock = FakeClock()
    world = SimulatedBackend(clock)
    store = JobStore(tmp_path / "home")
    job_id = submit(store, world, clock, job_yaml(webhook.url, "[preempted, succeeded]"),
                    SimScript(steps=4, reclaim_at_step=2))  # fmt: skip
    controller = Controller(store, world, retry=FAST)
    controller.notifier.start()
    try:
        run_job(store, world, clock, controller, job_id)
        webhook.wait_for(2 * FAST.max_attempts)
        deadline = time.monotonic() + 20
        while controller.notifier.outbox.pending():
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        controller.stop()
    controller.notifier.deliver_due()
    assert len(webhook.requests) == 2 * FAST.max_attempts  # each notification tried 3 times, no more
    failed = [e for e in store.events(job_id) if e.kind == "notify_failed"]
    assert len(failed) == 2, failed  # one per notification
    assert {e.message.split("'")[1] for e in failed} == {"preempted", "succeeded"}
    assert all("after 3 tries: the webhook answered HTTP 503" in e.message for e in failed)
    assert all(
        "SECRETPATH" not in e.message and "json webhook http://127.0.0.1:" in e.message for e in failed
    )


@pytest.fixture
def hanging() -> Iterator[tuple[str, threading.Event, threading.Event]]:
    """A webhook that accepts and then does not answer until released."""
    entered, release = threading.Event(), threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            entered.set()
            release.wait(30)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", entered, release
    release.set()
    server.shutdown()
    server.server_close()


def test_ticks_do_not_wait_for_a_hanging_or_down_receiver(
    tmp_path: Path, hanging: tuple[str, threading.Event, threading.Event], down_url: str
) -> None:
    url, entered, release = hanging
    clock = FakeClock()
    world = SimulatedBackend(clock)
    store = JobStore(tmp_path / "home")
    quiet = submit(store, world, clock, "name: quiet\ncommand: train.py\nresources: {nodes: 2}\n",
                   SimScript(steps=6, reclaim_at_step=2))  # fmt: skip
    yaml = job_yaml(url, "[preempted, on_demand, succeeded]") + f"  - webhook: {down_url}\n"
    loud = submit(store, world, clock, yaml, SimScript(steps=6, reclaim_at_step=2))
    controller = Controller(store, world, retry=RetryPolicy(first_delay_s=0.01, max_attempts=1000))
    baseline = run_job(store, world, clock, controller, quiet)
    controller.notifier.start()
    try:
        took = run_job(store, world, clock, controller, loud)
        assert entered.wait(10), "the worker never reached the hanging receiver"
        assert controller.notifier.outbox.pending() >= 2  # blocked on the first send: the rest waits
        print(
            f"tick time, no notify: max {max(baseline) * 1000:.1f} ms; with a hanging and a down "
            f"receiver: max {max(took) * 1000:.1f} ms, median {sorted(took)[len(took) // 2] * 1000:.1f} ms"
        )
        assert max(took) < max(baseline) + 0.5  # the ticks never waited on the network
    finally:
        release.set()
        controller.stop()
