"""A self-contained HTML cost report: inline SVG charts (:mod:`orchestrator.costs.charts`), no scripts,
no network; the page fills the browser's width.

Sections: a summary (with a banner when costs are simulated, and notes such as how much GPU use was
measured); charts of cost over time stacked by the report's grouping, spot savings over time, spend by
market, each monthly budget's burn with its budget line, GPU utilization of the measured jobs and
their efficiency against cost (jobs whose GPU use was not measured are left out, and the charts say
how many), avoidable spend by the grouping; the report table (with its avoidable column); the top
fixes priced in USD; and each job's attempts and segments.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from html import escape

from orchestrator.costs import charts
from orchestrator.costs.ledger import JobCost
from orchestrator.costs.render import FIX_HEADERS, NOT_MEASURED, TABLE_HEADERS, fix_cells, table_cells
from orchestrator.costs.report import SIMULATED_NOTE, BudgetBurn, Report

MAX_JOB_DETAILS = 200
"""Jobs whose attempts the page lists (the most expensive first)."""


def _unmeasured(report: Report) -> list[JobCost]:
    return [j for j in report.jobs if j.gpu_efficiency is None]


def _left_out(report: Report) -> str:
    missing = _unmeasured(report)
    if not missing:
        return ""
    return f"{len(missing)} of {len(report.jobs)} jobs left out: their GPU use was not measured"


def cost_over_time_svg(report: Report) -> str:
    s = report.series
    return charts.stacked_bars_svg(
        "cost-over-time",
        f"Cost over time by {report.by.value} (USD per {_bucket_name(s.bucket)})",
        s.starts,
        s.bucket,
        s.cost_by_group,
    )


def savings_over_time_svg(report: Report) -> str:
    s = report.series
    mids = [start + s.bucket / 2 for start in s.starts]
    end = s.starts[-1] + s.bucket if s.starts else report.window.end
    start = s.starts[0] if s.starts else report.window.start
    return charts.line_svg(
        "savings-over-time",
        f"Spot savings over time (on-demand price minus price paid, USD per {_bucket_name(s.bucket)})",
        mids,
        s.savings,
        start,
        end,
        note=f"total saved ${sum(s.savings):,.2f}",
    )


def market_split_svg(report: Report) -> str:
    return charts.hbars_svg("market-split", "Spend by market (USD)", list(report.markets.items()))


def avoidable_svg(report: Report, limit: int = 8) -> str:
    """Avoidable spend by the report's grouping (the measured rows; the chart says how many were not)."""
    measured = [(r.name, r.avoidable_usd) for r in report.rows if r.avoidable is not None]
    items = sorted(measured, key=lambda kv: -kv[1])[:limit]
    missing = len(report.rows) - len(measured)
    note = f" ({missing} not measured)" if missing else ""
    return charts.hbars_svg(
        "avoidable", f"Avoidable spend by {report.by.value} (USD, largest fix of each job){note}", items
    )


def _fixes_html(report: Report) -> str:
    """The top fixes on one list: the input pipeline, GPU use and right-size, by what they save."""
    if not report.top_fixes:
        return "<h2>Top fixes</h2><p class='note'>No priced fix: nothing measured found avoidable spend.</p>"
    head = "".join(f"<th>{escape(h)}</th>" for h in FIX_HEADERS)
    body = "".join("<tr>" + "".join(_cell(c) for c in fix_cells(f)) + "</tr>" for f in report.top_fixes)
    return (
        f"<h2>Top fixes</h2><div class='scroll'><table class='report fixes'><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table></div>"
    )


def budget_svg(burn: BudgetBurn) -> str:
    spent = burn.cumulative_usd[-1] if burn.cumulative_usd else 0.0
    return charts.line_svg(
        "budget",
        f"{burn.label}: spend in {burn.month.start:%B %Y} against its monthly budget",
        burn.times,
        burn.cumulative_usd,
        burn.month.start,
        burn.month.end,
        color="#4e79a7",
        limit=(burn.monthly_usd, f"budget ${burn.monthly_usd:,.0f}"),
        note=f"spent ${spent:,.2f} of ${burn.monthly_usd:,.2f} ({100 * spent / burn.monthly_usd:.0f}%)"
        if burn.monthly_usd > 0
        else f"spent ${spent:,.2f}; the budget is $0",
    )


