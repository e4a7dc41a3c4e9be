"""Statements the controller runs at every tick, compiled once and run on the driver directly.

SQLAlchemy's execution machinery costs about 60 µs a statement (its result, its execution context),
more than SQLite takes to run one, and a tick runs a dozen. A :class:`Prepared` statement is written
in SQLAlchemy Core like every other (one schema, both engines, reserved words quoted), compiled once
per dialect and set of parameter names, and then run as plain SQL on the driver's own connection
under the SQLAlchemy one: inside the caller's transaction, through the same connection pool.
psycopg prepares a statement on the server once it has run it a few times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import Executable
from sqlalchemy.sql.compiler import SQLCompiler

Params = Mapping[str, Any]


class Prepared:
    """One Core statement, run with named parameters (``bindparam`` names, or column names for an
    ``insert``), its rows read as dicts."""

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._compiled: dict[
            tuple[str, tuple[str, ...]], tuple[str, tuple[str, ...] | None, dict[str, Any]]
        ] = {}

    def _sql(
        self, dialect: Dialect, names: tuple[str, ...]
    ) -> tuple[str, tuple[str, ...] | None, dict[str, Any]]:
        key = (dialect.name, names)
        found = self._compiled.get(key)
        if found is None:
            compiled = cast(SQLCompiler, self.statement.compile(dialect=dialect, column_keys=list(names)))  # type: ignore[attr-defined]
            order = compiled.positiontup
            positional = tuple(order) if compiled.positional and order is not None else None
            found = self._compiled[key] = (str(compiled), positional, dict(compiled.params))
        return found

    def _args(self, conn: Connection, params: Params) -> tuple[Any, str, Any]:
        sql, positional, defaults = self._sql(conn.dialect, tuple(params))
        merged = {**defaults, **params} if defaults else params
        args = tuple(merged[name] for name in positional) if positional is not None else dict(merged)
        return _driver(conn), sql, args

    def rows(self, conn: Connection, params: Params | None = None) -> list[dict[str, Any]]:
        driver, sql, args = self._args(conn, params or {})
        cursor = driver.execute(sql, args)
        try:
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        finally:
            cursor.close()

    def scalar(self, conn: Connection, params: Params | None = None) -> Any:
        """The first column of the first row (None: no row)."""
        driver, sql, args = self._args(conn, params or {})
        cursor = driver.execute(sql, args)
        try:
            row = cursor.fetchone()
            return None if row is None else row[0]
        finally:
            cursor.close()

    def run(self, conn: Connection, params: Params | None = None) -> int:
        """Run it; returns how many rows it changed."""
        driver, sql, args = self._args(conn, params or {})
        cursor = driver.execute(sql, args)
        try:
            return int(cursor.rowcount)
        finally:
            cursor.close()

    def run_many(self, conn: Connection, many: Sequence[Params]) -> None:
        """Run it once per parameter set (all with the same names)."""
        if not many:
            return
        sql, positional, defaults = self._sql(conn.dialect, tuple(many[0]))
        merged = [{**defaults, **p} for p in many] if defaults else list(many)
        args = [tuple(m[n] for n in positional) for m in merged] if positional is not None else merged
        cursor = _driver(conn).cursor()
        try:
            cursor.executemany(sql, args)
        finally:
            cursor.close()

    def returned_many(self, conn: Connection, many: Sequence[Params]) -> list[tuple[Any, ...]]:
        """Run it once per parameter set (all with the same names), every one sent before any result
        is awaited (psycopg's pipeline: one round trip to the server; SQLite runs them in turn); the
        rows each returned (``RETURNING``), in order."""
        if not many:
            return []
        sql, positional, defaults = self._sql(conn.dialect, tuple(many[0]))
        merged = [{**defaults, **p} for p in many] if defaults else list(many)
        args = [tuple(m[n] for n in positional) for m in merged] if positional is not None else merged
        driver = _driver(conn)
        if not hasattr(driver, "pipeline"):  # sqlite3
            return [tuple(row) for a in args for row in driver.execute(sql, a).fetchall()]
        found: list[tuple[Any, ...]] = []
        cursor = driver.cursor()
        try:
            cursor.executemany(sql, args, returning=True)
            while True:
                found += [tuple(row) for row in cursor.fetchall()]
                if not cursor.nextset():
                    return found
        finally:
            cursor.close()


def _driver(conn: Connection) -> Any:
    """The driver's connection (sqlite3's or psycopg's) under ``conn``."""
    return conn.connection.driver_connection
