"""Report outputs: a rich table, CSV and JSON with the same rows and totals.

JSON and CSV field names follow OpenCost's allocation API where they overlap (``gpuHours``,
``gpuCost``, ``totalCost``, ``gpuEfficiency``, ``window``). gpuctl prices whole nodes, so
``gpuCost`` and ``totalCost`` are the same number.

GPU use that was not measured is never shown as measured: ``measuredGpuHours`` says how many of a
row's GPU-hours the monitors measured, ``idleGpuHours``, ``idleCost`` and ``gpuEfficiency`` are null
(empty in CSV, "not measured" in the table) when none was, and efficiency counts measured GPU-hours only.
``avoidableCost`` (what the diagnosis fixes could have saved, :mod:`orchestrator.costs.avoidable`) is
null / "not measured" likewise when no job of the row had step timings or GPU data; ``topFixes`` (JSON)
and :func:`top_fixes_table` list the fixes that save the most.
"""

from __future__ import annotations

import csv
import io
import json
import unicodedata
from datetime import UTC
from typing import Any

from rich.table import Table
from rich.text import Text

from orchestrator.costs.avoidable import PricedFix
from orchestrator.costs.report import SUMMED, Report, ReportRow
from orchestrator.terminal import terminal_text

COLUMNS = [
    "name",
    "jobs",
    "gpuHours",
    "gpuCost",
    "totalCost",
    "onDemandCost",
    "savings",
    "idleGpuHours",
    "idleCost",
    "gpuEfficiency",
    "measuredGpuHours",
    "measuredShare",
    "lostGpuHours",
    "lostCost",
    "projectedCost",
    "avoidableCost",
    "tuningSavings",
    "topFix",
]


def row_fields(row: ReportRow) -> dict[str, Any]:
    measured = row.measured_gpu_hours > 0
    return {
        "name": row.name,
        "jobs": row.jobs,
        "gpuHours": row.gpu_hours,
        "gpuCost": row.cost_usd,
        "totalCost": row.cost_usd,
        "onDemandCost": row.on_demand_usd,
        "savings": row.savings_usd,
        "idleGpuHours": row.idle_gpu_hours if measured else None,
        "idleCost": row.idle_cost_usd if measured else None,
        "gpuEfficiency": row.gpu_efficiency,
        "measuredGpuHours": row.measured_gpu_hours,
        "measuredShare": row.measured_share if row.gpu_hours > 0 else None,
        "lostGpuHours": row.lost_gpu_hours,
        "lostCost": row.lost_cost_usd,
        "projectedCost": row.projected_usd,
        "avoidableCost": row.avoidable,
        "tuningSavings": row.tuned_usd,
        "topFix": row.top_fix,
    }


def fix_fields(fix: PricedFix) -> dict[str, Any]:
    """One of the report's top fixes (``remainingCost``: over the job's remaining work at its current
    price, null when not known; ``windowCost``: over its spend in the report's window)."""
    return {
        "job": fix.job_id,
        "team": fix.team,
        "finding": fix.fix.code,
        "fix": fix.fix.fix,
        "share": fix.fix.share,
        "bound": fix.fix.basis,
        "remainingCost": fix.remaining_usd,
        "windowCost": fix.month_usd,
        "counted": fix.fix.counted,
    }


def to_json(report: Report) -> str:
    doc = {
        "window": {"start": report.window.start.isoformat(), "end": report.window.end.isoformat()},
        "aggregate": report.by.value,
        "generatedAt": report.generated_at.isoformat(),
        "currency": "USD",
        "rows": [row_fields(r) for r in report.rows],
        "totals": row_fields(report.totals),
        "topFixes": [fix_fields(f) for f in report.top_fixes],
        "notes": report.notes,
    }
    return json.dumps(doc, indent=2)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "|", "%")
"""What a spreadsheet reads as the start of a formula (OWASP "CSV injection"; ``|`` and ``%``: DDE
and macros in some spreadsheets)."""


def looks_like_formula(text: str) -> bool:
    """Whether a spreadsheet could run ``text`` as a formula: its first character is a formula start
    once look-alikes are folded (NFKC: a full-width ``＝`` is ``=``) and leading white space and
    invisible characters are skipped (a spreadsheet skips them too: `` =1+1`` is a formula)."""
    folded = _skip_leading(unicodedata.normalize("NFKC", text))
    return text.startswith(FORMULA_STARTS) or folded.startswith(FORMULA_STARTS) or folded[:1] in _MINUS_SIGNS


_MINUS_SIGNS = frozenset("\u2212\u2796")
"""Minus signs that NFKC keeps (U+2212 MINUS SIGN, U+2796 HEAVY MINUS SIGN)."""


def _skip_leading(text: str) -> str:
    """``text`` without its leading white space, control and format characters (tab, NUL, U+200B)."""
    start = 0
    while start < len(text) and (text[start].isspace() or unicodedata.category(text[start]) in ("Cc", "Cf")):
        start += 1
    return text[start:]


