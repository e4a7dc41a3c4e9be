"""The one way gpuctl writes and reads times as text, and that no module keeps its own copy of it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from orchestrator.times import iso_z, parse_iso, parse_iso_or_none

ROOT = Path(__file__).resolve().parents[1]
MOMENT = datetime(2026, 11, 26, 9, 30, 15, 250000, tzinfo=UTC)


def test_iso_z_writes_utc_with_a_z() -> None:
    assert iso_z(MOMENT) == "2026-11-26T09:30:15.250000Z"
    assert iso_z(MOMENT.astimezone(timezone(timedelta(hours=2)))) == "2026-11-26T09:30:15.250000Z"
    assert iso_z(datetime(2026, 1, 1)) == "2026-01-01T00:00:00Z"  # naive is UTC


@pytest.mark.parametrize(
    "text",
    ["2026-11-26T09:30:15.25Z", "2026-11-26T09:30:15.250000+00:00", "2026-11-26T10:30:15.25+01:00",
     " 2026-11-26T09:30:15.25 "],
)  # fmt: skip
def test_parse_iso_reads_z_offsets_and_naive_text_as_the_same_moment(text: str) -> None:
    moment = parse_iso(text)
    assert moment == MOMENT and moment.tzinfo is not None


def test_a_written_time_reads_back_equal() -> None:
    assert parse_iso(iso_z(MOMENT)) == MOMENT


def test_parse_iso_refuses_text_that_is_not_a_time() -> None:
    with pytest.raises(ValueError):
        parse_iso("soon")


@pytest.mark.parametrize("value", [None, "", "soon", 12, ["2026-11-26"]])
def test_parse_iso_or_none_gives_none_for_absent_or_damaged_data(value: object) -> None:
    assert parse_iso_or_none(value) is None


def test_parse_iso_or_none_reads_a_time() -> None:
    assert parse_iso_or_none("2026-11-26T09:30:15.25Z") == MOMENT


_COPY = re.compile(r"""replace\(\s*["'](Z|\+00:00)["']\s*,\s*["'](\+00:00|Z)["']\s*\)""")


def test_no_module_keeps_its_own_copy_of_the_iso_z_helper() -> None:
    copies = []
    for folder in ("orchestrator", "operators"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name != "orchestrator/times.py" and _COPY.search(path.read_text()):
                copies.append(name)
    assert copies == [], f"use orchestrator.times (iso_z, parse_iso) instead of a local copy in {copies}"
