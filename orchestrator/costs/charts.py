"""Inline SVG charts: pure functions from plain data (numbers, times, labels) to an SVG string.

No scripts and no network: each chart is one ``<svg>`` with a ``viewBox`` (it scales to the width of
its container), axes with "nice" ticks (steps of 1, 2 or 5 x 10^k, formatted to the step's precision),
and a ``data-chart`` name plus ``data-*`` values on the marks, so tests and other pages can read them.
Every text drawn is escaped here. Used by the HTML cost report (:mod:`orchestrator.costs.html`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import escape

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]


@dataclass(frozen=True)
class Box:
    """A chart's size (viewBox units) and the margins around its plot area."""

    width: int = 560
    height: int = 260
    left: int = 64
    right: int = 16
    top: int = 28
    bottom: int = 40

    @property
    def plot_w(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom

    @property
    def base(self) -> float:
        """The y of the x axis."""
        return self.height - self.bottom


BOX = Box()


def _f(x: float) -> str:
    return f"{x:.1f}"


def nice_step(raw: float) -> float:
    """The smallest step of 1, 2 or 5 x 10^k that is at least ``raw`` (> 0)."""
    magnitude = 10.0 ** math.floor(math.log10(raw))
    for mult in (1.0, 2.0, 5.0, 10.0):
        if mult * magnitude >= raw * (1 - 1e-9):
            return mult * magnitude
    return 10.0 * magnitude


def nice_ticks(max_value: float, count: int = 5) -> list[float]:
    """Ticks from 0 to at least ``max_value`` in about ``count`` nice steps (0 to 1 when nothing)."""
    top = max_value if max_value > 0 and math.isfinite(max_value) else 1.0
    step = nice_step(top / count)
    n = max(1, math.ceil(top / step - 1e-9))
    return [round(i * step, 12) for i in range(n + 1)]


def _decimals(step: float) -> int:
    return max(0, -math.floor(math.log10(step) + 1e-9))


def format_tick(value: float, step: float, prefix: str = "") -> str:
    """A tick label at the precision of ``step``: 0.002 -> ``0.002``, 2500 -> ``2.5k``, 3e6 -> ``3M``."""
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if step >= div / 10 and abs(value) >= div:
            return f"{prefix}{value / div:.{_decimals(step / div)}f}{suffix}"
    return f"{prefix}{value:.{_decimals(step)}f}"


TIME_STEPS = tuple(
    timedelta(minutes=m) for m in (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080, 43200)
)


def floor_to(moment: datetime, step: timedelta) -> datetime:
    """``moment`` rounded down to a multiple of ``step`` since the Unix epoch (UTC)."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    size = step.total_seconds()
    return epoch + timedelta(seconds=(moment - epoch).total_seconds() // size * size)


def time_ticks(start: datetime, end: datetime, max_ticks: int = 6) -> list[tuple[datetime, str]]:
    """Round times inside ``[start, end]`` (UTC) and their labels: ``HH:MM`` for steps under a day,
    with the date (``MM-DD HH:MM``) on the first tick and where the day changes; ``MM-DD`` for days."""
    span = max((end - start).total_seconds(), 1.0)
    step = next((s for s in TIME_STEPS if span / s.total_seconds() <= max_ticks), TIME_STEPS[-1])
    tick = floor_to(start, step)
    if tick < start:
        tick += step
    out: list[tuple[datetime, str]] = []
    previous_day = None
    while tick <= end:
        t = tick.astimezone(UTC)
        if step >= timedelta(days=1):
            label = t.strftime("%Y-%m-%d" if span > 180 * 86400 else "%m-%d")
        else:
            label = t.strftime("%H:%M") if t.date() == previous_day else t.strftime("%m-%d %H:%M")
        previous_day = t.date()
        out.append((tick, label))
        tick += step
    return out


def y_axis(ticks: Sequence[float], label: str, box: Box = BOX, prefix: str = "") -> list[str]:
    """The y axis: a grid line and a label per tick (``ticks`` from 0 to the axis' top)."""
    top = ticks[-1] or 1.0
    step = ticks[1] - ticks[0] if len(ticks) > 1 else top
    out = [
        f'<line x1="{box.left}" y1="{box.top}" x2="{box.left}" y2="{_f(box.base)}" stroke="#333"/>',
        f'<text x="{box.left}" y="{box.top - 12}" font-size="11" fill="#333">{escape(label)}</text>',
    ]
    for value in ticks:
        y = box.base - value / top * box.plot_h
        if value > 0:
            out.append(
                f'<line x1="{box.left}" y1="{_f(y)}" x2="{box.width - box.right}" y2="{_f(y)}" stroke="#e3e3e3"/>'
            )
        out.append(
            f'<text class="tick y" x="{box.left - 4}" y="{_f(y + 4)}" font-size="10" text-anchor="end">'
            f"{escape(format_tick(value, step, prefix))}</text>"
        )
    return out


def x_axis(labels: Sequence[tuple[float, str]], box: Box = BOX) -> list[str]:
    """The x axis with labels at given x positions (kept inside the chart)."""
    out = [
        f'<line x1="{box.left}" y1="{_f(box.base)}" x2="{box.width - box.right}" y2="{_f(box.base)}" stroke="#333"/>'
    ]
    for x, label in labels:
        anchor = "end" if x > box.width - box.right - 30 else "start" if x < box.left + 20 else "middle"
        out.append(
            f'<line x1="{_f(x)}" y1="{_f(box.base)}" x2="{_f(x)}" y2="{_f(box.base + 4)}" stroke="#333"/>'
            f'<text class="tick x" x="{_f(x)}" y="{_f(box.base + 16)}" font-size="10" text-anchor="{anchor}">'
            f"{escape(label)}</text>"
        )
    return out


def figure(
    name: str,
    title: str,
    body: Sequence[str],
    legend: Sequence[tuple[str, str]] = (),
    note: str = "",
    box: Box = BOX,
) -> str:
    """A ``<figure>`` with a caption, the SVG (full width of its container), a legend and a note."""
    items = "".join(
        f'<span class="key"><i style="background:{color}"></i>{escape(label)}</span>'
        for label, color in legend
    )
    note_html = f'<p class="chart-note">{escape(note)}</p>' if note else ""
    return (
        f"<figure><figcaption>{escape(title)}</figcaption>"
        f'<svg data-chart="{escape(name)}" viewBox="0 0 {box.width} {box.height}" '
        f'preserveAspectRatio="xMidYMid meet" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="{escape(title)}">'
        + "".join(body)
        + f"</svg><div class='legend'>{items}</div>{note_html}</figure>"
    )


def _empty(box: Box, text: str) -> str:
    return f'<text class="empty" x="{box.width / 2}" y="{box.height / 2}" text-anchor="middle" fill="#666">{escape(text)}</text>'


class TimeScale:
    """x positions of times between ``start`` and ``end``."""

    def __init__(self, start: datetime, end: datetime, box: Box = BOX) -> None:
        self.start, self.end, self.box = start, max(end, start + timedelta(seconds=1)), box

    def x(self, moment: datetime) -> float:
        span = (self.end - self.start).total_seconds()
        return self.box.left + (moment - self.start).total_seconds() / span * self.box.plot_w

    def labels(self) -> list[tuple[float, str]]:
        return [(self.x(t), label) for t, label in time_ticks(self.start, self.end)]


def stacked_bars_svg(
    name: str,
    title: str,
    starts: Sequence[datetime],
    bucket: timedelta,
    series: dict[str, list[float]],
    y_label: str = "USD",
    prefix: str = "$",
    box: Box = BOX,
) -> str:
    """Bars per time bucket (``starts[i]`` to ``starts[i] + bucket``), one stacked part per series."""
    n = len(starts)
    totals = [sum(values[i] for values in series.values()) for i in range(n)]
    ticks = nice_ticks(max(totals, default=0.0))
    top = ticks[-1]
    scale = TimeScale(starts[0], starts[-1] + bucket, box) if starts else None
    body = y_axis(ticks, y_label, box, prefix) + x_axis(scale.labels() if scale else [], box)
    base = [0.0] * n
    legend = []
    for gi, (group, values) in enumerate(series.items()):
        color = PALETTE[gi % len(PALETTE)]
        legend.append((group, color))
        for i, v in enumerate(values):
            if v <= 0 or scale is None:
                continue
            x0, x1 = scale.x(starts[i]), scale.x(starts[i] + bucket)
            y = box.base - (base[i] + v) / top * box.plot_h
            body.append(
                f'<rect class="bar" x="{_f(x0 + 0.5)}" y="{_f(y)}" width="{_f(max(x1 - x0 - 1, 1.0))}" '
                f'height="{_f(max(v / top * box.plot_h, 0.5))}" fill="{color}" data-group="{escape(group)}" '
                f'data-start="{starts[i].isoformat()}" data-value="{v:.6f}">'
                f"<title>{escape(group)}, {starts[i].astimezone(UTC):%Y-%m-%d %H:%M} UTC: {prefix}{v:,.4f}</title></rect>"
            )
            base[i] += v
    if not any(totals):
        body.append(_empty(box, "nothing in this window"))
    return figure(name, title, body, legend, box=box)


def line_svg(
    name: str,
    title: str,
    times: Sequence[datetime],
    values: Sequence[float],
    start: datetime,
    end: datetime,
    y_label: str = "USD",
    prefix: str = "$",
    color: str = "#59a14f",
    limit: tuple[float, str] | None = None,
    note: str = "",
    box: Box = BOX,
) -> str:
    """A line through (time, value) points between ``start`` and ``end``, each point also drawn as a
    dot (one point is a dot); ``limit``: a dashed horizontal line at (value, label), e.g. a budget."""
    top_value = max([*values, limit[0] if limit else 0.0], default=0.0)
    ticks = nice_ticks(top_value)
    top = ticks[-1]
    scale = TimeScale(start, end, box)
    body = y_axis(ticks, y_label, box, prefix) + x_axis(scale.labels(), box)
    points = [
        (scale.x(t), box.base - max(v, 0.0) / top * box.plot_h) for t, v in zip(times, values, strict=True)
    ]
    if limit is not None:
        y = box.base - limit[0] / top * box.plot_h
        body.append(
            f'<line class="limit" data-value="{limit[0]:.6f}" x1="{box.left}" y1="{_f(y)}" x2="{box.width - box.right}" '
            f'y2="{_f(y)}" stroke="#e15759" stroke-width="2" stroke-dasharray="6 3"/>'
            f'<text x="{box.width - box.right}" y="{_f(y - 4)}" font-size="10" text-anchor="end" fill="#e15759">'
            f"{escape(limit[1])}</text>"
        )
    if len(points) > 1:
        path = " ".join(f"{_f(x)},{_f(y)}" for x, y in points)
        body.append(f'<polyline class="line" points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
    for (x, y), t, v in zip(points, times, values, strict=True):
        body.append(
            f'<circle class="point" cx="{_f(x)}" cy="{_f(y)}" r="{4 if len(points) == 1 else 2.5}" fill="{color}" '
            f'data-value="{v:.6f}"><title>{t.astimezone(UTC):%Y-%m-%d %H:%M} UTC: {prefix}{v:,.4f}</title></circle>'
        )
    if not points:
        body.append(_empty(box, "nothing in this window"))
    return figure(name, title, body, note=note, box=box)


def hbars_svg(
    name: str,
    title: str,
    items: Sequence[tuple[str, float]],
    prefix: str = "$",
    box: Box = Box(height=140, left=90),
) -> str:
    """Horizontal bars, one per (label, value), each labelled with its value and share of the sum."""
    total = sum(v for _, v in items)
    ticks = nice_ticks(max((v for _, v in items), default=0.0), 4)
    top = ticks[-1]
    step = ticks[1] - ticks[0]
    body = [f'<line x1="{box.left}" y1="{box.top}" x2="{box.left}" y2="{_f(box.base)}" stroke="#333"/>']
    body += x_axis([(box.left + t / top * box.plot_w, format_tick(t, step, prefix)) for t in ticks], box)
    row_h = box.plot_h / max(len(items), 1)
    for i, (label, value) in enumerate(items):
        y = box.top + i * row_h + row_h * 0.15
        w = max(value / top * box.plot_w, 0.5)
        share = f" ({100 * value / total:.0f}%)" if total > 0 else ""
        body.append(
            f'<rect class="bar" x="{box.left}" y="{_f(y)}" width="{_f(w)}" height="{_f(row_h * 0.7)}" '
            f'fill="{PALETTE[i % len(PALETTE)]}" data-group="{escape(label)}" data-value="{value:.6f}"/>'
            f'<text x="{box.left - 4}" y="{_f(y + row_h * 0.45)}" font-size="11" text-anchor="end">{escape(label)}</text>'
            + _bar_label(box.left + w, y + row_h * 0.45, f"{prefix}{value:,.2f}{share}", box)
        )
    if not items:
        body.append(_empty(box, "nothing in this window"))
    return figure(name, title, body, box=box)


def _bar_label(x: float, y: float, text: str, box: Box) -> str:
    """A bar's value: after its end, or inside it (white, right-aligned) when there is no room."""
    if x + 7 * len(text) < box.width - box.right:
        return f'<text x="{_f(x + 4)}" y="{_f(y)}" font-size="11">{escape(text)}</text>'
    return f'<text x="{_f(x - 4)}" y="{_f(y)}" font-size="11" text-anchor="end" fill="#fff">{escape(text)}</text>'


def histogram_svg(
    name: str,
    title: str,
    weights: Sequence[float],
    y_label: str,
    marks: Sequence[tuple[float, str]] = (),
    empty: str = "no data",
    note: str = "",
    box: Box = BOX,
) -> str:
    """Bins of equal width over 0..1 with their ``weights``; ``marks``: dashed lines at (x, color)."""
    bins = len(weights)
    ticks = nice_ticks(max(weights, default=0.0))
    top = ticks[-1]
    labels = [(box.left + i / 10 * box.plot_w, f"{i / 10:.1f}") for i in range(0, 11, 2)]
    body = y_axis(ticks, y_label, box) + x_axis(labels, box)
    for i, w in enumerate(weights):
        if w > 0:
            h = w / top * box.plot_h
            body.append(
                f'<rect class="bar" x="{_f(box.left + i * box.plot_w / bins + 1)}" y="{_f(box.base - h)}" '
                f'width="{_f(box.plot_w / bins - 2)}" height="{_f(h)}" fill="#4e79a7" data-value="{w:.6f}"/>'
            )
    for at, color in marks:
        x = box.left + at * box.plot_w
        body.append(
            f'<line class="threshold" data-at="{at}" x1="{_f(x)}" y1="{box.top}" x2="{_f(x)}" y2="{_f(box.base)}" '
            f'stroke="{color}" stroke-width="2" stroke-dasharray="6 3"/>'
            f'<text x="{_f(x + 3)}" y="{box.top + 10}" font-size="10" fill="{color}">{at}</text>'
        )
    if not any(weights):
        body.append(_empty(box, empty))
    return figure(name, title, body, note=note, box=box)


def scatter_svg(
    name: str,
    title: str,
    points: Sequence[tuple[float, float, str]],
    x_prefix: str = "$",
    y_label: str = "efficiency",
    empty: str = "no data",
    note: str = "",
    box: Box = BOX,
) -> str:
    """Points (x, y in 0..1, label); colored red under 0.5, orange under 0.8, else green."""
    x_ticks = nice_ticks(max((p[0] for p in points), default=0.0))
    x_top, x_step = x_ticks[-1], x_ticks[1] - x_ticks[0]
    y_ticks = [i / 5 for i in range(6)]
    body = y_axis(y_ticks, y_label, box)
    body += x_axis(
        [(box.left + t / x_top * box.plot_w, format_tick(t, x_step, x_prefix)) for t in x_ticks], box
    )
    for x, y, label in points:
        color = "#e15759" if y < 0.5 else "#f28e2b" if y < 0.8 else "#59a14f"
        body.append(
            f'<circle class="point" cx="{_f(box.left + x / x_top * box.plot_w)}" cy="{_f(box.base - y * box.plot_h)}" '
            f'r="4" fill="{color}" fill-opacity="0.75" data-x="{x:.6f}" data-y="{y:.4f}">'
            f"<title>{escape(label)}</title></circle>"
        )
    if not points:
        body.append(_empty(box, empty))
    return figure(name, title, body, note=note, box=box)