def utilization_histogram_svg(report: Report, bins: int = 10) -> str:
    """Measured GPU-hours by job efficiency (busy share), in ``bins`` bins from 0 to 1."""
    weights = [0.0] * bins
    for job in report.jobs:
        if job.gpu_efficiency is not None and job.measured_gpu_hours:
            weights[min(bins - 1, int(job.gpu_efficiency * bins))] += job.measured_gpu_hours
    return charts.histogram_svg(
        "utilization-histogram",
        "GPU utilization: measured GPU-hours by job efficiency",
        weights,
        "GPU-h",
        marks=((0.5, "#e15759"), (0.8, "#f28e2b")),
        empty="GPU use not measured",
        note=_left_out(report),
    )


def efficiency_vs_cost_svg(report: Report) -> str:
    points = [
        (j.cost_usd, j.gpu_efficiency, f"{j.job_id}: ${j.cost_usd:,.2f}, {j.gpu_efficiency:.0%} busy")
        for j in report.jobs
        if j.gpu_efficiency is not None
    ]
    return charts.scatter_svg(
        "efficiency-vs-cost",
        "Efficiency against cost per job (USD)",
        points,
        empty="GPU use not measured",
        note=_left_out(report),
    )


def _bucket_name(bucket: timedelta) -> str:
    minutes = int(bucket.total_seconds() // 60)
    if minutes % 1440 == 0:
        days = minutes // 1440
        return "day" if days == 1 else "week" if days == 7 else f"{days} days"
    if minutes % 60 == 0:
        return "hour" if minutes == 60 else f"{minutes // 60} hours"
    return "minute" if minutes == 1 else f"{minutes} minutes"


def _table_html(report: Report) -> str:
    headers = [*TABLE_HEADERS]
    headers[0] = report.by.value
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(c) for c in table_cells(row)) + "</tr>" for row in report.rows)
    foot = "".join(_cell(c) for c in table_cells(report.totals))
    return (
        f"<div class='scroll'><table class='report'><thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
        f"<tfoot><tr>{foot}</tr></tfoot></table></div>"
    )


def _cell(text: str) -> str:
    css = " class='unmeasured'" if text == NOT_MEASURED else ""
    return f"<td{css}>{escape(text)}</td>"


def _time(moment: datetime | None) -> str:
    """``YYYY-MM-DD HH:MM:SS`` in UTC, as ``strftime`` writes it ("running" for None); the start of
    ``isoformat`` where that is the same text (a four-digit year), which takes a third less time."""
    if not moment:
        return "running"
    utc = moment.astimezone(UTC)
    return utc.isoformat(" ")[:19] if utc.year >= 1000 else utc.strftime("%Y-%m-%d %H:%M:%S")


def _duration(hours: float) -> str:
    seconds = round(hours * 3600)
    h, rest = divmod(seconds, 3600)
    return f"{h}h{rest // 60:02d}m" if h else f"{rest // 60}m{rest % 60:02d}s"


ATTEMPT_HEADERS = (
    "Attempt", "Market", "Zone", "Instance", "Nodes x GPUs", "USD per node-h", "On-demand per node-h",
    "Started (UTC)", "Ended (UTC)", "Duration", "Cost", "How it ended",
)  # fmt: skip


class _Escaped(dict[str, str]):
    """Texts escaped for HTML, each once (a page repeats a few markets, zones and instance types in
    thousands of rows)."""

    def __missing__(self, text: str) -> str:
        self[text] = found = escape(text)
        return found


def _attempt_rows(job: JobCost, escaped: _Escaped | None = None) -> str:
    """One table row per segment; the text cells escaped (numbers, times and durations are digits and
    punctuation that HTML reads as they are; ``escaped``: the texts escaped so far, shared by a page)."""
    esc = _Escaped() if escaped is None else escaped
    rows = []
    for s, hours, _, cost, _ in job.parts:
        market = esc[s.market]
        how = s.end_reason or ("running" if s.ended_at is None else "ended")
        rows.append(
            f"<tr data-market='{market}'><td>{s.attempt}</td><td>{market}</td><td>{esc[s.zone or '-']}</td>"
            f"<td>{esc[s.instance_type or '-']}</td><td>{s.nodes} x {s.gpus_per_node} {esc[s.gpu_type]}</td>"
            f"<td>${s.node_price_usd_per_hour:,.4f}</td><td>${s.on_demand_node_price_usd_per_hour:,.4f}</td>"
            f"<td>{_time(s.started_at)}</td><td>{_time(s.ended_at)}</td><td>{_duration(hours)}</td>"
            f"<td>${cost:,.4f}</td><td>{esc[how]}</td></tr>"
        )  # fmt: skip
    return "".join(rows)


