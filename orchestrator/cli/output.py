"""How gpuctl prints data: ``-o table|json`` (``wide`` where a table drops columns), money in tables,
and tables that fit the terminal without cutting what a user copies (ids, states)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.errors import GpuctlError
from orchestrator.terminal import terminal_text

TABLE, WIDE, JSON = "table", "wide", "json"


def add_output_option(
    parser: argparse.ArgumentParser, *, wide: bool = False, more: Sequence[str] = ()
) -> None:
    """``-o/--output``: ``table`` (the default) and ``json`` everywhere; ``wide`` shows every column."""
    choices = [TABLE, *([WIDE] if wide else []), JSON, *more]
    extra = "; wide: every column, however narrow the terminal" if wide else ""
    parser.add_argument("-o", "--output", choices=choices, default=TABLE,
                        help=f"output format (default table){extra}")  # fmt: skip


def usd(amount: float | None) -> str:
    """Money in tables and text: US dollars with 4 decimals and no currency sign ('-' when unknown);
    the column or the line says "USD"."""
    return "-" if amount is None else f"{amount:.4f}"


def print_notes(problems: Iterable[GpuctlError]) -> None:
    """One note on standard error per problem met on the way (a damaged row skipped): what, and the fix."""
    for problem in problems:
        print(terminal_text(f"gpuctl: note: {problem.message}", multiline=True), file=sys.stderr)


def print_json(data: Any) -> None:
    """Strict JSON (RFC 8259): no NaN or Infinity. What gpuctl prints is checked when it is read (the
    progress and monitor records a job writes included), so a non-finite number here is a bug."""
    print(json.dumps(data, indent=2, allow_nan=False))


def terminal_console() -> Console:
    """A console as wide as the terminal; as wide as needed when the output goes to a pipe or a file
    (unless ``$COLUMNS`` says otherwise), so that no column is dropped from what a script reads."""
    console = Console()
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(width=100_000)


@dataclass(frozen=True)
class Column:
    """A table column over rows of type dict. ``drop``: the order in which optional columns go when
    the terminal is narrow (1 goes last); ``None``: kept always and never cut (ids, states)."""

    header: str
    cell: Callable[[dict[str, Any]], str]
    drop: int | None = None
    wide_only: bool = False
    right: bool = False


def fitted_table(columns: Sequence[Column], rows: Sequence[dict[str, Any]], width: int,
                 wide: bool = False, title: str | None = None) -> Table:  # fmt: skip
    """The table of ``rows`` within ``width`` columns: optional columns are dropped (highest ``drop``
    first) until it fits; kept columns are never truncated. ``wide``: every column, whatever the width."""
    shown = [c for c in columns if wide or not c.wide_only]
    # each cell is a Text (never read as markup) of terminal-safe text (no escape sequences)
    cells = {c.header: [terminal_text(c.cell(r)) for r in rows] for c in shown}
    measuring = Console(width=100_000)  # a table's measure is capped at the console's width
    while True:
        table = Table(title=Text(title, style="table.title") if title else None)
        for c in shown:
            longest = max([len(c.header), *(len(v) for v in cells[c.header])])
            kept = c.drop is None
            table.add_column(c.header, justify="right" if c.right else "left", no_wrap=kept,
                             overflow="fold", min_width=longest if kept else None)  # fmt: skip
        for i in range(len(rows)):
            table.add_row(*(Text(cells[c.header][i]) for c in shown))
        optional = [c for c in shown if c.drop is not None]
        if wide or not optional or measuring.measure(table).maximum <= width:
            return table
        shown.remove(max(optional, key=lambda c: c.drop or 0))
