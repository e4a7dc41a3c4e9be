"""A cell a spreadsheet would run as a formula is quoted also when its formula start is disguised:
behind white space or invisible characters, or written with a look-alike (full-width ``＝``)."""

from __future__ import annotations

import csv
import io

import pytest

from orchestrator.costs.render import looks_like_formula, to_csv
from orchestrator.costs.report import GroupBy, build_report
from tests.costs.factory import at, job, seg

DISGUISED = [
    " =1+1",  # a leading space
    "   @SUM(A1)",
    "\u3000=1",  # ideographic space
    "\u00a0+1",  # no-break space
    "\u200b=1",  # zero-width space
    "\ufeff=1",  # byte order mark
    "\x00=1",
    "\t =1",
    "\r\n+1",
    '\uff1dHYPERLINK("http://x","y")',  # full-width =
    "\uff0b1",  # full-width +
    "\uff0d1",  # full-width -
    "\uff20SUM(A1)",  # full-width @
    "\ufe661",  # small equals sign
    " \uff1d1",
    "\u22121",  # minus sign
    "|cmd",
    "%macro",
]


@pytest.mark.parametrize("name", DISGUISED)
def test_a_disguised_formula_is_written_as_text(name: str) -> None:
    report = build_report([job("j1", team=name)], [seg("j1", at(10), at(11), price=1.0, od=3.0)], at(12, day=20), None,
                          GroupBy.TEAM)  # fmt: skip
    rows = list(csv.DictReader(io.StringIO(to_csv(report), newline="")))
    assert rows[0]["team"] == "'" + name


@pytest.mark.parametrize("name", ["ml-research", "a=b", "team 1", "Ｍｌ", "caf\u00e9", "数据"])
def test_names_that_are_no_formula_are_unchanged(name: str) -> None:
    assert not looks_like_formula(name)
