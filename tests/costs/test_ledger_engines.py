"""The ledger read back from the job store gives the same cost report, budget burn and team month
spend on SQLite and on PostgreSQL as the records that were written: every figure, every format."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.costs.budgets import parse_cost_config, team_month_spent
from orchestrator.costs.inputs import ReportInputs, read_ledger
from orchestrator.costs.render import to_csv, to_json
from orchestrator.costs.report import GroupBy, build_report_from
from orchestrator.state.records import JobRecord, SegmentRecord
from orchestrator.state.store import JobStore
from tests.costs.factory import at, fleet
from tests.costs.ledger_rows import write_records

pytestmark = pytest.mark.usefixtures("each_engine")  # every test on SQLite and on PostgreSQL

NOW = at(12, day=20)
BUDGETS = parse_cost_config("budgets: {teams: {ml-research: 1000, vision: 50, nlp: 400}}")


def _written(home: Path) -> tuple[JobStore, list[JobRecord], list[SegmentRecord]]:
    """The factory's fleet, written into the job store of ``home`` as the controller keeps it."""
    job_records, segment_records, _ = fleet()
    job_records = [  # Kubernetes jobs of two clusters beside local ones: the ledger's cluster and namespace
        dataclasses.replace(j, cluster=f"c{i % 2}", namespace=j.team) if i % 3 else j
        for i, j in enumerate(job_records)
    ]
    store = JobStore(home)
    write_records(store, job_records, segment_records)
    return store, job_records, segment_records


@pytest.mark.parametrize("by", list(GroupBy))
def test_the_report_from_the_store_is_the_report_of_the_records(tmp_path: Path, by: GroupBy) -> None:
    store, job_records, segment_records = _written(tmp_path / "home")
    stored = read_ledger(store)
    assert stored.jobs == job_records
    assert [s._replace(id=0) for s in stored.segments] == [s._replace(id=0) for s in segment_records]
    expected = ReportInputs(jobs=job_records, segments=segment_records, idle=stored.idle,
                            measured=stored.measured, to_finish=stored.to_finish)  # fmt: skip
    report = build_report_from(stored, NOW, None, by, BUDGETS)
    again = build_report_from(expected, NOW, None, by, BUDGETS)
    assert json.loads(to_json(report)) == json.loads(to_json(again))
    assert to_csv(report) == to_csv(again)
    assert report.totals.cost_usd > 0 and len(report.rows) > 1


def test_a_teams_month_spend_and_a_window_from_the_store(tmp_path: Path) -> None:
    store, job_records, segment_records = _written(tmp_path / "home")
    for team in ("ml-research", "vision", "nlp"):
        assert team_month_spent(store.list_jobs(), store.segments(), team, NOW) == pytest.approx(
            team_month_spent(job_records, segment_records, team, NOW), rel=1e-12
        )
    since = at(0, day=3)
    overlapping = [s for s in segment_records if s.ended_at is None or s.ended_at >= since]
    assert [s.job_id for s in store.segments(since=since)] == [s.job_id for s in overlapping]
    assert store.segments(since=NOW + timedelta(days=1)) == []
