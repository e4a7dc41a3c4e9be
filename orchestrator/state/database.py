"""The job store's database: SQLAlchemy engines on SQLite or PostgreSQL, the schema's Alembic revision,
and what the engines' errors mean to a user.

* :func:`engine_for` gives one engine per (URL, read-only), kept for the process: a pool of
  connections, never one opened per query. Connections run in autocommit mode; a write is one
  explicit transaction (:meth:`Connections.transaction`): ``BEGIN IMMEDIATE`` on SQLite (the write lock is
  taken at the start, so two writers never deadlock), ``BEGIN`` on PostgreSQL.
* SQLite files are opened by :mod:`orchestrator.state.sqlite_file` (WAL, foreign keys, the read-only
  and immutable fallbacks, symlink refusal, gpuctl's application id).
* The schema is Alembic's (:mod:`orchestrator.state.migrations`). :func:`upgrade_schema` brings a
  database to :data:`HEAD_REVISION` under a lock (a file lock beside a SQLite file, an advisory lock on
  PostgreSQL), so processes that start together upgrade it once. A SQLite store of the schema
  versions from before Alembic (``PRAGMA user_version`` 0 to 3) is stamped at the matching revision and
  upgraded. A database of a newer revision is refused, never used.
* Every database error becomes a :class:`~orchestrator.errors.GpuctlError` that says what happened and
  what to do (:func:`store_error`); a PostgreSQL password never appears in one.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool, QueuePool

from orchestrator.errors import GpuctlError, InternalError, PermanentError, TemporaryError
from orchestrator.home import ensure_home, open_regular_file
from orchestrator.state import sqlite_file
from orchestrator.state.database_url import is_sqlite, masked_url, sqlite_path
from orchestrator.state.prepared import Prepared
from orchestrator.state.sqlite_file import APPLICATION_ID, LOCK_TIMEOUT_S, check_not_newer, connect, damaged

__all__ = [
    "APPLICATION_ID", "HEAD_REVISION", "LOCK_TIMEOUT_S", "REVISIONS", "SCHEMA_VERSION", "Connection",
    "Connections", "connect", "damaged", "engine_for", "prepare", "schema_revision", "store_error",
    "upgrade_schema",
]  # fmt: skip

REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007")
"""The Alembic revisions this gpuctl knows, oldest first (:mod:`orchestrator.state.migrations`)."""
HEAD_REVISION = REVISIONS[-1]
SCHEMA_VERSION = len(REVISIONS)
"""``PRAGMA user_version`` of a SQLite store at :data:`HEAD_REVISION`: a gpuctl from before Alembic
(which knew versions up to 3) refuses it as newer instead of misreading it."""
LEGACY_REVISIONS = {1: "0001", 2: "0002", 3: "0003"}
"""The revision a SQLite store of each pre-Alembic schema version is stamped at (0: none; every
revision runs, creating only what is missing)."""
ADVISORY_LOCK_KEY = 0x67707563
"""The PostgreSQL advisory lock that serialises schema upgrades (gpuctl's application id)."""
POOL_SIZE = 8
MIGRATIONS = Path(__file__).with_name("migrations")

Where = Path | str
T = TypeVar("T")
"""Where a store lives, as messages name it: a SQLite file, or a PostgreSQL URL with its password masked."""

KEPT_ENGINES = 8
"""Engines kept at once: a process uses one or two databases; one that opens many (a test session)
closes the idle connections of the least recently used beyond this many."""

for _name in ("sqlalchemy.engine", "sqlalchemy.pool", "alembic"):
    # SQLAlchemy logs every statement with its parameters (job specs, notification targets) when the
    # root logger is at INFO: never; gpuctl says what happened in its own words
    logging.getLogger(_name).setLevel(logging.WARNING)

_engines: OrderedDict[tuple[str, bool], Engine] = OrderedDict()
_engines_lock = threading.Lock()


def where(url: str) -> Where:
    return sqlite_path(url) if is_sqlite(url) else masked_url(url)


def engine_for(url: str, read_only: bool = False) -> Engine:
    """The process's engine for ``url`` (created once per (url, read_only))."""
    key = (url, read_only)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _engines[key] = _make_engine(url, read_only)
            while len(_engines) > KEPT_ENGINES:
                _, oldest = _engines.popitem(last=False)
                oldest.dispose()  # a store still holding it opens fresh connections when it needs them
        else:
            _engines.move_to_end(key)
        return engine


def _make_engine(url: str, read_only: bool) -> Engine:
    if is_sqlite(url):
        path = sqlite_path(url)
        return create_engine(
            "sqlite+pysqlite://", creator=lambda: _sqlite_connection(path, read_only),
            isolation_level="AUTOCOMMIT", poolclass=QueuePool, pool_size=POOL_SIZE, max_overflow=4 * POOL_SIZE,
            pool_timeout=LOCK_TIMEOUT_S, pool_reset_on_return=None, hide_parameters=True,
        )  # fmt: skip
    options = "-c default_transaction_read_only=on" if read_only else ""
    return create_engine(
        url, isolation_level="AUTOCOMMIT", pool_size=POOL_SIZE, max_overflow=4 * POOL_SIZE,
        pool_timeout=LOCK_TIMEOUT_S, pool_recycle=3600, pool_reset_on_return=None, hide_parameters=True,
        connect_args={"connect_timeout": 10, "options": options, "application_name": "gpuctl"},
    )  # fmt: skip


def _sqlite_connection(path: Path, read_only: bool) -> sqlite3.Connection:
    conn = connect(path, read_only)
    conn.row_factory = None  # SQLAlchemy makes its own rows
    return conn


def dispose_engines() -> None:
    """Close every pooled connection (tests; a process about to fork)."""
    with _engines_lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


# --- errors ---------------------------------------------------------------------------------------
def store_error(exc: BaseException, location: Where) -> GpuctlError:
    """The gpuctl error for a database error met on the store at ``location``."""
    if isinstance(exc, GpuctlError):
        return exc
    orig = _cause(exc)
    if isinstance(orig, sqlite3.Error):
        return sqlite_file.sqlite_error(orig, Path(location))
    if isinstance(location, str):
        return _postgres_error(orig, location)
    return InternalError(f"job store {location}: unexpected database error ({type(orig).__name__}: {orig})")


def _postgres_error(exc: BaseException, location: str) -> GpuctlError:
    """What a psycopg error (``exc``) on the server of ``location`` (a masked URL) means."""
    state = str(getattr(exc, "sqlstate", None) or "")
    detail = _detail(exc, location)
    refused = ("authentication failed", "no pg_hba.conf entry", "permission denied", "does not exist")
    if state.startswith(("28", "42501", "3D000")) or any(r in detail for r in refused):
        return PermanentError(
            f"the PostgreSQL server of the job store {location} refused gpuctl ({detail})",
            "check the user, password, database name and its grants in the database URL "
            "(GPUCTL_DATABASE_URL or database.url in $GPUCTL_HOME/config.yaml)",
        )
    if state == "25006":
        return PermanentError(
            f"cannot write the job store {location}: the server or this connection is read-only ({detail})",
            "point gpuctl at a server it may write (the primary, not a replica)",
        )
    if not state or state.startswith(("08", "53", "57P", "40")):
        return TemporaryError(
            f"cannot use the PostgreSQL server of the job store {location} ({detail}): is the server "
            "running and reachable?",
            "start it or check the host and port in the database URL, then run the command again",
            retry_after_s=10.0,
        )
    return InternalError(f"job store {location}: unexpected database error ({detail})")


def _detail(exc: BaseException, location: str) -> str:
    """The error's first line, as the server or libpq said it (they never include the password)."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    return f"{type(exc).__name__}: {lines[0][:300]}"


def _cause(exc: BaseException) -> BaseException:
    """The driver's own error under SQLAlchemy's wrapper (what the gpuctl error is raised from)."""
    return exc.orig if isinstance(exc, DBAPIError) and isinstance(exc.orig, BaseException) else exc


def _is_db_error(exc: BaseException) -> bool:
    """An error of the database or its driver (not of gpuctl's own statements)."""
    return isinstance(exc, DBAPIError | sqlite3.Error) or type(exc).__module__.startswith("psycopg")


# --- connections and transactions ------------------------------------------------------------------
class Connections:
    """The connections of one store to its database (``url``, shown as ``location``): each read or
    write transaction takes one from the engine's pool and gives it back, except while the thread has
    :meth:`pinned` one (a controller tick), when all of that thread's use goes through it."""

    def __init__(self, engine: Engine, url: str, location: Where) -> None:
        self.engine, self.url, self.location = engine, url, location
        self.sqlite = is_sqlite(url)
        self._local = threading.local()

    @contextlib.contextmanager
    def connection(self) -> Iterator[Connection]:
        pinned: Connection | None = getattr(self._local, "conn", None)
        if pinned is not None:
            yield pinned
            return
        try:
            conn = self.engine.connect()
        except BaseException as exc:
            if _is_db_error(exc):
                raise store_error(exc, self.location) from _cause(exc)
            raise
        try:
            yield conn
        finally:
            conn.close()

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """Until the block ends, this thread's reads and transactions share one connection (a tick
        makes a dozen: taking one from the pool for each costs about as much as a query)."""
        if getattr(self._local, "conn", None) is not None:
            yield
            return
        with self.connection() as conn:
            self._local.conn = conn
            try:
                yield
            finally:
                self._local.conn = None

    def read(self, statement: Any, params: Any = None) -> list[Mapping[str, Any]]:
        """The rows of one statement (a :class:`~orchestrator.state.prepared.Prepared` one, or any
        Core statement), outside any transaction."""
        with self.connection() as conn:
            try:
                if isinstance(statement, Prepared):
                    return list(statement.rows(conn, params))
                return [dict(row) for row in conn.execute(statement, params).mappings()]
            except BaseException as exc:
                if _is_db_error(exc):
                    _drop(conn)
                    raise store_error(exc, self.location) from _cause(exc)
                raise

    def statement(self, run: Callable[[Connection], T]) -> T:
        """``run`` a write that is one statement, outside any explicit transaction (the connection is
        in autocommit: the statement is its own transaction, committed whole or not at all); a
        database error drops the connection and is raised as the gpuctl error that says what happened."""
        with self.connection() as conn:
            try:
                return run(conn)
            except BaseException as exc:
                if _is_db_error(exc):
                    _drop(conn)
                    raise store_error(exc, self.location) from _cause(exc)
                raise

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One write transaction: ``BEGIN IMMEDIATE`` (SQLite: the write lock from the start, so two
        writers never deadlock) or ``BEGIN`` (PostgreSQL) ... ``COMMIT``, sent to the driver directly.
        Any error rolls it all back; a database error (in it or its COMMIT) also drops the connection
        and is raised as the gpuctl error that says what happened."""
        with self.connection() as conn:
            driver = self._driver(conn)
            try:
                driver.execute("BEGIN IMMEDIATE" if self.sqlite else "BEGIN")
            except BaseException as exc:
                _drop(conn)
                if _is_db_error(exc):
                    raise store_error(exc, self.location) from _cause(exc)
                raise
            try:
                yield conn
                driver.execute("COMMIT")
            except BaseException as exc:
                with contextlib.suppress(Exception):
                    driver.execute("ROLLBACK")
                if _is_db_error(exc):
                    _drop(conn)
                    raise store_error(exc, self.location) from _cause(exc)
                raise

    def _driver(self, conn: Connection) -> Any:
        """The driver's own connection under ``conn`` (its ``execute`` runs one statement)."""
        try:
            return conn.connection.driver_connection
        except BaseException as exc:
            if _is_db_error(exc):
                _drop(conn)
                raise store_error(exc, self.location) from _cause(exc)
            raise


def _drop(conn: Connection) -> None:
    """After an error, the pool opens a fresh connection in its place (and ``conn`` uses it)."""
    with contextlib.suppress(Exception):
        conn.invalidate()
    with contextlib.suppress(Exception):
        conn.rollback()


# --- the schema -------------------------------------------------------------------------------------
def prepare(home: Path, url: str, read_only: bool) -> None:
    """Check the store at ``url`` before use: create or upgrade it to :data:`HEAD_REVISION` if needed
    (a SQLite home is created 0700, its file 0600); refuse a newer, foreign or damaged one. A reader
    of a current store writes nothing."""
    location = where(url)
    if read_only and (not is_sqlite(url) or sqlite_path(url).exists()):
        found = schema_revision(url)
        if found == HEAD_REVISION:
            return
        try:  # an older store: upgrade it once if we may write, else say what is needed
            upgrade_schema(url)
        except GpuctlError as err:
            raise PermanentError(
                f"the job store {location} has schema revision {found or 'none'}, written by an older "
                f"gpuctl; it needs a one-time upgrade, which needs write access: {err.what}",
                "run `gpuctl list` once as a user who can write the gpuctl home",
            ) from err
        return
    _ensure(home)  # the jobs' folders live under the home on every engine
    upgrade_schema(url)


def _ensure(home: Path) -> None:
    try:
        ensure_home(home)
    except OSError as exc:
        raise PermanentError(
            f"cannot create the gpuctl home {home}: {exc.strerror}",
            "set GPUCTL_HOME to a folder you can write",
        ) from exc


def schema_revision(url: str) -> str | None:
    """The store's Alembic revision (a pre-Alembic SQLite store: the revision it matches; None: no
    schema yet). Raises for a foreign, damaged or newer database."""
    location = where(url)
    if is_sqlite(url):
        if not sqlite_path(url).exists():
            return None
        conn = connect(sqlite_path(url), read_only=True)
        try:
            return _sqlite_revision(conn, sqlite_path(url))
        except sqlite3.Error as exc:
            raise store_error(exc, location) from _cause(exc)
        finally:
            conn.close()
    try:
        with engine_for(url, read_only=True).connect() as pg:
            return _postgres_revision(pg, masked_url(url))
    except BaseException as exc:
        if _is_db_error(exc):
            raise store_error(exc, location) from _cause(exc)
        raise


def _sqlite_revision(conn: sqlite3.Connection, path: Path) -> str | None:
    version = sqlite_file.schema_version(conn, path)  # refuses a file that is not gpuctl's
    check_not_newer(version, SCHEMA_VERSION, path)
    has_alembic = conn.execute(
        "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'alembic_version'"
    ).fetchone()
    if has_alembic:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        return _known(row[0] if row else None, path)
    return LEGACY_REVISIONS.get(version)


def _postgres_revision(conn: Connection, location: str) -> str | None:
    if conn.execute(text("SELECT to_regclass('alembic_version')")).scalar() is None:
        return None
    return _known(conn.execute(text("SELECT version_num FROM alembic_version")).scalar(), location)


def _known(revision: str | None, location: Where) -> str | None:
    if revision is not None and revision not in REVISIONS:
        raise PermanentError(
            f"the job store {location} has schema revision {revision}, newer than this gpuctl knows "
            f"({HEAD_REVISION}): a newer gpuctl wrote it, and this one would misread it",
            "upgrade gpuctl (`pip install -U gpuctl`), or point gpuctl at another database",
        )
    return revision


def upgrade_schema(url: str) -> str:
    """Bring the database at ``url`` to :data:`HEAD_REVISION` (creating it if empty); returns the
    revision. Safe when several processes start at once: one upgrades, the others find it done."""
    location = where(url)
    if not is_sqlite(url):
        return _upgrade(url, location)
    path = sqlite_path(url)
    _ensure(path.parent)
    try:  # processes that open a new store together would race to switch it to WAL
        lock = open_regular_file(
            path.with_name(path.name + ".init-lock"), os.O_WRONLY | os.O_CREAT | os.O_APPEND
        )
    except OSError:  # a read-only home: nothing to serialise with; the writes below say what is wrong
        return _upgrade(url, location)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _upgrade(url, location)
    finally:
        os.close(lock)  # closing releases the lock


def _upgrade(url: str, location: Where) -> str:
    if (not is_sqlite(url) or sqlite_path(url).exists()) and schema_revision(url) == HEAD_REVISION:
        return HEAD_REVISION  # current: nothing to write, no lock to take
    engine = _migration_engine(url)
    try:
        with engine.begin() as conn:
            if is_sqlite(url):
                raw = cast(sqlite3.Connection, conn.connection.dbapi_connection)
                found = _sqlite_revision(raw, Path(location))  # again: another process may have upgraded it
            else:
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
                found = _postgres_revision(conn, str(location))
            if found != HEAD_REVISION:
                _run_alembic(conn, found, stamp=not _has_alembic_table(conn))
                if is_sqlite(url):
                    conn.exec_driver_sql(f"PRAGMA application_id = {APPLICATION_ID}")
                    conn.exec_driver_sql(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return HEAD_REVISION
    except BaseException as exc:
        if _is_db_error(exc):
            raise store_error(exc, location) from _cause(exc)
        raise
    finally:
        engine.dispose()


def _has_alembic_table(conn: Connection) -> bool:
    return inspect(conn).has_table("alembic_version")


def _migration_engine(url: str) -> Engine:
    """A one-connection engine whose transactions are real on both engines (SQLite: ``BEGIN
    IMMEDIATE`` from the ``begin`` event, as SQLAlchemy's pysqlite recipe does)."""
    if not is_sqlite(url):
        return create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 10})
    path = sqlite_path(url)
    engine = create_engine("sqlite+pysqlite://", creator=lambda: connect(path, False), poolclass=NullPool)

    @event.listens_for(engine, "begin")
    def _begin_immediate(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _run_alembic(conn: Connection, found: str | None, stamp: bool) -> None:
    """Alembic's upgrade to head on ``conn`` (in its transaction); a pre-Alembic store is first
    stamped at ``found``, the revision its tables match."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = conn
    if stamp and found is not None:
        command.stamp(config, found)
    command.upgrade(config, "head")
