"""Reading the job store's rows into typed values, and what a damaged row is.

SQLite keeps whatever is written into a column (a hand edit, a bad disk, another program): a status
that is no job status, a time that does not parse, JSON that is not an object, text in a number column.
:class:`Row` reads one row's columns and raises :class:`DamagedRow` for the first that is wrong, naming
the job, the table and column, the value and what it should be; the store skips such a row where it
lists many (and notes it), and refuses it where one job is asked for.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.errors import PermanentError

E = TypeVar("E", bound=StrEnum)
TIME_EXAMPLE = "2025-01-31T12:00:00+00:00"
VALUE_SHOWN = 60
"""Characters of a damaged value shown in the message (as Python writes it: no control character)."""


class DamagedRow(PermanentError):
    """A row of the job store with a column gpuctl cannot read; ``key`` identifies the row."""

    def __init__(self, path: Path | str, job_id: str, table: str, column: str, value: Any, expected: str,
                 key: str) -> None:  # fmt: skip
        self.job_id, self.table, self.column, self.key = job_id, table, column, key
        shown = repr(value)
        shown = shown if len(shown) <= VALUE_SHOWN else shown[: VALUE_SHOWN - 3] + "..."
        row = "" if table == "jobs" else f" ({key})"
        super().__init__(
            f"job {job_id!r} is damaged in the job store {path}: its {table} row{row} has "
            f"{column} = {shown}, which is not {expected}; gpuctl skips it and goes on with the other jobs",
            f"set {table}.{column} of that row to {expected} with "
            f"{f'`sqlite3 {path}`' if isinstance(path, Path) else '`psql`'}, or restore the job store from a backup",
        )


class Row:
    """One row of ``table`` of the store at ``path`` (a SQLite file, or a masked database URL), read
    column by column."""

    def __init__(
        self, path: Path | str, table: str, row: Mapping[Any, Any], job_column: str = "job_id"
    ) -> None:
        self.path, self.table, self.row = path, table, row
        found = row[job_column]
        self.job_id = found if isinstance(found, str) else repr(found)
        names = row.keys()
        self.key = f"{table}:{self.job_id}" + "".join(
            f":{row[k]}" for k in ("id", "attempt", "node_id") if k in names
        )

    def damaged(self, column: str, expected: str) -> DamagedRow:
        return DamagedRow(self.path, self.job_id, self.table, column, self.row[column], expected,
                          f"{self.key}.{column}")  # fmt: skip

    def text(self, column: str) -> str:
        value = self.row[column]
        if not isinstance(value, str):
            raise self.damaged(column, "text")
        return value

    def opt_text(self, column: str) -> str | None:
        return None if self.row[column] is None else self.text(column)

    def integer(self, column: str) -> int:
        value = self.row[column]
        if not isinstance(value, int) or value < 0:
            raise self.damaged(column, "a whole number, 0 or more")
        return value

    def number(self, column: str) -> float:
        value = self.row[column]
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise self.damaged(column, "a number, 0 or more")
        return float(value)

    def time(self, column: str) -> datetime:
        value = self.row[column]
        try:
            moment = datetime.fromisoformat(value) if isinstance(value, str) else None
        except ValueError:
            moment = None
        if moment is None or moment.tzinfo is None:
            raise self.damaged(column, f"an ISO 8601 time with its zone, such as {TIME_EXAMPLE}")
        return moment

    def opt_time(self, column: str) -> datetime | None:
        return None if self.row[column] is None else self.time(column)

    def enum(self, column: str, kind: type[E]) -> E:
        value = self.row[column]
        try:
            return kind(value)
        except ValueError:
            raise self.damaged(column, "one of " + ", ".join(m.value for m in kind)) from None

    def opt_enum(self, column: str, kind: type[E]) -> E | None:
        return None if not self.row[column] else self.enum(column, kind)

    def json_object(self, column: str) -> dict[str, Any]:
        value = self.row[column]
        try:
            found = json.loads(value) if isinstance(value, str) else None
        except (ValueError, RecursionError):  # not JSON, or nested too deep to read
            found = None
        if not isinstance(found, dict):
            raise self.damaged(column, "a JSON object, such as {}")
        return found
