"""Counting the SQL statements a block sends to the database, on SQLite and on PostgreSQL.

The store runs most statements on the driver's connection directly
(:mod:`orchestrator.state.prepared`), under SQLAlchemy's events: they are counted at the driver,
SQLite's trace callback and psycopg's cursor. The block runs with the store's connection pinned, so
every statement of it goes through the one connection counted.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from orchestrator.state.store import JobStore


@contextmanager
def counted(store: JobStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The statements (their SQL) sent on ``store``'s connection while the block runs."""
    sent: list[str] = []
    with store.pinned(), store.connections.connection() as conn:
        driver = conn.connection.driver_connection
        if isinstance(driver, sqlite3.Connection):
            driver.set_trace_callback(sent.append)
            try:
                yield sent
            finally:
                driver.set_trace_callback(None)
            return
        execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

        def one(cursor: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
            if cursor.connection is driver:
                sent.append(str(query))
            return execute(cursor, query, *args, **kwargs)

        def many(cursor: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
            if cursor.connection is driver:
                sent.append(str(query))
            return executemany(cursor, query, *args, **kwargs)

        with monkeypatch.context() as patch:
            patch.setattr(psycopg.Cursor, "execute", one)
            patch.setattr(psycopg.Cursor, "executemany", many)
            yield sent
