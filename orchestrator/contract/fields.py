"""Field checks shared by the parsers of records that job code and monitors write (progress records,
monitor window summaries): untrusted data, read into typed, finite, bounded values or refused.

A refused record raises :class:`BadRecord`, whose message names the field and what it must be, never
the value (it may hold anything, terminal escapes included). Readers skip such a record and say so once
per source (:func:`warn_once`), never once per read.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("orchestrator.contract")

MAX_COUNT = 10**15
"""Largest step, step count or sample count taken."""
MAX_SECONDS = 1e9
"""Longest duration taken (about 31 years)."""
MIN_TIME = datetime(1970, 1, 1, tzinfo=UTC)
MAX_TIME = datetime(2200, 1, 1, tzinfo=UTC)
"""Times (ISO strings or epoch seconds) outside these are refused."""
MAX_EPOCH = MAX_TIME.timestamp()
MAX_WARNED_SOURCES = 4096


class BadRecord(ValueError):
    """A record that does not hold what its format says; the message names the field."""


def json_object(line: str | bytes) -> dict[str, Any] | None:
    """The JSON object of one line; None for anything else (blank, torn, not UTF-8, too deep, a list)."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return record if isinstance(record, dict) else None


def require_finite(record: Mapping[str, Any]) -> None:
    """Refuse a record holding a non-finite number anywhere (JSON has none; ``1e400`` reads as inf)."""
    for key, top in record.items():
        pending: list[Any] = [top]
        while pending:
            value = pending.pop()
            if isinstance(value, float) and not math.isfinite(value):
                raise BadRecord(f"{key} holds a number that is not finite")
            if isinstance(value, Mapping):
                pending.extend(value.values())
            elif isinstance(value, list):
                pending.extend(value)


def _number(record: Mapping[str, Any], key: str, required: bool) -> float | int | None:
    value = record.get(key)
    if value is None:
        if required:
            raise BadRecord(f"{key} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRecord(f"{key} must be a number")
    return value


def whole(record: Mapping[str, Any], key: str, low: int = 0, high: int = MAX_COUNT,
          required: bool = False) -> int | None:  # fmt: skip
    """``record[key]`` as an int in ``low..high`` (a float such as 5.0 counts); None when absent or null."""
    value = _number(record, key, required)
    if value is None:
        return None
    if isinstance(value, float):
        if not value.is_integer():  # also inf and nan
            raise BadRecord(f"{key} must be a whole number from {low} to {high}")
        value = int(value)
    if not low <= value <= high:
        raise BadRecord(f"{key} must be a whole number from {low} to {high}")
    return value


def real(record: Mapping[str, Any], key: str, low: float = -math.inf, high: float = math.inf,
         required: bool = False) -> float | None:  # fmt: skip
    """``record[key]`` as a finite float in ``low..high``; None when absent or null."""
    value = _number(record, key, required)
    if value is None:
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        number = math.inf
    if not (math.isfinite(number) and low <= number <= high):
        raise BadRecord(f"{key} must be a number from {low:g} to {high:g}")
    return number


def text(record: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    """``record[key]`` when it is a string; ``default`` when absent or null."""
    value = record.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise BadRecord(f"{key} must be a string")
    return value


def aware_time(record: Mapping[str, Any], key: str) -> datetime | None:
    """``record[key]``, an ISO 8601 time with a UTC offset, as a datetime; None when absent or null."""
    value = record.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRecord(f"{key} must be an ISO 8601 time string")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BadRecord(f"{key} must be an ISO 8601 time string") from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise BadRecord(f"{key} must carry a UTC offset (such as +00:00 or Z)")
    if not MIN_TIME <= moment <= MAX_TIME:
        raise BadRecord(f"{key} must be between {MIN_TIME.year} and {MAX_TIME.year}")
    return moment


_warned: set[str] = set()


def warn_once(source: str, problem: str) -> None:
    """Log that ``source`` holds a record that is skipped, the first time only (per process)."""
    if source in _warned:
        return
    if len(_warned) >= MAX_WARNED_SOURCES:
        _warned.clear()
    _warned.add(source)
    log.warning("%s: skipping a record that is not valid (%s); later ones there are skipped quietly",
                source, problem)  # fmt: skip
