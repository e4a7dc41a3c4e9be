"""Webhook (Slack and JSON) and SMTP deliveries carry the expected payloads, for every event type."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.backends.secrets import reference_value
from orchestrator.notify import DeliveryError, Notification, Sender
from orchestrator.notify.payloads import MAX_PAYLOAD_BYTES, json_payload
from orchestrator.spec.notify import NotifyEvent, NotifyTarget
from tests.notify.delivery import no_secrets
from tests.notify.receivers import SmtpReceiver, WebhookReceiver

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
EVIDENCE: dict[NotifyEvent, dict[str, object]] = {
    NotifyEvent.PREEMPTED: {"attempt": 1, "preemptions": 1, "zone": "us-east-1a"},
    NotifyEvent.ON_DEMAND: {"gpu_type": "A100", "market": "on-demand", "node_price_usd_per_hour": 4.1},
    NotifyEvent.BUDGET: {"percent": 80, "spent_usd": 8.0, "budget_usd": 10.0},
    NotifyEvent.DEADLINE_AT_RISK: {
        "eta": "2026-03-01T18:00:00+00:00",
        "deadline": "2026-03-01T16:00:00+00:00",
    },
    NotifyEvent.STALLED: {"step": 120, "stalled_s": 600.0},
    NotifyEvent.IDLE: {"util_pct": 1.5, "idle_s": 900.0},
    NotifyEvent.SUCCEEDED: {"cost_usd": 3.2},
    NotifyEvent.FAILED: {"reason": "over_budget"},
    NotifyEvent.AVOIDABLE_DIGEST: {"spend_usd": 120.0, "avoidable_usd": 48.0, "since": "7d"},
}


def headline(event: NotifyEvent) -> str:
    """A job's events name the job; the avoidable-spend digest names its team."""
    return (
        "gpuctl: team ml avoidable spend"
        if event is NotifyEvent.AVOIDABLE_DIGEST
        else "gpuctl: job train-ab12cd "
    )


def note(event: NotifyEvent, message: str = "something happened") -> Notification:
    return Notification(job="train-ab12cd", team="ml", user="ana", event=event, kind=str(event),
                        message=message, time=NOW, evidence=EVIDENCE[event])  # fmt: skip


@pytest.mark.parametrize("event", list(NotifyEvent))
def test_json_webhook_carries_every_field(webhook: WebhookReceiver, event: NotifyEvent) -> None:
    target = NotifyTarget(webhook=webhook.url, format="json")
    Sender(no_secrets).send(target, note(event, f"the {event} message"))
    (body,) = webhook.wait_for(1)
    assert body == {
        "job": "train-ab12cd", "team": "ml", "user": "ana", "event": str(event), "kind": str(event),
        "message": f"the {event} message", "time": "2026-03-01T12:00:00+00:00", "evidence": EVIDENCE[event],
    }  # fmt: skip


@pytest.mark.parametrize("event", list(NotifyEvent))
def test_slack_webhook_has_text_and_blocks(webhook: WebhookReceiver, event: NotifyEvent) -> None:
    target = NotifyTarget(webhook=webhook.url, format="slack")
    Sender(no_secrets).send(target, note(event, "ping <!channel> & <https://evil|click>"))
    (body,) = webhook.wait_for(1)
    assert body["text"].startswith(headline(event))
    assert "&lt;!channel&gt; &amp; &lt;https://evil|click&gt;" in body["text"]
    assert "<!channel>" not in str(body)  # a job's text never pings a channel nor hides a link
    kinds = [b["type"] for b in body["blocks"]]
    assert kinds[0] == "section" and kinds[-1] == "context"
    facts = body["blocks"][1]["text"]["text"]
    assert all(f"{k}={v}" in facts for k, v in EVIDENCE[event].items())


