"""`gpuctl db`: the database behind the job store and the ledger.

``upgrade`` runs the schema migrations on the configured database; ``status`` shows which database is
in use (its URL with the password masked), its engine, revision, row counts and ledger totals; ``move``
copies a SQLite home's store into another database (PostgreSQL), checking counts and totals.
"""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from rich.table import Table
from sqlalchemy.engine import make_url

from orchestrator.cli.output import JSON, add_output_option, print_json, terminal_console, usd
from orchestrator.errors import UserError
from orchestrator.home import home_dir
from orchestrator.state.database import HEAD_REVISION, schema_revision, store_error, upgrade_schema, where
from orchestrator.state.database_url import CONFIG_FILE, DEFAULT_FILE, URL_ENV, database_url, masked_url
from orchestrator.state.db_move import LedgerTotals, ledger_totals, move_store, snapshot, sqlite_reader
from orchestrator.terminal import terminal_text

POSTGRES_DRIVER = "postgresql+psycopg"


def register(sub: Any) -> None:
    db = sub.add_parser("db", help="the database of jobs and the ledger: upgrade, status, move to PostgreSQL")
    db_sub = db.add_subparsers(dest="db_command", metavar="SUBCOMMAND", required=True)

    upgrade = db_sub.add_parser(
        "upgrade", help="bring the configured database's schema to this gpuctl's revision"
    )
    upgrade.set_defaults(run=run_upgrade)

    status = db_sub.add_parser(
        "status", help="which database is in use, its revision, row counts and ledger totals"
    )
    add_output_option(status)
    status.set_defaults(run=run_status)

    move = db_sub.add_parser(
        "move",
        help="copy a SQLite home's jobs and ledger into an empty database (PostgreSQL), checking counts and totals",
        description="Copy every row of a SQLite job store into an empty database, in one transaction, "
        "then check row counts, jobs per state and the ledger's total cost on both sides; on any "
        "difference nothing is written. Stop every controller using the SQLite store first: jobs "
        "submitted to it afterwards are not moved. The SQLite file is left as it was.",
    )
    move.add_argument("--to", required=True, metavar="URL",
                      help="the target database, e.g. postgresql+psycopg://USER:PASSWORD@HOST:5432/gpuctl")  # fmt: skip
    move.add_argument("--from", dest="source", metavar="PATH",
                      help=f"the SQLite store to copy (default: {DEFAULT_FILE} in the gpuctl home)")  # fmt: skip
    add_output_option(move)
    move.set_defaults(run=run_move)


def run_upgrade(args: argparse.Namespace) -> int:
    url = database_url(home_dir())
    rev = upgrade_schema(url)
    print(terminal_text(f"{masked_url(url)} is at revision {rev}"))
    return 0


def run_status(args: argparse.Namespace) -> int:
    url = database_url(home_dir())
    parsed = make_url(url)
    doc: dict[str, Any] = {"url": masked_url(url), "engine": parsed.get_backend_name(), "head": HEAD_REVISION}
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file():
        doc.update(exists=False, revision=None, rows={}, jobs_by_status={}, segment_cost_usd=0.0)
    else:
        found = schema_revision(url)
        with _read(url) as conn:
            totals = ledger_totals(conn, datetime.now(UTC))
        doc.update(exists=True, revision=found, **_totals_doc(totals))
    if args.output == JSON:
        print_json(doc)
        return 0
    print(terminal_text(f"database: {doc['url']}"))
    print(terminal_text(f"engine:   {doc['engine']}"))
    if not doc["exists"]:
        print("no job store yet: the first gpuctl command that writes creates it")
        return 0
    print(terminal_text(f"revision: {_revision_line(doc['revision'])}"))
    _print_totals([("rows", _totals_of(doc))])
    return 0


def _revision_line(found: str | None) -> str:
    if found == HEAD_REVISION:
        return f"{found} (current)"
    return f"{found or 'none'}, this gpuctl's is {HEAD_REVISION}: run `gpuctl db upgrade`"


def run_move(args: argparse.Namespace) -> int:
    home = home_dir()
    source = Path(args.source) if args.source else home / DEFAULT_FILE
    target = _target_url(args.to)
    shown = masked_url(target)
    result = move_store(source, target, datetime.now(UTC), upgrade_schema, shown)
    if args.output == JSON:
        print_json(
            {
                "source": str(source),
                "target": shown,
                "revision": result.revision,
                "before": _totals_doc(result.source),
                "after": _totals_doc(result.target),
            }
        )
        return 0
    print(
        terminal_text(f"copied {source} into {shown} (revision {result.revision}); counts and totals match:")
    )
    _print_totals([("before (SQLite)", result.source), ("after", result.target)])
    print(
        terminal_text(
            f"Next: point every gpuctl at it: export {URL_ENV}='{shown}' (with the password), or set "
            f"database.url in {home / CONFIG_FILE}; the controllers, login nodes and the operator all "
            f"need it. {source} is left as it was: keep it as a backup."
        )
    )
    return 0


def _target_url(given: str) -> str:
    """``given`` as gpuctl uses it: SQLite or PostgreSQL (``postgresql://`` means psycopg 3)."""
    try:
        parsed = make_url(given.strip())
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise UserError(
            f"--to is not a database URL ({masked_url(given)})",
            "give a PostgreSQL URL: postgresql+psycopg://USER:PASSWORD@HOST:5432/DATABASE",
        ) from exc
    backend = parsed.get_backend_name()
    if backend not in ("postgresql", "sqlite") or not parsed.database:
        raise UserError(
            f"--to must name a database on a PostgreSQL server (or a SQLite file), not {masked_url(given)}",
            "give a PostgreSQL URL: postgresql+psycopg://USER:PASSWORD@HOST:5432/DATABASE",
        )
    if backend == "postgresql":
        parsed = parsed.set(drivername=POSTGRES_DRIVER)
    return parsed.render_as_string(hide_password=False)


@contextmanager
def _read(url: str) -> Iterator[sa.Connection]:
    """A read snapshot of the database at ``url``; a failure to reach it said as a gpuctl error."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = sqlite_reader(Path(parsed.database or ""))
    else:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with snapshot(engine) as conn:
            yield conn
    except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
        raise store_error(exc, where(url)) from exc
    finally:
        engine.dispose()


def _totals_doc(totals: LedgerTotals) -> dict[str, Any]:
    return {
        "rows": dict(totals.rows),
        "jobs_by_status": dict(sorted(totals.jobs_by_status.items())),
        "segment_cost_usd": totals.segment_cost_usd,
    }


def _totals_of(doc: dict[str, Any]) -> LedgerTotals:
    return LedgerTotals(doc["rows"], doc["segment_cost_usd"], doc["jobs_by_status"])


def _print_totals(columns: list[tuple[str, LedgerTotals]]) -> None:
    """One row per table, per job state and the ledger's total cost; one column per database."""
    table = Table(show_edge=False)
    table.add_column("")
    for title, _ in columns:
        table.add_column(title, justify="right")
    names = sorted({name for _, totals in columns for name in totals.rows})
    for name in names:
        table.add_row(f"{name} rows", *(str(t.rows.get(name, 0)) for _, t in columns))
    states = sorted({s for _, totals in columns for s in totals.jobs_by_status})
    for state in states:
        table.add_row(
            terminal_text(f"jobs {state}"), *(str(t.jobs_by_status.get(state, 0)) for _, t in columns)
        )
    table.add_row("segment cost (USD)", *(usd(t.segment_cost_usd) for _, t in columns))
    terminal_console().print(table)
