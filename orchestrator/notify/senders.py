"""Sending one notification to one target: an HTTP POST to a webhook, or a mail through SMTP.

One delivery has a wall-clock deadline for the whole exchange (:data:`DEADLINE_S`: resolving,
connecting, TLS, request and answer), enforced against a server that answers one byte at a time, and
each network operation a timeout of its own (:data:`TIMEOUT_S`). Where gpuctl connects is checked on
the address it really connects to (:mod:`orchestrator.notify.network`), for webhooks and SMTP servers
alike. Webhook URLs are checked again when sent (a secret reference's value is only known then):
http or https, no redirects followed.

An error says what failed in words safe to record as a job event: never a secret's value nor any part
of it (a webhook URL from a secret is not even named by its host), never a webhook URL's path, never
the receiver's answer nor an exception's text.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import http.client
import smtplib
import ssl
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from orchestrator import __version__
from orchestrator.errors import GpuctlError
from orchestrator.notify.messages import Notification
from orchestrator.notify.network import Address, Deadline, DeliveryError, checked_addresses, connect, reason
from orchestrator.notify.payloads import email_message, json_payload, slack_payload
from orchestrator.spec.env import FromEnv, SecretRef
from orchestrator.spec.notify import Email, NotifyTarget, WebhookFormat, url_problem

TIMEOUT_S = 10.0
"""Each connect, read and write."""
DEADLINE_S = 30.0
"""One delivery in all."""
MAX_ANSWER_BYTES = 1024

SecretResolver = Callable[[SecretRef | FromEnv, Notification], str]
"""Reads a secret reference's value when sending a notification (on Kubernetes: a Secret of the
notification's namespace); raises :class:`GpuctlError` when it cannot, with a message that never
holds the value."""

__all__ = ["DEADLINE_S", "TIMEOUT_S", "DeliveryError", "SecretResolver", "Sender"]


class Sender:
    """Sends notifications; ``resolve`` reads secret references (webhook URLs, SMTP passwords)."""

    def __init__(
        self, resolve: SecretResolver, timeout_s: float = TIMEOUT_S, deadline_s: float = DEADLINE_S
    ) -> None:
        self.resolve = resolve
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s

    def send(self, target: NotifyTarget, note: Notification) -> None:
        secrets: list[str] = []
        with Deadline(self.deadline_s) as deadline:
            try:
                if target.email is not None:
                    self._mail(target.email, note, secrets, deadline)
                else:
                    self._post(target, note, secrets, deadline)
            except DeliveryError as err:
                if deadline.expired:
                    raise self._late() from None
                raise DeliveryError(_scrub(err.what, secrets), err.permanent) from None
            if deadline.expired:  # an answer cut short by the deadline is no answer
                raise self._late()

    def _late(self) -> DeliveryError:
        return DeliveryError(f"no complete answer within {self.deadline_s:g} s, the limit for one delivery")

    def _value(self, ref: SecretRef | FromEnv, note: Notification, secrets: list[str]) -> str:
        try:
            value = self.resolve(ref, note)
        except GpuctlError as err:
            raise DeliveryError(f"cannot read {ref.describe()}: {err.what}") from None
        secrets.append(value)
        return value

    def _url(self, target: NotifyTarget, note: Notification, secrets: list[str]) -> str:
        ref = target.webhook
        assert ref is not None
        url = ref if isinstance(ref, str) else self._value(ref, note, secrets)
        problem = url_problem(url)
        if problem is not None:
            raise DeliveryError(f"the value there {problem}", permanent=True)
        return url

    def _post(self, target: NotifyTarget, note: Notification, secrets: list[str], deadline: Deadline) -> None:
        url = self._url(target, note, secrets)
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = checked_addresses(host, port, "the webhook's host")
        body = slack_payload(note) if target.format is WebhookFormat.SLACK else json_payload(note)
        conn = _connection(parts.scheme, host, port, self.timeout_s)
        conn._create_connection = lambda *_: connect(addresses, self.timeout_s, deadline)  # type: ignore[attr-defined]
        try:
            status = _exchange(conn, parts.path or "/", parts.query, body)
        finally:
            conn.close()
        if status >= 300:  # a redirect is not followed: it could lead anywhere
            permanent = 400 <= status < 500 and status not in (408, 425, 429)
            raise DeliveryError(f"the webhook answered HTTP {status}", permanent)

    def _mail(self, email: Email, note: Notification, secrets: list[str], deadline: Deadline) -> None:
        password = self._value(email.password, note, secrets) if email.password is not None else None
        host = email.host.strip("[]")
        addresses = checked_addresses(host, email.port, f"the SMTP server {email.host}")
        mail = email_message(note, email.sender, list(email.to))
        smtp: _SMTP = (
            _SMTPSSL(host, addresses, deadline, timeout=self.timeout_s, context=_tls_context())
            if email.port == 465
            else _SMTP(host, addresses, deadline, timeout=self.timeout_s)
        )
        try:
            smtp.connect(host, email.port)
            if email.starttls and email.port != 465:
                smtp.starttls(context=_tls_context())
            if email.username is not None and password is not None:
                smtp.login(email.username, password)
            smtp.send_message(mail)
            with contextlib.suppress(smtplib.SMTPException, OSError):
                smtp.quit()
        except (smtplib.SMTPException, OSError, ValueError) as err:
            raise _smtp_error(err, f"{email.host}:{email.port}") from None
        finally:
            smtp.close()


def _tls_context() -> ssl.SSLContext:
    """The system's trusted certificates, the host name checked."""
    return ssl.create_default_context()


