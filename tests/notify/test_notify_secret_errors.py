"""No piece of a secret's value reaches any text a failed notification leaves: the ``notify_failed``
event, the outbox's last error, the exception, a log record. Recognisable values go through every
error path: webhook URLs that cannot be used, hosts that do not resolve or are refused, network
errors whose own text quotes the value, secrets files that cannot be read, SMTP passwords refused,
Kubernetes Secrets that are not text."""

from __future__ import annotations

import base64
import errno
import http.client
import logging
import os
import smtplib
import socket
import sqlite3
import ssl
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from operators.kubernetes import notify as operator_notify
from orchestrator.backends.secrets import reference_value
from orchestrator.notify import (
    DeliveryError,
    DeliveryWorker,
    Notification,
    Outbox,
    RetryPolicy,
    Sender,
    senders,
)
from orchestrator.notify.senders import SecretResolver
from orchestrator.spec.notify import NotifyEvent, NotifyTarget
from tests.notify.receivers import SmtpReceiver, WebhookReceiver
from tests.notify.secret_values import HOST, MARK, SECRETS_FILES, WEBHOOK_VALUES, leaks

NOTE = Notification(job="j-1", team="ml", user="ana", event=NotifyEvent.FAILED, kind="transition",
                    message="m", time=datetime(2026, 3, 1, tzinfo=UTC), namespace="research")  # fmt: skip
HOOK = NotifyTarget(webhook={"secret": "hook", "key": "url"})
CARRIERS: dict[str, Callable[[str], BaseException]] = {
    "refused": lambda v: ConnectionRefusedError(errno.ECONNREFUSED, v),
    "reset": lambda v: ConnectionResetError(v),
    "timeout": lambda v: TimeoutError(v),
    "no such host": lambda v: socket.gaierror(socket.EAI_NONAME, v),
    "certificate": lambda v: ssl.SSLCertVerificationError(1, f"certificate is not valid for '{v}'"),
    "TLS": lambda v: ssl.SSLError(1, v),
    "bad answer": lambda v: http.client.BadStatusLine(v),
    "bad URL": lambda v: http.client.InvalidURL(f"nonnumeric port: '{v}'"),
    "unicode": lambda v: UnicodeEncodeError("ascii", v, 0, 1, v),
    "a bug": lambda v: RuntimeError(v),
}
"""Exceptions whose own text holds a piece of the value (as many do: a host name, a URL, an answer).
They are given the value less its first character: a whole value would be masked by the sender's
last guard, which must not be what keeps a piece out."""


@pytest.fixture
def every_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> Callable[[NotifyTarget, SecretResolver], str]:
    """Send one notification to a target (its secret read by the resolver): directly, then through a
    delivery worker until it gives up; all the texts it left, joined."""
    caplog.set_level(logging.DEBUG)
    runs = iter(range(1000))

    def deliver(target: NotifyTarget, resolve: SecretResolver) -> str:
        texts: list[str] = []
        with pytest.raises(Exception) as err:
            Sender(resolve, deadline_s=5).send(target, NOTE)
        if isinstance(err.value, DeliveryError):  # another exception is logged without its text
            texts += [str(err.value), err.value.what, repr(err.value)]
        outbox = Outbox.standalone(tmp_path / f"outbox-{next(runs)}.db", "test")
        events: list[str] = []
        worker = DeliveryWorker(outbox, Sender(resolve, deadline_s=5), lambda c, i, m: events.append(m),
                                RetryPolicy(first_delay_s=0, max_attempts=2))  # fmt: skip
        outbox.add([(target, NOTE)], datetime.now(UTC))
        worker.deliver_due()
        with sqlite3.connect(outbox.path) as conn:
            texts += [str(row) for row in conn.execute("SELECT * FROM notifications")]
        worker.deliver_due()
        worker.stop()
        assert len(events) == 1 and outbox.pending() == 0, events  # it failed, and said so once
        logged = [r.getMessage() for r in caplog.records]  # what was logged (not the log's file:line prefix)
        return "\n".join([*texts, *events, *logged])

    return deliver


def assert_no_leak(text: str, value: str) -> None:
    assert not leaks(text, value), (leaks(text, value), text)


def resolver_answering(monkeypatch: pytest.MonkeyPatch, address: str, port: int | None = None) -> None:
    def getaddrinfo(host: str, port_: Any, *args: Any, **kwargs: Any) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port or int(port_)))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.mark.parametrize("value", WEBHOOK_VALUES.values(), ids=list(WEBHOOK_VALUES))
def test_a_webhook_secret_that_is_not_a_usable_url(value: str, every_text: Any) -> None:
    text = every_text(HOOK, lambda ref, n: value)
    assert_no_leak(text, value)
    assert "json webhook in secret 'hook', key 'url'" in text  # says which secret, and what is wrong
    assert "the value there " in text or "cloud metadata address" in text


