"""Human durations (``90s``, ``1h30m``, ``2d``) and deadlines (a duration or an ISO 8601 time).

The spec model holds them typed: a :class:`Duration` is a ``timedelta`` that remembers the text it
was written as, a :class:`Deadline` is a duration from submission or a moment. Both are parsed once,
when the spec is loaded, and written back as the same text (``"36h"``, ``"2026-12-01T00:00Z"``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Self

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from orchestrator.spec.limits import MAX_DURATION_SECONDS, MAX_LINE_CHARS, shown
from orchestrator.times import parse_iso

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(text: str | int | float | timedelta) -> timedelta:
    """Parse ``"90s"``, ``"1h30m"``, ``"2.5h"``, ``"2d"`` or a bare number of seconds.

    Raises ``ValueError`` with a message suitable for a spec error; durations longer than
    :data:`~orchestrator.spec.limits.MAX_DURATION_SECONDS` (10 years) are refused. A ``timedelta``
    (a spec's :class:`Duration`) is already parsed and comes back as it is.
    """
    if isinstance(text, timedelta):
        return text
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


def parse_deadline(text: str | int | float | datetime | Deadline, now: datetime) -> datetime:
    """A deadline is a duration from ``now`` (``"6h"``) or an absolute ISO 8601 time.

    A spec's :class:`Deadline` is already parsed: this is its :meth:`Deadline.resolve` at ``now``.
    """
    if isinstance(text, Deadline):
        return text.resolve(now)
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
            moment = parse_iso(str(text))
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


def _spec_text(value: object) -> str:
    """``value`` as spec text, or the pydantic error a non-text or overlong value gets."""
    if not isinstance(value, str):
        raise PydanticCustomError("string_type", "Input should be a valid string")
    if len(value) > MAX_LINE_CHARS:
        raise PydanticCustomError(
            "string_too_long",
            "String should have at most {max_length} characters",
            {"max_length": MAX_LINE_CHARS},
        )
    return value


def _text_schema(cls: type[Any], parse: Any) -> core_schema.CoreSchema:
    """Validate spec text with ``parse`` (an instance of ``cls`` passes as it is); write the text back."""

    def validate(value: object) -> Any:
        return value if isinstance(value, cls) else parse(_spec_text(value))

    return core_schema.no_info_plain_validator_function(
        validate,
        serialization=core_schema.plain_serializer_function_ser_schema(
            str, return_schema=core_schema.str_schema()
        ),
    )


def _text_json_schema() -> JsonSchemaValue:
    """What the spec's JSON Schema (and the CRD) says of a duration or deadline: the text it is written as."""
    return {"type": "string", "maxLength": MAX_LINE_CHARS}


class Duration(timedelta):
    """A spec duration: a ``timedelta`` parsed once from its text (``"12m"``), written back as that text."""

    text: str

    def __new__(cls, text: str) -> Self:
        delta = parse_duration(text)
        self = super().__new__(cls, days=delta.days, seconds=delta.seconds, microseconds=delta.microseconds)
        self.text = text
        return self

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Duration({self.text!r})"

    def __reduce__(self) -> tuple[type[Duration], tuple[str]]:
        return (type(self), (self.text,))

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return _text_schema(cls, cls)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return _text_json_schema()


@dataclass(frozen=True)
class Deadline:
    """A spec deadline: a duration from submission (``"36h"``) or a moment (``"2026-12-01T00:00Z"``).

    Parsed once when the spec is loaded; :meth:`resolve` turns it into the moment it names for a job
    submitted at a given time. Written back as the text it was given as.
    """

    text: str
    after: timedelta | None = None
    """The duration from submission, for a relative deadline."""
    at: datetime | None = None
    """The moment (timezone-aware), for an absolute deadline."""

    @classmethod
    def parse(cls, text: str, now: datetime | None = None) -> Deadline:
        """Parse ``text``; raises ``ValueError`` (a spec error message) on text that is neither a
        duration nor an ISO 8601 time, or one more than 10 years from ``now`` (default: the clock)."""
        try:
            return cls(text, after=parse_duration(text))
        except DurationTooLong:
            raise
        except ValueError:
            pass
        moment = parse_deadline(text, now or datetime.now(UTC))
        return cls(text, at=moment)

    def resolve(self, submitted_at: datetime) -> datetime:
        """The moment this deadline names for a job submitted at ``submitted_at``."""
        return self.at if self.at is not None else submitted_at + (self.after or timedelta())

    def __str__(self) -> str:
        return self.text

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return _text_schema(cls, cls.parse)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return _text_json_schema()