def _csv_value(value: Any) -> str:
    """A CSV cell: numbers as numbers (a negative one too); a text cell that a spreadsheet would run
    as a formula (a team named ``=HYPERLINK(...)``, `` =1``, ``＝1``) gets a leading single quote,
    shown as text."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6f}"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    return "'" + text if looks_like_formula(text) else text


def to_csv(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")  # RFC 4180; a CR or LF in a name is then quoted
    writer.writerow([report.by.value if c == "name" else c for c in COLUMNS])
    for row in [*report.rows, report.totals]:
        fields = row_fields(row)
        writer.writerow([_csv_value(fields[c]) for c in COLUMNS])
    for note in report.source_notes:  # after the totals, one cell each (read_csv(comment="#") skips them)
        writer.writerow([_csv_value(f"# note: {note}")])
    return out.getvalue()


def _usd(x: float | None) -> str:
    return "-" if x is None else f"${x:,.2f}"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.2f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


NOT_MEASURED = "not measured"
"""What the table shows where no GPU-hour of a row was measured (never 100 %)."""


def _efficiency(x: float | None) -> str:
    return NOT_MEASURED if x is None else _pct(x)


def _share(row: ReportRow) -> str:
    """The measured share of a row's GPU-hours: ``100%``, ``40%``, ``0%`` (``-`` with no GPU-hours)."""
    if row.gpu_hours <= 0:
        return "-"
    share = row.measured_share
    return "<1%" if 0 < share < 0.005 else f"{100 * share:.0f}%"


def table_cells(row: ReportRow) -> list[str]:
    f = row_fields(row)
    return [
        terminal_text(row.name),  # a job id, user or team: written by users, shown on a terminal
        str(row.jobs),
        _num(f["gpuHours"]),
        _usd(f["totalCost"]),
        _usd(f["projectedCost"]) if row.to_finish_usd > 0 else "-",  # only rows with running jobs
        _usd(f["onDemandCost"]),
        _usd(f["savings"]),
        _num(f["idleGpuHours"]),
        _usd(f["idleCost"]),
        _efficiency(f["gpuEfficiency"]),
        _share(row),
        _num(f["lostGpuHours"]),
        _usd(f["lostCost"]),
        NOT_MEASURED if f["avoidableCost"] is None else _usd(f["avoidableCost"]),
    ]


TABLE_HEADERS = [
    "",
    "Jobs",
    "GPU-h",
    "Cost",
    "Projected",
    "On-demand",
    "Saved",
    "Idle GPU-h",
    "Idle cost",
    "Efficiency",
    "Measured",
    "Lost GPU-h",
    "Lost cost",
    "Avoidable",
]


TABLE_ROWS = 50
"""Rows a terminal table shows; the rest are summed into one line (CSV, JSON and HTML list all)."""


def to_table(report: Report, limit: int | None = TABLE_ROWS) -> Table:
    start = report.window.start.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
    end = report.window.end.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
    table = Table(title=f"GPU cost by {report.by.value}, {start} to {end} UTC", show_footer=True)
    totals = table_cells(report.totals)
    headers = [*TABLE_HEADERS]
    headers[0] = report.by.value
    for i, header in enumerate(headers):
        table.add_column(
            header, footer=Text(totals[i]), justify="left" if i == 0 else "right", no_wrap=i == 0
        )
    shown = report.rows if limit is None or len(report.rows) <= limit else report.rows[:limit]
    for row in shown:
        table.add_row(*map(Text, table_cells(row)))  # Text: a user or team name is never markup
    rest = report.rows[len(shown) :]
    if rest:
        other = ReportRow(f"({len(rest)} more)")
        for row in rest:
            other.jobs += row.jobs
            for name in SUMMED:
                setattr(other, name, getattr(other, name) + getattr(row, name))
        table.add_row(*map(Text, table_cells(other)), style="dim")
    if report.notes:
        table.caption = Text(terminal_text("; ".join(report.notes)), style="table.caption")
    return table


FIX_HEADERS = ["Job", "Team", "Finding", "Remaining work", "In window", "Fix (bound)"]


def fix_cells(fix: PricedFix) -> list[str]:
    """A top fix as table cells (terminal-safe)."""
    return [
        terminal_text(fix.job_id),
        terminal_text(fix.team),
        fix.fix.code,
        _usd(fix.remaining_usd),
        _usd(fix.month_usd),
        terminal_text(f"{fix.fix.fix} ({fix.fix.basis})"),
    ]


def top_fixes_table(report: Report) -> Table | None:
    """The fixes that save the most, one list for every kind (input pipeline, GPU use, right-size);
    None when the report has none."""
    if not report.top_fixes:
        return None
    table = Table(title="Top fixes by avoidable spend (USD)")
    for i, header in enumerate(FIX_HEADERS):
        table.add_column(header, justify="right" if i in (3, 4) else "left")
    for fix in report.top_fixes:
        table.add_row(*map(Text, fix_cells(fix)))
    return table