def test_a_webhook_host_that_does_not_resolve_or_is_refused(
    every_text: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = f"https://{HOST}/{MARK[8:]}"

    def unknown(host: str, *args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, f"{host}: Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unknown)
    text = every_text(HOOK, lambda ref, n: value)
    assert_no_leak(text, value)
    assert "the webhook's host could not be resolved (no such host)" in text
    resolver_answering(monkeypatch, "169.254.169.254")
    text = every_text(HOOK, lambda ref, n: value)
    assert_no_leak(text, value)
    assert "the webhook's host is or resolves to a link-local or cloud metadata address" in text


@pytest.mark.parametrize("carrier", CARRIERS.values(), ids=list(CARRIERS))
def test_network_errors_that_quote_the_value_when_connecting(
    carrier: Callable[[str], BaseException], every_text: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = f"https://{HOST}/{MARK[8:]}"

    def fail(*args: Any) -> Any:
        raise carrier(value[1:])

    resolver_answering(monkeypatch, "127.0.0.1")
    monkeypatch.setattr(senders, "connect", fail)
    assert_no_leak(every_text(HOOK, lambda ref, n: value), value)


@pytest.mark.parametrize("carrier", CARRIERS.values(), ids=list(CARRIERS))
def test_network_errors_that_quote_the_value_in_the_answer(
    carrier: Callable[[str], BaseException],
    every_text: Any,
    webhook: WebhookReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    value = f"http://{HOST}:{webhook.url.split(':')[2].split('/')[0]}/{MARK[8:]}"

    def fail(*args: Any) -> Any:
        raise carrier(value[1:])

    resolver_answering(monkeypatch, "127.0.0.1")
    monkeypatch.setattr(http.client.HTTPConnection, "getresponse", fail)
    assert_no_leak(every_text(HOOK, lambda ref, n: value), value)


@pytest.mark.parametrize("content", SECRETS_FILES.values(), ids=list(SECRETS_FILES))
def test_a_secrets_file_that_cannot_be_read(content: str | bytes, every_text: Any, tmp_path: Path) -> None:
    path = tmp_path / "home" / "secrets" / "hook"
    path.parent.mkdir(parents=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    path.chmod(0o600)
    text = every_text(HOOK, lambda ref, n: reference_value(ref, os.environ, tmp_path / "home"))
    assert_no_leak(text, MARK)
    assert_no_leak(text, MARK[::-1])
    assert "json webhook in secret 'hook', key 'url'" in text


PASSWORDS = [
    MARK,
    f"{MARK[:10]}\n{MARK[10:]}",
    f"{MARK[:5]}={MARK[5:9]}:{MARK[9:]}",
    f"{MARK[:10]}\u00e9{MARK[10:]}",
]


def email(port: int) -> NotifyTarget:
    return NotifyTarget(email={"to": ["ana@example.com"], "from": "gpuctl@example.com", "host": "127.0.0.1",
                               "port": port, "starttls": False, "username": "gpuctl",
                               "password": {"secret": "smtp", "key": "password"}})  # fmt: skip


@pytest.mark.parametrize("password", PASSWORDS)
def test_an_smtp_password_that_is_refused(password: str, every_text: Any, smtp: SmtpReceiver) -> None:
    text = every_text(email(smtp.port), lambda ref, n: password)
    assert_no_leak(text, password)
    assert "the SMTP server refused the login (code 535)" in text
    assert smtp.logins and smtp.logins[0] == ("gpuctl", password)  # sent as it is, UTF-8 included


SMTP_CARRIERS: dict[str, Callable[[str], BaseException]] = {
    **CARRIERS,
    "SMTP": lambda v: smtplib.SMTPException(v),
    "disconnected": lambda v: smtplib.SMTPServerDisconnected(v),
    "answer": lambda v: smtplib.SMTPResponseException(454, v.encode()),
    "refused login": lambda v: smtplib.SMTPAuthenticationError(535, v.encode()),
}


@pytest.mark.parametrize("carrier", SMTP_CARRIERS.values(), ids=list(SMTP_CARRIERS))
def test_smtp_errors_that_quote_the_password(
    carrier: Callable[[str], BaseException],
    every_text: Any,
    smtp: SmtpReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail(self: Any, user: str, password: str, **kwargs: Any) -> Any:
        raise carrier(password[1:])

    monkeypatch.setattr(senders._SMTP, "login", fail)
    assert_no_leak(every_text(email(smtp.port), lambda ref, n: PASSWORDS[1]), PASSWORDS[1])


@pytest.mark.parametrize(
    "data",
    [base64.b64encode(MARK.encode() + b"\xff\xfe").decode(), MARK + "!",
     base64.b64encode(WEBHOOK_VALUES["multi-line"].encode()).decode()],
    ids=["not UTF-8", "not base64", "not a URL"],
)  # fmt: skip
def test_a_kubernetes_secret_that_is_not_a_usable_url(
    data: str, every_text: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubernetes_client = pytest.importorskip("kubernetes.client")

    class CoreV1Api:
        def __init__(self, api: Any) -> None:
            pass

        def read_namespaced_secret(self, name: str, namespace: str) -> Any:
            assert (name, namespace) == ("hook", "research")
            return SimpleNamespace(data={"url": data})

    monkeypatch.setattr(kubernetes_client, "CoreV1Api", CoreV1Api)
    text = every_text(HOOK, lambda ref, n: operator_notify.secret_value(ref, n, None))
    assert_no_leak(text, MARK)
    assert_no_leak(text, data)
    assert "json webhook in secret 'hook', key 'url'" in text
