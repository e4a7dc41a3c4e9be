"""Several controllers, one outbox: each worker claims a row before sending it, so every notification
reaches its receiver once however many workers race over the outbox, and a claim left by a worker that
died mid-send passes and the notification is sent by another. On both engines."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from alembic import command

from orchestrator.notify import DeliveryWorker, Notification, Outbox, Sender
from orchestrator.spec.notify import NotifyEvent, NotifyTarget
from orchestrator.state.database import upgrade_schema
from tests.notify.delivery import no_secrets, until
from tests.notify.receivers import WebhookReceiver
from tests.state.test_migrations import _config

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
TARGETS = 6
EACH = 5


def note(job: str) -> Notification:
    return Notification(job=job, team="ml", user="ana", event=NotifyEvent.FAILED, kind="transition",
                        message="training exited with 1", time=NOW)  # fmt: skip


def target(webhook: WebhookReceiver, k: int) -> NotifyTarget:
    return NotifyTarget(webhook=f"{webhook.url}/{k}")


def test_two_controllers_workers_send_each_notification_once(
    database_url: str, webhook: WebhookReceiver
) -> None:
    upgrade_schema(database_url)
    outboxes = [Outbox(database_url, "local", holder=name) for name in ("controller-a", "controller-b")]
    items = [(target(webhook, k), note(f"t{k}-{i}")) for i in range(EACH) for k in range(TARGETS)]
    outboxes[0].add(items, datetime.now(UTC))
    workers = [DeliveryWorker(o, Sender(no_secrets), lambda *_: None, poll_s=0.02) for o in outboxes]
    for worker in workers:  # both find every target's first row due at once
        worker.start()
    try:
        webhook.wait_for(len(items), timeout=30)
        until(lambda: outboxes[0].pending() == 0, timeout=20)
    finally:
        for worker in workers:
            worker.stop()
    jobs = [body["job"] for body in webhook.requests]
    assert Counter(jobs) == Counter(note.job for _, note in items)  # each exactly once
    for k in range(TARGETS):  # and each target's in order
        assert [j for j in jobs if j.startswith(f"t{k}-")] == [f"t{k}-{i}" for i in range(EACH)]


def test_a_claim_left_by_a_dead_worker_is_taken_over_once_it_passes(
    database_url: str, webhook: WebhookReceiver
) -> None:
    upgrade_schema(database_url)
    dead = Outbox(database_url, "local", holder="dead")
    dead.add([(target(webhook, 0), note("first")), (target(webhook, 0), note("second"))], NOW)
    first, *_ = dead.due(NOW)
    assert dead.claim(first, NOW, NOW + timedelta(seconds=90))  # then killed before sending
    clock = [NOW + timedelta(seconds=1)]
    survivor = DeliveryWorker(Outbox(database_url, "local", holder="alive"), Sender(no_secrets),
                              lambda *_: None, clock=lambda: clock[0], claim_s=90)  # fmt: skip
    assert not survivor.outbox.claim(first, clock[0], clock[0] + timedelta(seconds=90))
    assert survivor.deliver_due() == 0  # the target is held: neither its first nor its second goes
    clock[0] = NOW + timedelta(seconds=91)
    assert survivor.deliver_due() == 2
    assert [body["job"] for body in webhook.wait_for(2)] == ["first", "second"]
    assert survivor.outbox.pending() == 0
    assert not dead.give_up(first, lambda _conn: None)  # the dead worker's late outcome changes nothing


def test_notifications_waiting_at_revision_0006_are_claimable_after_the_upgrade(
    database_url: str, webhook: WebhookReceiver
) -> None:
    engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        command.upgrade(_config(conn), "0006")
        conn.execute(
            sa.text("INSERT INTO notifications (job_id, backend, target_json, notification_json, created_at, next_at)"
                    " VALUES ('old', 'local', :target, :note, :at, :at)"),
            {"target": target(webhook, 0).model_dump_json(by_alias=True, exclude_none=True),
             "note": json.dumps(note("old").to_json()), "at": NOW.isoformat()},
        )  # fmt: skip
    engine.dispose()
    upgrade_schema(database_url)
    outbox = Outbox(database_url, "local")
    (waiting,) = outbox.due(NOW)
    assert outbox.claim(waiting, NOW, NOW + timedelta(seconds=5))
    assert outbox.due(NOW) == []  # claimed: not due to anyone else
    assert outbox.due(NOW + timedelta(seconds=6)) == [waiting]  # the claim passed


def test_an_outbox_file_of_an_earlier_gpuctl_gets_the_claim_columns(tmp_path: Path) -> None:
    path = tmp_path / "notify-outbox.db"
    conn = sqlite3.connect(path)
    conn.execute(  # the table as the Kubernetes operator's outbox file had it before claims
        "CREATE TABLE notifications (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, backend TEXT NOT NULL,"
        " target_json TEXT NOT NULL, notification_json TEXT NOT NULL, created_at TEXT NOT NULL,"
        " attempts INTEGER NOT NULL DEFAULT 0, next_at TEXT NOT NULL, last_error TEXT)"
    )
    conn.commit()
    conn.close()
    outbox = Outbox.standalone(path, "kubernetes")
    outbox.add([(NotifyTarget(webhook="http://127.0.0.1:9/hook"), note("kept"))], NOW)
    (waiting,) = outbox.due(NOW)
    assert outbox.claim(waiting, NOW, NOW + timedelta(seconds=5))
    assert Outbox.standalone(path, "kubernetes").due(NOW) == []  # opened again: nothing to add
