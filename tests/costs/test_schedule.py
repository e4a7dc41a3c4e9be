"""Scheduled reports: the cron trigger's next fire time and the job function's files."""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from pathlib import Path

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from orchestrator.costs.budgets import CostConfig, parse_cost_config
from orchestrator.costs.inputs import ReportInputs
from orchestrator.costs.ledger import job_costs
from orchestrator.costs.report import parse_since
from orchestrator.costs.schedule import cron_trigger, register_report_job, write_report_files
from orchestrator.errors import UserError
from tests.costs.factory import at, fleet


def inputs() -> ReportInputs:
    jobs, segments, idle = fleet()
    return ReportInputs(jobs, segments, idle)


def test_trigger_next_fire_time() -> None:
    trigger = cron_trigger("0 8 * * *")
    after = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
    assert trigger.get_next_fire_time(None, after) == datetime(2026, 3, 3, 8, 0, tzinfo=UTC)
    # crontab numbers weekdays from Sunday (0 or 7); APScheduler 3 from Monday: 1-5 must mean Mon-Fri
    saturday = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
    assert cron_trigger("0 8 * * 1-5").get_next_fire_time(None, saturday) == datetime(
        2026, 3, 9, 8, tzinfo=UTC
    )
    assert cron_trigger("0 8 * * 0").get_next_fire_time(None, saturday) == datetime(2026, 3, 8, 8, tzinfo=UTC)
    assert cron_trigger("0 8 * * 7").get_next_fire_time(None, saturday) == datetime(2026, 3, 8, 8, tzinfo=UTC)
    assert cron_trigger("0 8 * * sat").get_next_fire_time(None, saturday) == datetime(
        2026, 3, 14, 8, tzinfo=UTC
    )
    for bad in ("every morning", "0 8 * * 9", "61 8 * * *"):
        with pytest.raises(UserError, match="crontab"):
            cron_trigger(bad)


def test_register_and_run_job_function(tmp_path: Path) -> None:
    config = parse_cost_config(f'reports: {{schedule: "30 6 * * 1", folder: {tmp_path / "out"}}}')
    scheduler = BackgroundScheduler(timezone=UTC)  # never started: jobs wait as pending
    job = register_report_job(scheduler, config, inputs)
    assert job is not None
    monday = job.trigger.get_next_fire_time(None, datetime(2026, 3, 4, tzinfo=UTC))
    assert monday == datetime(2026, 3, 9, 6, 30, tzinfo=UTC)
    now = at(12, day=6)
    written = job.func(*job.args, now=now, **job.kwargs)
    assert [p.suffix for p in written] == [".html", ".csv"] and all(
        p.parent == tmp_path / "out" for p in written
    )
    rows = list(csv.DictReader(written[1].open()))
    jobs, segments, idle = fleet()
    expected = sum(c.cost_usd for c in job_costs(jobs, segments, now, parse_since("7d", now), idle))
    assert float(rows[-1]["totalCost"]) == pytest.approx(expected, abs=1e-5)
    assert "<svg" in written[0].read_text()
    assert register_report_job(scheduler, CostConfig(), inputs) is None
    with pytest.raises(UserError, match="folder"):
        register_report_job(scheduler, CostConfig(report_schedule="0 8 * * *"), inputs)
    assert len(write_report_files(tmp_path / "again", inputs, now)) == 2
