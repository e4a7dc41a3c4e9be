"""``notify:``: who hears about a job, through what, and on which events.

::

    notify:
      - webhook: https://hooks.slack.com/services/T000/B000/XXXX   # or {secret: slack, key: url}
        format: slack                     # slack (a Slack-compatible `text` + blocks) or json
        events: [preempted, on_demand, budget, failed]
      - email: {to: [me@example.com], from: gpuctl@example.com, host: smtp.example.com, port: 587,
                starttls: true, username: gpuctl, password: {secret: smtp, key: password}}
        events: [succeeded, failed]

The same list is accepted per team in ``$GPUCTL_HOME/config.yaml`` (``notify: {teams: {TEAM: [...]}}``,
see :mod:`orchestrator.notify.config`). A webhook URL or SMTP password may be a secret reference
(``{secret: NAME, key: KEY}`` or ``{from_env: VARIABLE}``): only the reference is stored; the value is
read when a notification is sent, and never written into an event or a log line.

URLs and addresses come from whoever submits a job: a URL must be ``http`` or ``https`` with a host
and no user name or password in it, an address one plain ``user@host``.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from orchestrator.spec.env import FromEnv, SecretRef, _env_value_kind
from orchestrator.spec.limits import (
    MAX_EMAIL_RECIPIENTS,
    MAX_NOTIFY_TARGETS,
    MAX_URL_CHARS,
    Line,
    shown,
)


class NotifyEvent(StrEnum):
    """The events a target may pick (``events:``)."""

    PREEMPTED = "preempted"
    ON_DEMAND = "on_demand"
    """The job moved to on-demand nodes; the message carries the market policy's reason."""
    BUDGET = "budget"
    """50, 80 and 100 % of ``goals.budget_usd`` spent, and a forecast that says it will be exceeded."""
    DEADLINE_AT_RISK = "deadline_at_risk"
    STALLED = "stalled"
    IDLE = "idle"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    AVOIDABLE_DIGEST = "avoidable_digest"
    """The weekly "avoidable spend" digest of a team (sent to team targets when the controller config
    turns it on: ``notify.avoidable_digest``)."""


class WebhookFormat(StrEnum):
    SLACK = "slack"
    """``{"text": ..., "blocks": [...]}``: Slack incoming webhooks, and the chat tools that accept them."""
    JSON = "json"
    """``{"job", "team", "user", "event", "message", "time", "evidence"}``."""


EMAIL_ADDRESS = re.compile(
    r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?"
)
HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]")


