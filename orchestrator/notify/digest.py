"""The weekly "avoidable spend" digest: one notification per team, to the team's targets.

Pure: the controller builds each team's :class:`TeamDigest` from the cost report (its avoidable column
and top fixes, :mod:`orchestrator.costs.avoidable`) and puts what :func:`digest_notifications` returns
in the outbox. A team none of whose spend was measured is told so ("not measured"), never "nothing to
save". Off unless the controller config sets ``notify.avoidable_digest`` (:mod:`.config`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from orchestrator.notify.config import NotifyConfig
from orchestrator.notify.messages import MAX_MESSAGE_CHARS, Notification, clip
from orchestrator.spec.notify import NotifyEvent, NotifyTarget

TOP_FIXES = 3
"""Fixes a digest names."""


@dataclass(frozen=True)
class DigestFix:
    job: str
    code: str
    fix: str
    usd: float


@dataclass(frozen=True)
class TeamDigest:
    """A team's spend in the digest's span, what of it was avoidable (None: none measured), its largest
    fixes and the job the notification is filed under (its largest, or costliest, job)."""

    team: str
    job: str
    user: str
    spend_usd: float
    avoidable_usd: float | None
    fixes: tuple[DigestFix, ...] = ()


def digest_message(digest: TeamDigest, since: str) -> str:
    if digest.avoidable_usd is None:
        return (
            f"last {since}: spent {digest.spend_usd:,.2f} USD; avoidable spend not measured (no job of "
            "the team had step timings or GPU monitor data)"
        )
    head = f"last {since}: spent {digest.spend_usd:,.2f} USD, of which up to {digest.avoidable_usd:,.2f} USD avoidable"
    fixes = "; ".join(f"{f.job} {f.code}: {f.usd:,.2f} USD ({f.fix})" for f in digest.fixes[:TOP_FIXES])
    return head + (f". Top fixes: {fixes}" if fixes else ": no fix found")


def digest_notifications(
    digests: Sequence[TeamDigest], config: NotifyConfig, now: datetime
) -> list[tuple[NotifyTarget, Notification]]:
    """One notification per team with targets that want ``avoidable_digest``; none when the digest is off."""
    if config.avoidable_digest is None:
        return []
    since = config.avoidable_digest.since
    found = []
    for digest in digests:
        note = Notification(
            job=digest.job, team=digest.team, user=digest.user, event=NotifyEvent.AVOIDABLE_DIGEST,
            kind="avoidable_digest", message=clip(digest_message(digest, since), MAX_MESSAGE_CHARS), time=now,
            evidence={"spend_usd": round(digest.spend_usd, 4),
                      "avoidable_usd": None if digest.avoidable_usd is None else round(digest.avoidable_usd, 4),
                      "since": since},
        )  # fmt: skip
        found += [(t, note) for t in config.teams.get(digest.team, ()) if t.wants(note.event)]
    return found
