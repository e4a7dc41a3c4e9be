"""Sending one notification to one target: an HTTP POST to a webhook, or a mail through SMTP.

Every network call has a timeout (:data:`TIMEOUT_S`). Webhook URLs are checked again when sent (a
secret reference's value is only known then): http or https, no redirects followed, and never a
link-local address (``169.254.0.0/16``, ``fe80::/10``: cloud metadata services live there). An error
says what failed in words safe to record as a job event: never the password, never a webhook URL's
path, never the receiver's response body.
"""

from __future__ import annotations

import ipaddress
import smtplib
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from orchestrator import __version__
from orchestrator.errors import GpuctlError
from orchestrator.notify.messages import Notification
from orchestrator.notify.payloads import email_message, json_payload, slack_payload
from orchestrator.spec.env import FromEnv, SecretRef
from orchestrator.spec.notify import NotifyTarget, WebhookFormat, check_url

TIMEOUT_S = 10.0

SecretResolver = Callable[[SecretRef | FromEnv, Notification], str]
"""Reads a secret reference's value when sending a notification (on Kubernetes: a Secret of the
notification's namespace); raises :class:`GpuctlError` when it cannot."""


class DeliveryError(Exception):
    """A notification could not be sent. ``permanent``: trying again cannot help (a 404, a bad URL)."""

    def __init__(self, what: str, permanent: bool = False) -> None:
        super().__init__(what)
        self.what = what
        self.permanent = permanent


class Sender:
    """Sends notifications; ``resolve`` reads secret references (webhook URLs, SMTP passwords)."""

    def __init__(self, resolve: SecretResolver, timeout_s: float = TIMEOUT_S) -> None:
        self.resolve = resolve
        self.timeout_s = timeout_s

    def send(self, target: NotifyTarget, note: Notification) -> None:
        secrets: list[str] = []
        try:
            if target.email is not None:
                self._mail(target, note, secrets)
            else:
                self._post(target, note, secrets)
        except DeliveryError as err:
            raise DeliveryError(_scrub(err.what, secrets), err.permanent) from None

    def _value(self, ref: str | SecretRef | FromEnv, note: Notification, secrets: list[str]) -> str:
        if isinstance(ref, str):
            return ref
        try:
            value = self.resolve(ref, note)
        except GpuctlError as err:
            raise DeliveryError(f"cannot read {ref.describe()}: {err.what}") from None
        secrets.append(value)
        return value

    def _post(self, target: NotifyTarget, note: Notification, secrets: list[str]) -> None:
        assert target.webhook is not None
        url = self._value(target.webhook, note, secrets)
        secrets.append(url)
        try:
            check_url(url)
        except ValueError as err:
            raise DeliveryError(f"the webhook URL is not usable: {err}", permanent=True) from None
        _refuse_link_local(url)
        body = slack_payload(note) if target.format is WebhookFormat.SLACK else json_payload(note)
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/json; charset=utf-8", "User-Agent": f"gpuctl/{__version__}",
        })  # fmt: skip
        try:
            with _OPENER.open(request, timeout=self.timeout_s) as response:
                response.read(1024)
        except urllib.error.HTTPError as err:
            permanent = 400 <= err.code < 500 and err.code not in (408, 425, 429)
            raise DeliveryError(f"the webhook answered HTTP {err.code}", permanent) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise DeliveryError(f"the webhook could not be reached ({_reason(reason)})") from None

    def _mail(self, target: NotifyTarget, note: Notification, secrets: list[str]) -> None:
        email = target.email
        assert email is not None
        password = self._value(email.password, note, secrets) if email.password is not None else None
        mail = email_message(note, email.sender, list(email.to))
        smtp_class: Any = smtplib.SMTP_SSL if email.port == 465 else smtplib.SMTP
        try:
            with smtp_class(email.host, email.port, timeout=self.timeout_s) as smtp:
                if email.starttls and email.port != 465:
                    smtp.starttls(context=ssl.create_default_context())
                if email.username is not None and password is not None:
                    smtp.login(email.username, password)
                smtp.send_message(mail)
        except smtplib.SMTPAuthenticationError as err:
            raise DeliveryError(f"the SMTP server refused the login (code {err.smtp_code})", True) from None
        except smtplib.SMTPRecipientsRefused:
            raise DeliveryError("the SMTP server refused every recipient", permanent=True) from None
        except smtplib.SMTPNotSupportedError as err:
            raise DeliveryError(f"the SMTP server does not support {_reason(err)}", True) from None
        except smtplib.SMTPResponseException as err:
            raise DeliveryError(f"the SMTP server answered {err.smtp_code}", err.smtp_code >= 500) from None
        except (smtplib.SMTPException, OSError) as err:
            raise DeliveryError(
                f"the SMTP server {email.host}:{email.port} failed ({_reason(err)})"
            ) from None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: it could lead a job's notification anywhere (a link-local address)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def _refuse_link_local(url: str) -> None:
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        infos = socket.getaddrinfo(host, parts.port or (443 if parts.scheme == "https" else 80),
                                   type=socket.SOCK_STREAM)  # fmt: skip
    except OSError as err:
        raise DeliveryError(f"the webhook's host {host} could not be resolved ({_reason(err)})") from None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if address.is_link_local or address.is_multicast or address.is_unspecified:
            raise DeliveryError(f"the webhook's host {host} is a link-local or special address", True)


def _reason(reason: object) -> str:
    text = str(reason) or type(reason).__name__
    return text[:200]


def _scrub(text: str, secrets: list[str]) -> str:
    for value in secrets:
        if value:
            text = text.replace(value, "***")
    return text
