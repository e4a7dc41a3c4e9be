"""CSV cells a spreadsheet would run as a formula are quoted; numbers, negative ones too, stay numbers."""

from __future__ import annotations

import csv
import io

import pytest

from orchestrator.costs.render import to_csv
from orchestrator.costs.report import GroupBy, build_report
from tests.costs.factory import at, job, seg

NOW = at(12, day=20)

FORMULAS = ['=HYPERLINK("http://x","y")', "+1+2", "-2+3", "@SUM(A1)", "\tx", "\rx", "\r\n=1"]


@pytest.mark.parametrize("name", FORMULAS)
def test_a_formula_in_a_name_is_written_as_text(name: str) -> None:
    jobs = [job("j1", team=name)]
    segments = [seg("j1", at(10), at(11), price=3.0, od=1.0)]  # dearer than on-demand: savings < 0
    report = build_report(jobs, segments, NOW, None, GroupBy.TEAM)
    rows = list(csv.DictReader(io.StringIO(to_csv(report), newline="")))
    assert rows[0]["team"] == "'" + name
    assert rows[0]["savings"] == "-2.000000" and float(rows[0]["savings"]) == -2.0
    assert rows[0]["jobs"] == "1" and rows[-1]["team"] == "TOTAL"


def test_an_ordinary_name_is_unchanged() -> None:
    report = build_report([job("j1", team="ml-research")], [seg("j1", at(10), at(11), price=1, od=3)], NOW,
                          None, GroupBy.TEAM)  # fmt: skip
    assert next(csv.DictReader(io.StringIO(to_csv(report), newline="")))["team"] == "ml-research"
