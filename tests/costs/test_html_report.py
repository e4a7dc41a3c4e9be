"""The HTML report's structure: one point drawn, time axis on the jobs' span, nice ticks, simulated
costs marked, full-width layout, attempts, market split and budget lines."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from orchestrator.costs.budgets import CostConfig
from orchestrator.costs.charts import format_tick, nice_ticks, time_ticks
from orchestrator.costs.html import _time, to_html
from orchestrator.costs.ledger import Window
from orchestrator.costs.report import build_report
from tests.costs.factory import at, fleet, job, preempted_three_times, seg


def chart(page: str, name: str) -> str:
    found = re.search(rf'data-chart="{name}".*?</figure>', page, flags=re.S)
    assert found, f"no chart {name}"
    return found.group(0)


def one_job_page(backend: str = "local") -> str:
    """A job from 05:14 to 05:40 in a window that starts at 04:18."""
    j = replace(job("one"), backend=backend)
    segments = [seg("one", at(5.25) - timedelta(minutes=1), at(5 + 40 / 60), price=0.01, od=0.03)]
    return to_html(build_report([j], segments, at(6), Window(at(4.3), at(6)), "job"))


def test_one_point_is_drawn() -> None:
    page = one_job_page()
    savings = chart(page, "savings-over-time")
    assert len(re.findall(r'<circle class="point"', savings)) >= 1
    job_, segments = job("short"), [seg("short", at(5), at(5) + timedelta(seconds=30), price=1.0, od=3.0)]
    single = to_html(build_report([job_], segments, at(6), None, "job"))
    savings = chart(single, "savings-over-time")
    assert len(re.findall(r'<circle class="point"', savings)) == 1 and "<polyline" not in savings
    assert len(re.findall(r'class="bar"', chart(single, "cost-over-time"))) == 1


def test_time_axis_follows_the_jobs() -> None:
    page = one_job_page()
    cost = chart(page, "cost-over-time")
    starts = re.findall(r'data-start="([^"]+)"', cost)
    assert datetime.fromisoformat(starts[0]) == at(5.25) - timedelta(minutes=1)  # 05:14, not 04:18
    labels = re.findall(r'class="tick x"[^>]*>([^<]+)<', cost)
    assert labels and not any("04:" in label for label in labels), labels
    assert any("05:" in label for label in labels) and len(starts) > 1


def tick_values(svg: str) -> list[str]:
    return re.findall(r'class="tick y"[^>]*>([^<]+)<', svg)


@pytest.mark.parametrize("top", [0.00873, 0.7, 3.2, 87.0, 1234.0, 2.6e6])
def test_ticks_are_nice(top: float) -> None:
    ticks = nice_ticks(top)
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert round(mantissa, 6) in (1.0, 2.0, 5.0) and ticks[0] == 0 and ticks[-1] >= top and len(ticks) <= 7
    labels = [format_tick(t, step) for t in ticks]
    assert len(set(labels)) == len(labels) and all(len(label) <= 6 for label in labels), labels


def test_chart_ticks_are_rounded() -> None:
    page = one_job_page()
    for name in ("cost-over-time", "savings-over-time"):
        labels = tick_values(chart(page, name))
        assert labels and all(re.fullmatch(r"\$\d+(\.\d+)?", label) for label in labels), labels
        values = [float(label[1:]) for label in labels]
        step = values[1] - values[0]
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert round(mantissa, 6) in (1.0, 2.0, 5.0), labels
        assert all(abs(v - i * step) < step * 1e-6 for i, v in enumerate(values)), labels
    assert format_tick(0.002, 0.002, "$") == "$0.002" and format_tick(2500, 500) == "2.5k"


def test_simulated_costs_are_marked() -> None:
    page = one_job_page("local")
    assert "class='banner simulated'" in page and "<span class='tag simulated'>simulated</span>" in page
    real = one_job_page("slurm")
    assert "banner simulated" not in real and "tag simulated" not in real


def test_layout_fills_the_width() -> None:
    page = one_job_page()
    assert "grid-template-columns:repeat(auto-fit,minmax(420px,1fr))" in page
    assert "figure svg{display:block;width:100%;height:auto}" in page
    assert not re.search(r"<svg[^>]* width=", page)  # only a viewBox: the svg scales with its column


def test_attempts_and_market_split() -> None:
    j3, segments = preempted_three_times()
    page = to_html(build_report([j3], segments, at(20), None, "job"))
    details = re.search(r"<details class='job' data-job='j3'>.*?</details>", page, flags=re.S)
    assert details
    rows = re.findall(r"<tr data-market='([^']+)'>(.*?)</tr>", details.group(0))
    assert [m for m, _ in rows] == ["spot", "spot", "spot", "on-demand"]
    first = re.findall(r"<td>([^<]*)</td>", rows[0][1])
    assert first[:5] == ["1", "spot", "us-east-1a", "p3.2xlarge", "2 x 1 V100"]
    assert (
        first[5] == "$1.0000" and first[9] == "2h00m" and first[10] == "$4.0000" and first[11] == "preempted"
    )
    market = chart(page, "market-split")
    values = dict(re.findall(r'data-group="([^"]+)" data-value="([^"]+)"', market))
    assert float(values["spot"]) == pytest.approx(8.8) and float(values["on-demand"]) == pytest.approx(6.0)
    assert "$8.80 (59%)" in market


def test_budget_lines_when_budgets_are_configured() -> None:
    jobs, segments, _ = fleet()
    now = at(12, day=8)
    plain = to_html(build_report(jobs, segments, now, None, "team"))
    assert 'data-chart="budget"' not in plain
    config = CostConfig({"vision": 500.0}, other_teams_monthly_usd=50.0)
    page = to_html(build_report(jobs, segments, now, None, "team", budgets=config))
    budgets = re.findall(r'data-chart="budget".*?</figure>', page, flags=re.S)
    assert len(budgets) == 2
    assert 'class="limit" data-value="500.000000"' in budgets[0] and "team vision" in page
    assert 'class="limit" data-value="50.000000"' in budgets[1] and "other teams (shared)" in page
    points = [float(v) for v in re.findall(r'<circle class="point"[^>]*data-value="([^"]+)"', budgets[0])]
    assert points == sorted(points) and points[-1] > 0  # cumulative spend of the month so far


def test_time_ticks_are_round_times() -> None:
    start = datetime(2026, 3, 2, 5, 14, tzinfo=UTC)
    ticks = time_ticks(start, start + timedelta(minutes=26))
    assert [label for _, label in ticks] == ["03-02 05:15", "05:20", "05:25", "05:30", "05:35", "05:40"]


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 3, 1, 5, 6, 7, 123456, tzinfo=timezone(timedelta(hours=2))),
        datetime(2026, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(999, 1, 1, 3, 4, 5, tzinfo=UTC),  # a year of three digits: strftime writes it unpadded
        datetime(10, 6, 1, tzinfo=timezone(timedelta(hours=1))),
    ],
)
def test_a_segment_time_is_written_as_strftime_writes_it_in_utc(moment: datetime) -> None:
    assert _time(moment) == moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    assert _time(None) == "running"
