"""One slow receiver holds up no other: each delivery has a wall-clock deadline (enforced against a server
that answers one byte at a time), and deliveries to different targets run side by side."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.notify import (
    DeliveryError,
    DeliveryWorker,
    Notification,
    Outbox,
    Pending,
    RetryPolicy,
    Sender,
)
from orchestrator.spec.notify import NotifyEvent, NotifyTarget
from tests.notify.delivery import no_secrets, until
from tests.notify.receivers import Trickler, WebhookReceiver

DEADLINE_S = 2.0


def note(job: str) -> Notification:
    return Notification(job=job, team="ml", user="ana", event=NotifyEvent.FAILED, kind="transition",
                        message="training exited with 1", time=datetime.now(UTC))  # fmt: skip


def slow_target(kind: str, trickler: Trickler) -> NotifyTarget:
    if kind == "webhook":
        return NotifyTarget(webhook=f"http://127.0.0.1:{trickler.port}/hook")
    return NotifyTarget(email={"to": ["ana@example.com"], "from": "gpuctl@example.com", "host": "127.0.0.1",
                               "port": trickler.port, "starttls": False})  # fmt: skip


@pytest.fixture(params=["webhook", "smtp"])
def trickler(request: pytest.FixtureRequest) -> tuple[str, Trickler]:
    kind: str = request.param
    fixture: Trickler = request.getfixturevalue("http_trickler" if kind == "webhook" else "smtp_trickler")
    return kind, fixture


def test_a_trickling_server_fails_at_the_deadline(trickler: tuple[str, Trickler]) -> None:
    kind, slow = trickler
    started = time.monotonic()
    with pytest.raises(DeliveryError) as err:
        Sender(no_secrets, deadline_s=DEADLINE_S).send(slow_target(kind, slow), note("slow"))
    took = time.monotonic() - started
    assert DEADLINE_S <= took < DEADLINE_S + 2, took
    assert slow.sent >= 3  # it was trickling all along: no single read waited long
    assert err.value.what == f"no complete answer within {DEADLINE_S:g} s, the limit for one delivery"
    assert not err.value.permanent  # retried with backoff, as any failure


def test_a_trickling_receiver_does_not_hold_up_another_target(
    trickler: tuple[str, Trickler], webhook: WebhookReceiver, tmp_path: Path
) -> None:
    kind, slow = trickler
    failed: list[str] = []
    gave_up = threading.Event()

    def on_failed(conn: Any, item: Pending, message: str) -> None:
        failed.append(message)
        gave_up.set()

    outbox = Outbox.standalone(tmp_path / "outbox.db", "test")
    worker = DeliveryWorker(outbox, Sender(no_secrets, deadline_s=DEADLINE_S), on_failed,
                            RetryPolicy(max_attempts=1), poll_s=0.05)  # fmt: skip
    outbox.add([(slow_target(kind, slow), note("slow-job")), (NotifyTarget(webhook=webhook.url), note("other-job"))],
               datetime.now(UTC))  # fmt: skip
    started = time.monotonic()
    worker.start()
    try:
        (body,) = webhook.wait_for(1, timeout=DEADLINE_S * 0.75)
        assert body["job"] == "other-job"
        until(lambda: slow.sent >= 1)
        assert not gave_up.is_set()  # the slow one was still trickling meanwhile
        assert gave_up.wait(DEADLINE_S + 5)
        assert time.monotonic() - started >= DEADLINE_S
    finally:
        worker.stop()
    (message,) = failed
    assert "'failed' notification" in message and f"no complete answer within {DEADLINE_S:g} s" in message
    assert outbox.pending() == 0


def test_a_targets_notifications_go_out_in_order_one_at_a_time(
    webhook: WebhookReceiver, tmp_path: Path
) -> None:
    outbox = Outbox.standalone(tmp_path / "outbox.db", "test")
    worker = DeliveryWorker(outbox, Sender(no_secrets), lambda *_: None, poll_s=0.05)
    target = NotifyTarget(webhook=webhook.url)
    outbox.add([(target, note(f"job-{i}")) for i in range(5)], datetime.now(UTC))
    assert worker.deliver_due() == 5
    assert [b["job"] for b in webhook.wait_for(5)] == [f"job-{i}" for i in range(5)]
    assert outbox.pending() == 0
