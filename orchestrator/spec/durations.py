"""Human durations (``90s``, ``1h30m``, ``2d``) and deadlines (a duration or an ISO 8601 time)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from orchestrator.spec.limits import MAX_DURATION_SECONDS, shown

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(text: str | int | float) -> timedelta:
    """Parse ``"90s"``, ``"1h30m"``, ``"2.5h"``, ``"2d"`` or a bare number of seconds.

    Raises ``ValueError`` with a message suitable for a spec error; durations longer than
    :data:`~orchestrator.spec.limits.MAX_DURATION_SECONDS` (10 years) are refused.
    """
    if isinstance(text, bool):
        raise ValueError("expected a duration such as '90s', '30m' or '2h', got a boolean")
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError("a duration cannot be negative")
        return _bounded(float(text), text)
    s = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", s):
        return _bounded(float(s), text)
    pos = 0
    total = 0.0
    for match in _PART.finditer(s):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(s) or not s:
        raise ValueError(f"{shown(text)} is not a duration; write it like '90s', '30m', '2h' or '1h30m'")
    return _bounded(total, text)


class DurationTooLong(ValueError):
    """A well-formed duration above the bound."""


def _bounded(seconds: float, text: str | int | float) -> timedelta:
    if not math.isfinite(seconds) or seconds > MAX_DURATION_SECONDS:
        raise DurationTooLong(f"{shown(text)} is longer than 10 years; give a shorter duration such as '36h'")
    return timedelta(seconds=seconds)


def parse_deadline(text: str | int | float | datetime, now: datetime) -> datetime:
    """A deadline is a duration from ``now`` (``"6h"``) or an absolute ISO 8601 time."""
    if isinstance(text, datetime):
        moment = text
    else:
        try:
            return now + parse_duration(text)
        except DurationTooLong:
            raise
        except ValueError:
            pass
        try:
            moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"{shown(text)} is neither a duration ('6h') nor an ISO 8601 time ('2026-12-01T18:00:00Z')"
            ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if (moment - now).total_seconds() > MAX_DURATION_SECONDS:
        raise ValueError(
            f"{shown(text)} is more than 10 years away; give a nearer time or a duration such as '36h'"
        )
    return moment


def format_duration(seconds: float) -> str:
    """``3725`` -> ``"1h02m05s"``; short and stable, for tables and logs."""
    seconds = max(0, round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m{s:02d}s"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"