def url_problem(url: str) -> str | None:
    """What makes ``url`` unusable as a webhook, with the fix, in words that never quote it (it may come
    from a secret); None when it is an http(s) URL with a host and no credentials."""
    if len(url) > MAX_URL_CHARS:
        return f"is longer than {MAX_URL_CHARS} characters; give a webhook's https://... address"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "has a space, line break or control character; give the URL alone, as it is"
    if not url.isascii():
        return (
            "has characters that are not ASCII; percent-encode them (%C3%A9) and write the host in punycode"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return "is not a URL (a bad host or port); give a webhook's https://... address"
    if parts.scheme not in ("http", "https"):
        return "is not an http or https URL; webhooks are sent by HTTP POST to an https://... address"
    if not parts.hostname:
        return "has no host name; give a webhook's whole https://HOST/... address"
    if parts.username is not None or parts.password is not None:
        return (
            "has a user name or password in it, which would be stored and shown with the job; "
            "give the whole URL as a secret reference instead: {secret: NAME, key: KEY}"
        )
    return None


def check_url(url: str) -> str:
    """``url`` when it is an http(s) URL with a host and no credentials; raises ValueError otherwise
    (the error names the field, never the URL: :func:`url_problem`)."""
    problem = url_problem(url)
    if problem is not None:
        raise ValueError(f"the URL {problem}")
    return url


def url_origin(url: str) -> str:
    """What may be shown of a webhook URL (its path and query often are its secret): scheme and host."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/..."


def _check_address(value: str) -> str:
    if not EMAIL_ADDRESS.fullmatch(value):
        raise ValueError(f"{shown(value)} is not an email address such as me@example.com")
    return value


EmailAddress = Annotated[str, Field(max_length=320, description="user@host")]

SecretValue = Annotated[
    Annotated[Line, Tag("str")] | Annotated[SecretRef, Tag("SecretRef")] | Annotated[FromEnv, Tag("FromEnv")],
    Discriminator(_env_value_kind),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, populate_by_name=True)


class Email(_Strict):
    """Mail to ``to`` through the SMTP server ``host:port``."""

    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True, validate_by_alias=True)

    to: Annotated[
        list[EmailAddress], Field(min_length=1, max_length=MAX_EMAIL_RECIPIENTS, description="recipients")
    ]
    sender: Annotated[EmailAddress, Field(alias="from", description="the From address")]
    host: Annotated[str, Field(max_length=253, description="the SMTP server's host name")]
    port: Annotated[int, Field(ge=1, le=65535)] = 587
    starttls: bool = Field(default=True, description="upgrade the connection with STARTTLS before logging in")
    username: Line | None = Field(default=None, description="log in as this user (needs a password)")
    password: SecretRef | FromEnv | None = Field(
        default=None,
        description="{secret: NAME, key: KEY} or {from_env: VARIABLE}: read when sending, never stored",
    )

    @field_validator("to")
    @classmethod
    def _recipients(cls, v: list[str]) -> list[str]:
        return [_check_address(a) for a in v]

    @field_validator("sender")
    @classmethod
    def _sender(cls, v: str) -> str:
        return _check_address(v)

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        if not HOST_NAME.fullmatch(v):
            raise ValueError(f"{shown(v)} is not a host name such as smtp.example.com")
        return v

    @model_validator(mode="after")
    def _login_pair(self) -> Email:
        if (self.username is None) != (self.password is None):
            raise ValueError("give both username and password to log in, or neither")
        return self


class NotifyTarget(_Strict):
    """One place to send notifications: a webhook URL, or email through an SMTP server."""

    webhook: SecretValue | None = Field(
        default=None,
        description="an http(s) URL, or {secret: NAME, key: KEY} / {from_env: VARIABLE} holding it",
    )
    format: WebhookFormat = Field(default=WebhookFormat.JSON, description="webhook payload: slack or json")
    email: Email | None = None
    events: Annotated[list[NotifyEvent], Field(max_length=len(NotifyEvent))] = Field(
        default_factory=lambda: list(NotifyEvent), description="the events to send; every one when unset"
    )

    @field_validator("webhook")
    @classmethod
    def _webhook_url(cls, v: str | SecretRef | FromEnv | None) -> str | SecretRef | FromEnv | None:
        return check_url(v) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _one_kind(self) -> NotifyTarget:
        if (self.webhook is None) == (self.email is None):
            raise ValueError("give either webhook: URL or email: {to, from, host} (one per list item)")
        return self

    def wants(self, event: NotifyEvent) -> bool:
        return event in self.events

    def describe(self) -> str:
        """How the target may be shown (events, logs): never a secret, nor a webhook URL's path."""
        if self.email is not None:
            more = f" and {len(self.email.to) - 1} more" if len(self.email.to) > 1 else ""
            return f"email to {self.email.to[0]}{more} via {self.email.host}"
        if isinstance(self.webhook, str):
            return f"{self.format} webhook {url_origin(self.webhook)}"
        assert self.webhook is not None
        return f"{self.format} webhook in {self.webhook.describe()}"


NotifyTargets = Annotated[
    list[NotifyTarget],
    Field(
        max_length=MAX_NOTIFY_TARGETS, description="webhooks and email recipients told about the job's events"
    ),
]


def targets_json(targets: list[NotifyTarget]) -> list[dict[str, Any]]:
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in targets]
