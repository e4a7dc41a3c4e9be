"""A self-contained HTML cost report: inline SVG charts drawn here, no scripts, no network.

Charts: cost over time stacked by the report's grouping, spot savings over time, a GPU utilization
histogram (0.5 and 0.8 marked), efficiency against cost per job; then the report table.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from html import escape

from orchestrator.costs.render import TABLE_HEADERS, table_cells
from orchestrator.costs.report import Report

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]
W, H = 540, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 24, 40


def _fmt(x: float) -> str:
    return f"{x:.1f}"


def _compact(x: float) -> str:
    """Axis numbers: 950, 12.5k, 3.2M."""
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def _axis(y_max: float, y_label: str, x_labels: Sequence[tuple[float, str]]) -> list[str]:
    """Axes, four horizontal grid lines with values, and x tick labels at given x positions."""
    out = [
        f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" stroke="#333"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" stroke="#333"/>',
        f'<text x="{LEFT}" y="{TOP - 10}" font-size="11" fill="#333">{escape(y_label)}</text>',
    ]
    for i in range(1, 5):
        y = H - BOTTOM - i * (H - TOP - BOTTOM) / 4
        out.append(f'<line x1="{LEFT}" y1="{_fmt(y)}" x2="{W - RIGHT}" y2="{_fmt(y)}" stroke="#ddd"/>')
        out.append(
            f'<text x="{LEFT - 4}" y="{_fmt(y + 4)}" font-size="10" text-anchor="end">'
            f"{_compact(y_max * i / 4)}</text>"
        )
    for x, label in x_labels:
        anchor = "end" if x > W - RIGHT - 30 else "middle"
        out.append(
            f'<text x="{_fmt(min(x, W - RIGHT))}" y="{H - BOTTOM + 14}" font-size="10" '
            f'text-anchor="{anchor}">'
            f"{escape(label)}</text>"
        )
    return out


def _svg(name: str, title: str, body: list[str], legend: Sequence[tuple[str, str]] = ()) -> str:
    items = "".join(
        f'<span class="key"><i style="background:{color}"></i>{escape(label)}</span>'
        for label, color in legend
    )
    return (
        f"<figure><figcaption>{escape(title)}</figcaption>"
        f'<svg data-chart="{name}" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{escape(title)}">'
        + "".join(body)
        + f"</svg><div class='legend'>{items}</div></figure>"
    )


def _time_labels(report: Report, n: int) -> list[tuple[float, str]]:
    starts = report.series.starts
    fmt = "%m-%d %H:%M" if report.series.bucket.total_seconds() < 86400 else "%Y-%m-%d"
    plot_w = W - LEFT - RIGHT
    picks = sorted({0, len(starts) // 2, len(starts) - 1}) if starts else []
    return [(LEFT + (i + 0.5) * plot_w / n, starts[i].strftime(fmt)) for i in picks]


def cost_over_time_svg(report: Report) -> str:
    groups = report.series.cost_by_group
    n = len(report.series.starts)
    totals = [sum(g[i] for g in groups.values()) for i in range(n)]
    y_max = max(totals, default=0.0) or 1.0
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    bar_w = plot_w / max(n, 1)
    body = _axis(y_max, "USD", _time_labels(report, n))
    base = [0.0] * n
    legend = []
    for gi, (name, values) in enumerate(groups.items()):
        color = PALETTE[gi % len(PALETTE)]
        legend.append((name, color))
        for i, v in enumerate(values):
            if v <= 0:
                continue
            h = v / y_max * plot_h
            y = H - BOTTOM - (base[i] + v) / y_max * plot_h
            body.append(
                f'<rect class="bar" x="{_fmt(LEFT + i * bar_w)}" y="{_fmt(y)}" '
                f'width="{_fmt(max(bar_w - 0.5, 0.5))}" '
                f'height="{_fmt(max(h, 0.5))}" fill="{color}" data-group="{escape(name)}" '
                f'data-value="{v:.4f}"><title>{escape(name)}: ${v:,.2f}</title></rect>'
            )
            base[i] += v
    return _svg("cost-over-time", f"Cost over time by {report.by.value} (USD per bucket)", body, legend)


def savings_over_time_svg(report: Report) -> str:
    values = report.series.savings
    n = len(values)
    y_max = max(values, default=0.0) or 1.0
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    points = [
        f"{_fmt(LEFT + (i + 0.5) * plot_w / max(n, 1))},{_fmt(H - BOTTOM - max(v, 0.0) / y_max * plot_h)}"
        for i, v in enumerate(values)
    ]
    body = _axis(y_max, "USD", _time_labels(report, n))
    body.append(
        f'<polyline class="line" points="{" ".join(points)}" fill="none" stroke="#59a14f" stroke-width="2"/>'
    )
    body.append(
        f'<text x="{W - RIGHT}" y="{TOP + 10}" font-size="11" text-anchor="end">'
        f"total saved ${sum(values):,.2f}</text>"
    )
    return _svg("savings-over-time", "Spot savings over time (on-demand price minus price paid)", body)


def utilization_histogram_svg(report: Report, bins: int = 10) -> str:
    """GPU-hours by job efficiency (busy share), in ``bins`` bins from 0 to 1."""
    weights = [0.0] * bins
    for job in report.jobs:
        if job.gpu_efficiency is not None:
            weights[min(bins - 1, int(job.gpu_efficiency * bins))] += job.gpu_hours
    y_max = max(weights) or 1.0
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    labels = [(LEFT + i * plot_w / bins, f"{i / bins:.1f}") for i in range(0, bins + 1, 2)]
    body = _axis(y_max, "GPU-h", labels)
    for i, w in enumerate(weights):
        if w > 0:
            h = w / y_max * plot_h
            body.append(
                f'<rect class="bar" x="{_fmt(LEFT + i * plot_w / bins + 1)}" y="{_fmt(H - BOTTOM - h)}" '
                f'width="{_fmt(plot_w / bins - 2)}" height="{_fmt(h)}" fill="#4e79a7" data-value="{w:.4f}"/>'
            )
    for mark, color in ((0.5, "#e15759"), (0.8, "#f28e2b")):
        x = LEFT + mark * plot_w
        body.append(
            f'<line class="threshold" data-at="{mark}" x1="{_fmt(x)}" y1="{TOP}" x2="{_fmt(x)}" '
            f'y2="{H - BOTTOM}" stroke="{color}" stroke-width="2" stroke-dasharray="6 3"/>'
            f'<text x="{_fmt(x + 3)}" y="{TOP + 10}" font-size="10" fill="{color}">{mark}</text>'
        )
    if not any(weights):
        body.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle">no monitor data</text>')
    return _svg("utilization-histogram", "GPU utilization: GPU-hours by job efficiency", body)


def efficiency_vs_cost_svg(report: Report) -> str:
    jobs = [j for j in report.jobs if j.gpu_efficiency is not None]
    x_max = max((j.cost_usd for j in jobs), default=0.0) or 1.0
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    labels = [(LEFT + f * plot_w, f"${_compact(x_max * f)}") for f in (0.0, 0.5, 1.0)]
    body = _axis(1.0, "efficiency", labels)
    for j in jobs:
        eff = j.gpu_efficiency or 0.0
        color = "#e15759" if eff < 0.5 else "#f28e2b" if eff < 0.8 else "#59a14f"
        body.append(
            f'<circle class="point" cx="{_fmt(LEFT + j.cost_usd / x_max * plot_w)}" '
            f'cy="{_fmt(H - BOTTOM - eff * plot_h)}" r="4" fill="{color}" fill-opacity="0.7">'
            f"<title>{escape(j.job_id)}: ${j.cost_usd:,.2f}, {eff:.0%} busy</title></circle>"
        )
    return _svg("efficiency-vs-cost", "Efficiency against cost per job (USD)", body)


def _table_html(report: Report) -> str:
    headers = [*TABLE_HEADERS]
    headers[0] = report.by.value
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in table_cells(row)) + "</tr>" for row in report.rows
    )
    foot = "".join(f"<td>{escape(c)}</td>" for c in table_cells(report.totals))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody><tfoot><tr>{foot}</tr></tfoot></table>"


STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px} .charts{display:flex;flex-wrap:wrap;gap:16px}
figure{margin:0;border:1px solid #ddd;padding:8px} figcaption{font-weight:600;margin-bottom:4px}
.legend{font-size:11px} .key{margin-right:10px}
.key i{display:inline-block;width:10px;height:10px;margin-right:3px}
table{border-collapse:collapse;margin-top:16px;font-size:12px}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right} td:first-child,th:first-child{text-align:left}
tfoot td{font-weight:700;background:#f3f3f3} .summary{font-size:14px}
"""


def to_html(report: Report) -> str:
    t = report.totals
    start = report.window.start.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    end = report.window.end.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    summary = (
        f"{t.jobs} jobs, {t.gpu_hours:,.1f} GPU-hours, cost ${t.cost_usd:,.2f}, "
        f"on-demand equivalent ${t.on_demand_usd:,.2f}, saved ${t.savings_usd:,.2f}"
    )
    notes = "".join(f"<p class='note'>{escape(n)}</p>" for n in report.notes)
    charts = "".join(
        (
            cost_over_time_svg(report),
            savings_over_time_svg(report),
            utilization_histogram_svg(report),
            efficiency_vs_cost_svg(report),
        )
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>gpuctl cost report {escape(start)} to {escape(end)}</title><style>{STYLE}</style></head>"
        f"<body><h1>GPU cost report by {escape(report.by.value)}</h1>"
        f"<p class='summary'>{escape(start)} to {escape(end)}: {escape(summary)}</p>{notes}"
        f"<div class='charts'>{charts}</div>{_table_html(report)}</body></html>\n"
    )
