"""The bodies sent: a Slack-compatible webhook payload, a generic JSON one, an email.

Everything in them comes from the job and its events (names, messages, evidence): text written by
whoever submitted the job, so sizes are capped (:data:`MAX_PAYLOAD_BYTES`) and Slack's control
sequences (``<!channel>``, ``<https://...|link>``) are escaped.
"""

from __future__ import annotations

import json
from dataclasses import replace
from email.message import EmailMessage
from typing import Any

from orchestrator.notify.messages import MAX_MESSAGE_CHARS, Notification, bounded_evidence, clip

MAX_PAYLOAD_BYTES = 16 * 1024
"""No webhook body is larger (Slack takes 40 000 characters of text; chat tools less)."""
MAX_SLACK_TEXT = 3000
"""A Slack section block's text limit."""


def bounded(note: Notification) -> Notification:
    """``note`` with its message and evidence cut to size (a notification read back from an outbox
    written by anything is bounded again here)."""
    return replace(
        note, message=clip(note.message, MAX_MESSAGE_CHARS), evidence=bounded_evidence(note.evidence)
    )


def json_payload(note: Notification) -> bytes:
    """``{"job", "team", "user", "event", "kind", "message", "time", "evidence"}`` as UTF-8 JSON."""
    data = bounded(note).to_json()
    body = _dumps(data)
    if len(body) > MAX_PAYLOAD_BYTES:  # the evidence is the only part of unbounded shape
        data["evidence"] = {"truncated": True}
        body = _dumps(data)
    return body


def slack_escape(text: str) -> str:
    """Slack's mrkdwn escapes: a job's text must not mention @channel or hide a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_payload(note: Notification) -> bytes:
    """``text`` (the fallback every Slack-compatible receiver shows) and ``blocks``."""
    note = bounded(note)
    headline = slack_escape(note.headline)
    message = slack_escape(note.message)
    facts = ", ".join(f"{k}={v}" for k, v in note.evidence.items())
    where = f"team {note.team}, user {note.user}" + (
        f", namespace {note.namespace}" if note.namespace else ""
    )
    context = slack_escape(clip(f"{where} · {note.time.isoformat(timespec='seconds')}", 1000))
    text = clip(f"{headline}: {message}", MAX_SLACK_TEXT)
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": clip(f"*{headline}*\n{message}", MAX_SLACK_TEXT)},
        },
        {"type": "context", "elements": [{"type": "mrkdwn", "text": context}]},
    ]
    if facts:
        blocks.insert(1, {"type": "section", "text": {"type": "mrkdwn",
                                                      "text": clip(slack_escape(facts), MAX_SLACK_TEXT)}})  # fmt: skip
    body = _dumps({"text": text, "blocks": blocks})
    if len(body) > MAX_PAYLOAD_BYTES:
        body = _dumps({"text": clip(text, 1000)})
    return body


def email_message(note: Notification, sender: str, to: list[str]) -> EmailMessage:
    """A plain-text mail: the headline as subject, the message and the evidence as lines."""
    note = bounded(note)
    mail = EmailMessage()
    mail["Subject"] = clip(note.headline, 200)
    mail["From"] = sender
    mail["To"] = ", ".join(to)
    lines = [
        note.message, "",
        f"job:   {note.job}", f"team:  {note.team}", f"user:  {note.user}",
        f"event: {note.event}", f"time:  {note.time.isoformat(timespec='seconds')}",
    ]  # fmt: skip
    if note.namespace:
        lines.append(f"namespace: {note.namespace}")
    lines += [f"{k}: {v}" for k, v in note.evidence.items()]
    mail.set_content(clip("\n".join(lines), MAX_PAYLOAD_BYTES) + "\n")
    return mail


def _dumps(data: dict[str, Any]) -> bytes:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
