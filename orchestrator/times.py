"""The one way gpuctl writes and reads a moment in text: ISO 8601 in UTC with a ``Z`` suffix.

GPUJob statuses, events, the ledger's JSON and the CLI's documents all hold times as text. Every module
writes them with :func:`iso_z` and reads them back with :func:`parse_iso` (naive text is read as UTC),
so a time written by one part is read the same by every other.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso_z(moment: datetime) -> str:
    """``moment`` as ISO 8601 text in UTC ending in ``Z`` (``2026-11-26T09:30:00Z``); a naive
    ``moment`` is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    """The moment ISO 8601 ``text`` names, timezone-aware (``Z`` or an offset; naive text is UTC).
    Raises ``ValueError`` on text that is not ISO 8601."""
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def parse_iso_or_none(value: object) -> datetime | None:
    """:func:`parse_iso` of ``value`` when it is ISO 8601 text, else None (absent or damaged data)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_iso(value)
    except ValueError:
        return None