def _job_summary(job: JobCost) -> str:
    use = (
        NOT_MEASURED
        if job.gpu_efficiency is None
        else f"{job.gpu_efficiency:.0%} busy ({100 * job.measured_share:.0f}% of GPU-hours measured)"
    )
    tag = " <span class='tag simulated'>simulated</span>" if job.simulated else ""
    text = (
        f"{job.job_id} ({job.name}), {job.user}/{job.team}: {job.segments} segment(s), "
        f"{job.preemptions} preemption(s), {job.gpu_hours:,.2f} GPU-h, ${job.cost_usd:,.2f} "
        f"(on-demand ${job.on_demand_usd:,.2f}), GPU use: {use}"
    )
    return escape(text) + tag


def attempts_html(report: Report, limit: int = MAX_JOB_DETAILS) -> str:
    """Each job's attempts and segments (market, zone, nodes, prices, duration, cost, how it ended),
    the most expensive jobs first."""
    jobs = sorted(report.jobs, key=lambda j: (-j.cost_usd, j.job_id))
    head = "".join(f"<th>{escape(h)}</th>" for h in ATTEMPT_HEADERS)
    escaped = _Escaped()
    parts = [
        f"<details class='job' data-job='{escape(j.job_id)}'><summary>{_job_summary(j)}</summary>"
        f"<div class='scroll'><table class='attempts'><thead><tr>{head}</tr></thead>"
        f"<tbody>{_attempt_rows(j, escaped)}</tbody></table></div></details>"
        for j in jobs[:limit]
    ]
    more = f"<p class='note'>{len(jobs) - limit} more jobs not listed</p>" if len(jobs) > limit else ""
    return f"<section id='attempts'><h2>Jobs: attempts and segments</h2>{''.join(parts)}{more}</section>"


STYLE = """
*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;margin:16px 24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 8px} h2{font-size:16px;margin:24px 0 8px}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:16px;width:100%}
figure{margin:0;border:1px solid #ddd;border-radius:4px;padding:8px;min-width:0}
figcaption{font-weight:600;margin-bottom:4px;font-size:13px}
figure svg{display:block;width:100%;height:auto}
.legend{font-size:11px} .key{margin-right:10px;white-space:nowrap}
.key i{display:inline-block;width:10px;height:10px;margin-right:3px}
.chart-note,.note{font-size:12px;color:#555;margin:4px 0}
.banner{background:#fff4d6;border:1px solid #e0b84a;padding:8px 12px;border-radius:4px;font-size:14px}
.scroll{overflow-x:auto;width:100%}
table{border-collapse:collapse;margin-top:8px;font-size:12px;width:100%}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;white-space:nowrap}
td:first-child,th:first-child{text-align:left} th{background:#f6f6f6}
td.unmeasured{color:#8a5a00;font-style:italic}
tfoot td{font-weight:700;background:#f3f3f3} .summary{font-size:14px}
details.job{border-top:1px solid #eee;padding:4px 0;font-size:13px} details.job summary{cursor:pointer}
.tag{font-size:11px;border-radius:3px;padding:0 4px;margin-left:4px}
.tag.simulated{background:#fff4d6;border:1px solid #e0b84a}
"""


def _charts(report: Report) -> str:
    figures = [
        cost_over_time_svg(report),
        savings_over_time_svg(report),
        market_split_svg(report),
        *(budget_svg(burn) for burn in report.budgets),
        avoidable_svg(report),
        utilization_histogram_svg(report),
        efficiency_vs_cost_svg(report),
    ]
    return f"<div class='charts'>{''.join(figures)}</div>"


def _banner(report: Report) -> str:
    if not report.simulated:
        return ""
    count = sum(1 for j in report.jobs if j.simulated)
    return (
        f"<p class='banner simulated'>Simulated costs: {count} of {len(report.jobs)} jobs ran on the local "
        "backend, whose nodes are priced as the cloud instances they stand for; nothing was billed.</p>"
    )


def to_html(report: Report) -> str:
    t = report.totals
    start = report.window.start.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    end = report.window.end.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    summary = (
        f"{t.jobs} jobs, {t.gpu_hours:,.1f} GPU-hours, cost ${t.cost_usd:,.2f}, "
        f"on-demand equivalent ${t.on_demand_usd:,.2f}, saved ${t.savings_usd:,.2f}"
    )
    notes = "".join(f"<p class='note'>{escape(n)}</p>" for n in report.notes if n != SIMULATED_NOTE)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>gpuctl cost report {escape(start)} to {escape(end)}</title><style>{STYLE}</style></head>"
        f"<body><h1>GPU cost report by {escape(report.by.value)}</h1>{_banner(report)}"
        f"<p class='summary'>{escape(start)} to {escape(end)}: {escape(summary)}</p>{notes}"
        f"{_charts(report)}<h2>By {escape(report.by.value)}</h2>{_table_html(report)}{_fixes_html(report)}"
        f"{attempts_html(report)}</body></html>\n"
    )
