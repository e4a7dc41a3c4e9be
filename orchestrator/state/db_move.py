"""What a database holds (row counts and ledger totals), and moving a SQLite job store into another
database (PostgreSQL) with those checked before and after.

:func:`move_store` reads the SQLite file read-only, in one snapshot, and writes the target in one
transaction: the target's schema is brought to the head revision first and must be empty; the tables
are copied parents first (foreign-key order), the target's id sequences are moved past the copied ids,
and the counts and totals of both sides must match exactly, or nothing is written.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, make_url

from orchestrator.errors import NotFoundError, PermanentError, UserError
from orchestrator.state import sqlite_file
from orchestrator.state.tables import metadata
from orchestrator.times import parse_iso

BATCH_ROWS = 5000
"""Rows read and inserted per statement while copying."""
SQLITE_INTERNAL = {"sqlite_sequence", "sqlite_stat1", "sqlite_stat4", "alembic_version"}


@dataclass(frozen=True)
class LedgerTotals:
    """What a database holds: rows per table, what every segment cost (open segments priced up to
    ``priced_at``), and jobs per status."""

    rows: dict[str, int]
    segment_cost_usd: float
    jobs_by_status: dict[str, int] = field(default_factory=dict)

    def differences(self, other: LedgerTotals) -> list[str]:
        """One line per count or total that differs between ``self`` (before) and ``other`` (after)."""
        lines = [
            f"table {name}: {self.rows.get(name, 0)} rows before, {other.rows.get(name, 0)} after"
            for name in sorted(set(self.rows) | set(other.rows))
            if self.rows.get(name, 0) != other.rows.get(name, 0)
        ]
        if not math.isclose(self.segment_cost_usd, other.segment_cost_usd, rel_tol=1e-12, abs_tol=1e-9):
            lines.append(
                f"segment cost: {self.segment_cost_usd!r} USD before, {other.segment_cost_usd!r} after"
            )
        for status in sorted(set(self.jobs_by_status) | set(other.jobs_by_status)):
            before, after = self.jobs_by_status.get(status, 0), other.jobs_by_status.get(status, 0)
            if before != after:
                lines.append(f"jobs {status}: {before} before, {after} after")
        return lines


@dataclass(frozen=True)
class MoveResult:
    source: LedgerTotals
    target: LedgerTotals
    revision: str


def ledger_totals(conn: Connection, priced_at: datetime) -> LedgerTotals:
    """Counts and totals of the gpuctl tables present in the database behind ``conn``."""
    present = set(sa.inspect(conn).get_table_names())
    rows = {
        table.name: int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
        for table in metadata.sorted_tables
        if table.name in present
    }
    cost = 0.0
    jobs_by_status: dict[str, int] = {}
    if "segments" in present:
        cost = _segment_cost(conn, priced_at)
    if "jobs" in present:
        jobs = metadata.tables["jobs"]
        query = sa.select(jobs.c.status, sa.func.count()).group_by(jobs.c.status)
        jobs_by_status = {str(status): int(n) for status, n in conn.execute(query)}
    return LedgerTotals(rows=rows, segment_cost_usd=cost, jobs_by_status=jobs_by_status)


def _segment_cost(conn: Connection, priced_at: datetime) -> float:
    seg = metadata.tables["segments"]
    query = sa.select(seg.c.started_at, seg.c.ended_at, seg.c.nodes, seg.c.node_price_usd_per_hour).order_by(
        seg.c.id
    )
    costs = []
    for started, ended, nodes, price in conn.execute(query):
        end = parse_iso(ended) if ended else priced_at
        hours = max(0.0, (end - parse_iso(started)).total_seconds() / 3600.0)
        costs.append(hours * float(nodes) * float(price))
    return math.fsum(costs)


# -- reading a SQLite store without writing it ----------------------------------------------------


def sqlite_reader(path: Path) -> Engine:
    """An engine that reads the SQLite file ``path`` and never writes it (``mode=ro``)."""
    if not path.is_file():
        raise NotFoundError(
            f"there is no SQLite job store at {path}",
            "name the file with --from PATH, or set GPUCTL_HOME to the home that holds gpuctl.db",
        )

    def read_only() -> sqlite3.Connection:
        conn = sqlite_file.connect(path, read_only=True)  # refuses links; the read-only fallbacks
        conn.row_factory = None  # SQLAlchemy makes its own rows
        return conn

    return sa.create_engine("sqlite://", creator=read_only, poolclass=sa.pool.NullPool)


@contextmanager
def snapshot(engine: Engine) -> Iterator[Connection]:
    """One connection reading a single consistent state of the database (a read transaction held
    open: writers may go on, and what they commit meanwhile is not seen)."""
    if engine.dialect.name != "sqlite":
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn
        return
    with engine.connect() as conn:
        conn.exec_driver_sql("BEGIN")
        try:
            yield conn
        finally:
            conn.exec_driver_sql("ROLLBACK")


# -- the move --------------------------------------------------------------------------------------


def move_store(
    source_path: Path,
    target_url: str,
    now: datetime,
    upgrade: Callable[[str], str],
    shown_target: str,
) -> MoveResult:
    """Copy the SQLite job store at ``source_path`` into the database at ``target_url`` (see the
    module's doc). ``upgrade(url) -> revision`` brings the target's schema to the head revision;
    ``shown_target`` is the target's URL as messages may show it (password masked)."""
    _refuse_same_file(source_path, target_url)
    reader = sqlite_reader(source_path)
    try:
        with snapshot(reader) as source:
            columns = _columns_to_copy(source, source_path)
            before = ledger_totals(source, now)
            revision_now = upgrade(target_url)
            target = sa.create_engine(target_url, poolclass=sa.pool.NullPool)
            try:
                after = _copy_into(source, target, columns, before, now, shown_target)
            finally:
                target.dispose()
    finally:
        reader.dispose()
    return MoveResult(source=before, target=after, revision=revision_now)


def _refuse_same_file(source_path: Path, target_url: str) -> None:
    parsed = make_url(target_url)
    same = bool(parsed.database) and Path(parsed.database or "").resolve() == source_path.resolve()
    if parsed.drivername.startswith("sqlite") and same:
        raise UserError(
            f"the target database is the source file itself ({source_path})",
            "give --to the URL of another database, such as a PostgreSQL server's",
        )


def _columns_to_copy(source: Connection, source_path: Path) -> dict[str, list[str]]:
    """For each gpuctl table in the source, the columns to copy; refuses what this gpuctl cannot read
    whole (a table or column it does not know: a newer gpuctl wrote the store)."""
    inspector = sa.inspect(source)
    present = set(inspector.get_table_names())
    if "jobs" not in present:
        raise PermanentError(
            f"{source_path} is not a gpuctl job store (it has no jobs table)",
            "name the gpuctl.db of a gpuctl home with --from PATH",
        )
    known = {table.name for table in metadata.sorted_tables}
    unknown_tables = sorted(present - known - SQLITE_INTERNAL)
    columns: dict[str, list[str]] = {}
    unknown: list[str] = [f"table {name}" for name in unknown_tables]
    for table in metadata.sorted_tables:
        if table.name not in present:
            continue
        found = [str(c["name"]) for c in inspector.get_columns(table.name)]
        unknown += [f"{table.name}.{name}" for name in found if name not in table.c]
        columns[table.name] = [c.name for c in table.columns if c.name in found]
    if unknown:
        raise PermanentError(
            f"{source_path} holds what this gpuctl does not know ({', '.join(unknown)}): a newer gpuctl "
            "wrote it, and moving it would lose those",
            "upgrade gpuctl (`pip install -U gpuctl`) and run the move again",
        )
    return columns


def _copy_into(
    source: Connection,
    target: Engine,
    columns: dict[str, list[str]],
    before: LedgerTotals,
    now: datetime,
    shown_target: str,
) -> LedgerTotals:
    """Copy every table in one transaction on ``target``; roll it back unless the totals match."""
    try:
        with target.begin() as conn:
            _refuse_non_empty(conn, shown_target)
            for table in metadata.sorted_tables:  # parents before children
                if table.name in columns:
                    _copy_table(source, conn, table, columns[table.name])
            if conn.dialect.name == "postgresql":
                _reset_sequences(conn)
            after = ledger_totals(conn, now)
            mismatches = before.differences(after)
            if mismatches:
                raise PermanentError(
                    "the copy does not add up, so nothing was written to "
                    f"{shown_target}: " + "; ".join(mismatches),
                    "report this as a gpuctl bug, with `gpuctl db status` of the source; the source "
                    "store is unchanged and still in use",
                )
            return after
    except sa.exc.DBAPIError as exc:
        raise PermanentError(
            f"copying into {shown_target} failed, and nothing was written there: {exc.orig}",
            "fix what the database says above (permissions, space, a broken row in the source), "
            "then run the move again",
        ) from exc


def _refuse_non_empty(conn: Connection, shown_target: str) -> None:
    present = set(sa.inspect(conn).get_table_names())
    holding = []
    for table in metadata.sorted_tables:
        if table.name in present:
            count = int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
            if count:
                holding.append(f"{table.name}: {count}")
    if holding:
        raise UserError(
            f"the target database {shown_target} is not empty ({', '.join(holding)} rows); a move only "
            "fills an empty database, so that no row is doubled or overwritten",
            "give --to a new, empty database (`createdb gpuctl_new`), or empty this one yourself",
        )


def _copy_table(source: Connection, conn: Connection, table: sa.Table, names: list[str]) -> None:
    chosen = [table.c[name] for name in names]
    query = sa.select(*chosen).order_by(*table.primary_key.columns)
    result = source.execute(query)
    for batch in result.partitions(BATCH_ROWS):
        rows: list[dict[str, Any]] = [dict(zip(names, row, strict=True)) for row in batch]
        conn.execute(table.insert(), rows)


def _reset_sequences(conn: Connection) -> None:
    """Move each id sequence past the copied ids, so the next row inserted gets a new id."""
    for table in metadata.sorted_tables:
        keys = list(table.primary_key.columns)
        if len(keys) != 1 or not isinstance(keys[0].type, sa.Integer) or keys[0].autoincrement is False:
            continue
        key = keys[0]
        sequence = conn.execute(
            sa.select(sa.func.pg_get_serial_sequence(table.name, key.name))
        ).scalar_one_or_none()
        if sequence is None:
            continue
        top = conn.execute(sa.select(sa.func.max(key))).scalar_one_or_none()
        conn.execute(sa.select(sa.func.setval(sequence, top if top is not None else 1, top is not None)))