def _connection(scheme: str, host: str, port: int, timeout_s: float) -> http.client.HTTPConnection:
    if scheme == "https":  # SNI and the certificate are checked against the URL's host name
        return http.client.HTTPSConnection(host, port, timeout=timeout_s, context=_tls_context())
    return http.client.HTTPConnection(host, port, timeout=timeout_s)


def _exchange(conn: http.client.HTTPConnection, path: str, query: str, body: bytes) -> int:
    """POST ``body``; the answer's status (its body is read, at most :data:`MAX_ANSWER_BYTES`, and dropped)."""
    try:
        conn.connect()
    except (OSError, ValueError, http.client.HTTPException) as err:
        raise DeliveryError(f"the webhook could not be reached ({reason(err)})") from None
    try:
        conn.request("POST", path + (f"?{query}" if query else ""), body, {
            "Content-Type": "application/json; charset=utf-8", "User-Agent": f"gpuctl/{__version__}",
        })  # fmt: skip
        response = conn.getresponse()
        response.read(MAX_ANSWER_BYTES)
    except (OSError, ValueError, http.client.HTTPException) as err:
        raise DeliveryError(f"the webhook did not answer ({reason(err)})") from None
    return response.status


def _smtp_error(err: BaseException, server: str) -> DeliveryError:
    if isinstance(err, smtplib.SMTPAuthenticationError):
        return DeliveryError(f"the SMTP server refused the login (code {err.smtp_code}); check the user "
                             "name and password", permanent=True)  # fmt: skip
    if isinstance(err, smtplib.SMTPRecipientsRefused):
        return DeliveryError("the SMTP server refused every recipient", permanent=True)
    if isinstance(err, smtplib.SMTPNotSupportedError):
        what = "STARTTLS" if "STARTTLS" in str(err) else "a login (AUTH)"
        return DeliveryError(f"the SMTP server does not support {what}; check starttls:, port: and "
                             "username:", permanent=True)  # fmt: skip
    if isinstance(err, smtplib.SMTPResponseException):
        return DeliveryError(f"the SMTP server answered {err.smtp_code}", err.smtp_code >= 500)
    if isinstance(err, smtplib.SMTPServerDisconnected):
        return DeliveryError(f"the SMTP server {server} closed the connection")
    return DeliveryError(f"the SMTP server {server} failed ({reason(err)})")


class _SMTP(smtplib.SMTP):
    """Connects only to checked addresses, under the delivery's deadline; logs in with UTF-8 (RFC 4954:
    smtplib's own login takes ASCII passwords only)."""

    def __init__(self, host: str, addresses: Sequence[Address], deadline: Deadline, **kwargs: Any) -> None:
        self._addresses = addresses
        self._deadline = deadline
        super().__init__(**kwargs)  # no host: it would connect here
        self._host = host  # TLS (STARTTLS, port 465) checks the certificate against it

    def _get_socket(self, host: str, port: int, timeout: float) -> Any:
        return connect(self._addresses, timeout, self._deadline)

    def auth(
        self, mechanism: str, authobject: Callable[..., Any], *, initial_response_ok: bool = True
    ) -> Any:
        mechanism = mechanism.upper()
        first = authobject() if initial_response_ok else None
        if first is not None:
            code, answer = self.docmd("AUTH", f"{mechanism} {_b64(first)}")
        else:
            code, answer = self.docmd("AUTH", mechanism)
        for _ in range(smtplib._MAXCHALLENGE):  # type: ignore[attr-defined]
            if code != 334:
                break
            code, answer = self.docmd(_b64(authobject(base64.decodebytes(answer))))
        if code in (235, 503):
            return code, answer
        raise smtplib.SMTPAuthenticationError(code, answer)

    def auth_cram_md5(self, challenge: bytes | None = None) -> str | None:  # type: ignore[override]
        if challenge is None:
            return None
        return f"{self.user} {hmac.HMAC(self.password.encode(), challenge, 'md5').hexdigest()}"


class _SMTPSSL(_SMTP, smtplib.SMTP_SSL):
    """Port 465: TLS from the start, the certificate checked against the host name."""

    def _get_socket(self, host: str, port: int, timeout: float) -> Any:
        return self.context.wrap_socket(
            connect(self._addresses, timeout, self._deadline), server_hostname=host
        )


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _scrub(text: str, secrets: list[str]) -> str:
    """A last guard: messages are written without values, but never let a whole one through."""
    for value in secrets:
        if value:
            text = text.replace(value, "***")
    return text
