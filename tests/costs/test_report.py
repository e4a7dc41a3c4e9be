"""The report core and its table, CSV and JSON outputs: same rows, totals equal to the ledger."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from rich.console import Console

from orchestrator.costs.html import to_html
from orchestrator.costs.ledger import Window, job_costs
from orchestrator.costs.render import to_csv, to_json, to_table
from orchestrator.costs.report import GroupBy, build_report, parse_since, parse_window
from orchestrator.errors import UserError
from tests.costs.factory import at, fleet, preempted_three_times, seg

NOW = at(12, day=20)


def ledger_totals() -> tuple[float, float, float]:
    jobs, segments, idle = fleet()
    costs = job_costs(jobs, segments, NOW, idle=idle)
    return (
        sum(c.cost_usd for c in costs),
        sum(c.on_demand_usd for c in costs),
        sum(c.idle_cost_usd or 0.0 for c in costs),
    )


@pytest.mark.parametrize("by", list(GroupBy))
def test_totals_equal_ledger_in_every_format(by: GroupBy) -> None:
    jobs, segments, idle = fleet()
    cost, on_demand, idle_cost = ledger_totals()
    report = build_report(jobs, segments, NOW, None, by, idle=idle)
    assert report.totals.cost_usd == pytest.approx(cost)
    assert sum(r.cost_usd for r in report.rows) == pytest.approx(cost)
    assert report.totals.on_demand_usd == pytest.approx(on_demand)
    assert report.totals.idle_cost_usd == pytest.approx(idle_cost)
    assert sum(sum(v) for v in report.series.cost_by_group.values()) == pytest.approx(cost)
    assert sum(report.series.savings) == pytest.approx(on_demand - cost)

    doc = json.loads(to_json(report))
    assert doc["totals"]["totalCost"] == pytest.approx(cost)
    assert sum(r["gpuCost"] for r in doc["rows"]) == pytest.approx(cost)
    assert doc["totals"]["idleCost"] == pytest.approx(idle_cost)
    assert [r["name"] for r in doc["rows"]] == [r.name for r in report.rows]

    rows = list(csv.DictReader(io.StringIO(to_csv(report))))
    assert rows[-1][by.value] == "TOTAL"
    assert float(rows[-1]["totalCost"]) == pytest.approx(cost, abs=1e-5)
    assert sum(float(r["totalCost"]) for r in rows[:-1]) == pytest.approx(cost, abs=1e-4)
    assert float(rows[-1]["onDemandCost"]) == pytest.approx(on_demand, abs=1e-5)

    page = to_html(report)
    assert f"cost ${cost:,.2f}, on-demand equivalent ${on_demand:,.2f}" in page
    one_row = len(report.rows) == 1  # by namespace or cluster: every local job is in the row "-"
    assert page.count(f"<td>${cost:,.2f}</td>") == 1 + one_row  # the table's footer (and that row)

    console = Console(width=250, record=True)
    console.print(to_table(report))
    text = console.export_text()
    assert f"${cost:,.2f}" in text and f"${on_demand - cost:,.2f}" in text
    assert all(r.name in text for r in report.rows)


def test_by_market_splits_a_job_that_ran_on_both() -> None:
    job, segments = preempted_three_times()
    report = build_report([job], segments, at(20), None, "market", idle={"j3": 2.5})
    rows = {r.name: r for r in report.rows}
    assert rows["spot"].cost_usd == pytest.approx(8.8) and rows["on-demand"].cost_usd == pytest.approx(6.0)
    assert rows["spot"].jobs == rows["on-demand"].jobs == 1 and report.totals.jobs == 1
    # idle 2.5 GPU-h shared by GPU-hours: spot 8 of 10, on-demand 2 of 10
    assert rows["spot"].idle_gpu_hours == pytest.approx(2.0)
    assert rows["spot"].gpu_efficiency == rows["on-demand"].gpu_efficiency == pytest.approx(0.75)
    assert report.totals.idle_cost_usd == pytest.approx(2.5 * 1.48)


def test_window_and_buckets() -> None:
    job, segments = preempted_three_times()
    report = build_report([job], segments, at(20), Window(at(11), at(15)), "job")
    # inside [11, 15): 1h x 2 @1.0 + 1h x 2 @1.2 + 1h x 1 @1.2 = 5.6
    assert report.totals.cost_usd == pytest.approx(5.6)
    # 4 hours of segments: 10-minute buckets (at most 30), from 11:00 to 15:00
    assert report.series.bucket == timedelta(minutes=10) and len(report.series.starts) == 24
    assert report.series.starts[0] == at(11) and report.series.starts[-1] + report.series.bucket == at(15)
    hourly = [sum(report.series.cost_by_group["j3"][i : i + 6]) for i in range(0, 24, 6)]
    assert hourly == pytest.approx([2.0, 1.2, 1.2, 1.2])
    assert report.notes and "GPU use not measured" in report.notes[0]


def test_since_and_window_parsing() -> None:
    w = parse_since("7d", NOW)
    assert w.end - w.start == timedelta(days=7)
    w2 = parse_window("2026-03-01,2026-03-08T12:00")
    assert w2.start.tzinfo is not None and (w2.end - w2.start) == timedelta(days=7, hours=12)
    for bad in ("7x", "0d"):
        with pytest.raises(UserError):
            parse_since(bad, NOW)
    for bad in ("2026-03-01", "yesterday,today", "2026-03-08,2026-03-01"):
        with pytest.raises(UserError):
            parse_window(bad)


def test_empty_ledger_gives_an_empty_report() -> None:
    report = build_report([], [], NOW, parse_since("1d", NOW), "team")
    assert report.rows == [] and report.totals.cost_usd == 0.0
    assert json.loads(to_json(report))["totals"]["totalCost"] == 0.0


def test_table_limit_sums_the_rest_into_one_line() -> None:
    jobs, segments, idle = fleet()
    report = build_report(jobs, segments, NOW, None, "job", idle=idle)
    console = Console(width=250, record=True)
    console.print(to_table(report, limit=2))
    text = console.export_text()
    rest = sum(r.cost_usd for r in report.rows[2:])
    assert f"({len(report.rows) - 2} more)" in text and f"${rest:,.2f}" in text
    assert f"${report.totals.cost_usd:,.2f}" in text and report.rows[2].name not in text


def test_running_jobs_add_their_forecast_cost_to_finish_to_the_projected_column() -> None:
    jobs, segments, idle = fleet()
    running = seg("job00", at(8, day=20), None, price=1.0, od=3.0)  # still open at NOW
    segments.append(running)
    report = build_report(jobs, segments, NOW, None, GroupBy.JOB, idle=idle, to_finish={running.job_id: 7.5})
    row = next(r for r in report.rows if r.name == running.job_id)
    assert row.projected_usd == pytest.approx(row.cost_usd + 7.5)
    assert report.totals.projected_usd == pytest.approx(report.totals.cost_usd + 7.5)
    others = [r for r in report.rows if r.name != running.job_id]
    assert all(r.projected_usd == r.cost_usd for r in others)
    doc = json.loads(to_json(report))
    assert doc["totals"]["projectedCost"] == pytest.approx(report.totals.cost_usd + 7.5)
    console = Console(width=250, record=True)
    console.print(to_table(report))
    assert f"${row.cost_usd + 7.5:,.2f}" in console.export_text()