@pytest.mark.parametrize("event", list(NotifyEvent))
def test_email_through_smtp(smtp: SmtpReceiver, event: NotifyEvent) -> None:
    target = NotifyTarget(email={"to": ["ana@example.com", "ops@example.com"], "from": "gpuctl@example.com",
                                 "host": "127.0.0.1", "port": smtp.port, "starttls": False})  # fmt: skip
    Sender(no_secrets).send(target, note(event, f"the {event} message"))
    ((envelope, mail),) = smtp.wait_for(1)
    assert envelope.rcpt_tos == ["ana@example.com", "ops@example.com"]
    assert mail["From"] == "gpuctl@example.com"
    assert mail["Subject"].startswith(headline(event))
    text = mail.get_payload(decode=True).decode()
    assert f"the {event} message" in text and f"event: {event}" in text and "team:  ml" in text
    assert all(f"{k}: {v}" in text for k, v in EVIDENCE[event].items())
    assert smtp.logins == []


def test_smtp_password_from_a_secrets_file_is_used_and_never_shown(
    smtp: SmtpReceiver, tmp_path: Path
) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "smtp").write_text("password: s3cret-pw\n")
    (secrets / "smtp").chmod(0o600)
    email = {"to": ["ana@example.com"], "from": "gpuctl@example.com", "host": "127.0.0.1", "port": smtp.port,
             "starttls": False, "username": "gpuctl", "password": {"secret": "smtp", "key": "password"}}  # fmt: skip
    sender = Sender(lambda ref, n: reference_value(ref, os.environ, tmp_path))
    sender.send(NotifyTarget(email=email), note(NotifyEvent.FAILED))
    smtp.wait_for(1)
    assert smtp.logins == [("gpuctl", "s3cret-pw")]
    assert "s3cret-pw" not in NotifyTarget(email=email).model_dump_json()  # only the reference is kept


def test_webhook_url_from_a_secret_is_never_in_an_error(down_url: str) -> None:
    with pytest.raises(DeliveryError) as err:
        Sender(lambda ref, n: down_url).send(
            NotifyTarget(webhook={"from_env": "HOOK"}), note(NotifyEvent.FAILED)
        )
    assert "could not be reached" in err.value.what and down_url not in err.value.what
    assert not err.value.permanent  # a receiver that is down may come back: retried


@pytest.mark.parametrize("status, permanent", [(404, True), (429, False), (503, False)])
def test_http_errors(webhook: WebhookReceiver, status: int, permanent: bool) -> None:
    webhook.status = status
    with pytest.raises(DeliveryError) as err:
        Sender(no_secrets).send(NotifyTarget(webhook=webhook.url), note(NotifyEvent.FAILED))
    assert err.value.what == f"the webhook answered HTTP {status}" and err.value.permanent is permanent
    assert "SECRETPATH" not in NotifyTarget(webhook=webhook.url).describe()


def test_link_local_and_bad_scheme_from_a_secret_are_refused() -> None:
    for url, words in [
        ("http://169.254.169.254/latest", "link-local"),
        ("file:///etc/passwd", "http or https"),
    ]:
        with pytest.raises(DeliveryError) as err:
            Sender(lambda ref, n, u=url: u).send(
                NotifyTarget(webhook={"from_env": "X"}), note(NotifyEvent.IDLE)
            )
        assert words in err.value.what and err.value.permanent


def test_payload_size_is_capped() -> None:
    big = Notification(job="j", team="t", user="u", event=NotifyEvent.STALLED, kind="stalled",
                       message="m" * 100_000, time=NOW,
                       evidence={f"k{i}": "v" * 10_000 for i in range(100)})  # fmt: skip
    assert len(json_payload(big)) <= MAX_PAYLOAD_BYTES


@pytest.mark.parametrize("password", ["pässwörd-€", "пароль", "密码 with space:="])
def test_a_password_that_is_not_ascii_logs_in_as_utf8(
    smtp: SmtpReceiver, tmp_path: Path, password: str
) -> None:
    smtp.password = password
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "smtp").write_text(f'password: "{password}"\n', encoding="utf-8")
    (secrets / "smtp").chmod(0o600)
    email = {"to": ["ana@example.com"], "from": "gpuctl@example.com", "host": "127.0.0.1", "port": smtp.port,
             "starttls": False, "username": "gpüctl", "password": {"secret": "smtp", "key": "password"}}  # fmt: skip
    Sender(lambda ref, n: reference_value(ref, os.environ, tmp_path)).send(
        NotifyTarget(email=email), note(NotifyEvent.FAILED)
    )
    smtp.wait_for(1)
    assert smtp.logins == [("gpüctl", password)]
