"""Opening the job store's SQLite file, its schema version, and what SQLite's errors mean to a user.

* Writers open the file read-write in WAL mode; readers (``gpuctl list``, ``status``, ``events``,
  ``cost report``) open it with ``mode=ro`` and never take the write lock, so they also work on a
  read-only home. A WAL database closed cleanly on a read-only file system cannot be opened
  ``mode=ro`` (SQLite wants to create its ``-shm`` file); with no ``-wal`` file beside it no writer is
  active and the main file holds every commit, so it is then read as ``immutable``.
* The schema carries a version (``PRAGMA user_version``) and gpuctl's application id. A database from
  a newer gpuctl is refused, never used; an older one is upgraded in one transaction by a writer.
* Every :class:`sqlite3.Error` becomes a :class:`~orchestrator.errors.GpuctlError` that says what
  happened to which file and what to do (:func:`store_error`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.request import pathname2url

from orchestrator.errors import GpuctlError, InternalError, PermanentError, TemporaryError
from orchestrator.home import create_private_file, ensure_home, not_regular, open_regular_file

APPLICATION_ID = 0x67707563
"""``PRAGMA application_id`` of a gpuctl job store (the bytes "gpuc")."""
LOCK_TIMEOUT_S = 30.0
LOW_SPACE_BYTES = 1 << 20

SCHEMA_VERSION = 3
"""The version of :data:`SCHEMA` (``PRAGMA user_version``); 0 is a store from before versions.
2: the ``notifications`` outbox (:mod:`orchestrator.notify.outbox`). 3: the market log
(``zone_watch``, ``job_market_logs``: :mod:`orchestrator.state.zone_watch`)."""

OUTBOX_SCHEMA = """
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, backend TEXT NOT NULL,
    target_json TEXT NOT NULL, notification_json TEXT NOT NULL, created_at TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0, next_at TEXT NOT NULL, last_error TEXT
);
CREATE INDEX IF NOT EXISTS notifications_due ON notifications(backend, next_at);
"""
"""Notifications waiting to be delivered (:mod:`orchestrator.notify.outbox`): in the job store, and in
the Kubernetes operator's own file."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, user TEXT NOT NULL, team TEXT NOT NULL,
    backend TEXT NOT NULL, status TEXT NOT NULL, failure_reason TEXT, message TEXT NOT NULL DEFAULT '',
    spec_json TEXT NOT NULL, options_json TEXT NOT NULL DEFAULT '{}',
    submitted_at TEXT NOT NULL, deadline TEXT, updated_at TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0, preemptions INTEGER NOT NULL DEFAULT 0,
    restarts INTEGER NOT NULL DEFAULT 0, cancel_requested INTEGER NOT NULL DEFAULT 0,
    summary_json TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS attempts (
    job_id TEXT NOT NULL REFERENCES jobs(id), attempt INTEGER NOT NULL,
    placement_json TEXT NOT NULL, started_at TEXT NOT NULL, ended_at TEXT, end_reason TEXT,
    PRIMARY KEY (job_id, attempt)
);
CREATE TABLE IF NOT EXISTS nodes (
    node_id TEXT PRIMARY KEY, job_id TEXT NOT NULL REFERENCES jobs(id), attempt INTEGER NOT NULL,
    launch_state TEXT NOT NULL, created_at TEXT NOT NULL, notice_at TEXT, ended_at TEXT, phase TEXT
);
CREATE TABLE IF NOT EXISTS segments (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL REFERENCES jobs(id),
    attempt INTEGER NOT NULL, gpu_type TEXT NOT NULL, instance_type TEXT NOT NULL, market TEXT NOT NULL,
    cloud TEXT NOT NULL, region TEXT NOT NULL, zone TEXT NOT NULL, nodes INTEGER NOT NULL,
    gpus_per_node INTEGER NOT NULL, started_at TEXT NOT NULL, ended_at TEXT,
    node_price_usd_per_hour REAL NOT NULL, on_demand_node_price_usd_per_hour REAL NOT NULL,
    price_source TEXT NOT NULL, end_reason TEXT
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL REFERENCES jobs(id),
    time TEXT NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL, status TEXT
);
CREATE TABLE IF NOT EXISTS market_history (
    job_id TEXT PRIMARY KEY REFERENCES jobs(id), observed_at TEXT NOT NULL, history_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS zone_watch (
    id INTEGER PRIMARY KEY AUTOINCREMENT, zone TEXT NOT NULL, begin REAL NOT NULL, end REAL NOT NULL,
    capacity INTEGER
);
CREATE INDEX IF NOT EXISTS zone_watch_zone ON zone_watch(zone, end);
CREATE TABLE IF NOT EXISTS job_market_logs (
    job_id TEXT PRIMARY KEY REFERENCES jobs(id), log_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS gpu_usage_windows (
    job_id TEXT NOT NULL, source TEXT NOT NULL, line_offset INTEGER NOT NULL,
    start REAL NOT NULL, end REAL NOT NULL, duration_s REAL NOT NULL, gpus INTEGER NOT NULL,
    model TEXT NOT NULL, samples INTEGER NOT NULL, util_mean_pct REAL NOT NULL,
    util_p95_pct REAL NOT NULL, util_max_pct REAL NOT NULL, mem_used_max_bytes INTEGER NOT NULL,
    mem_total_bytes INTEGER NOT NULL, sm_activity_mean REAL, idle_seconds REAL NOT NULL,
    record_json TEXT NOT NULL, PRIMARY KEY (job_id, source, line_offset)
);
CREATE TABLE IF NOT EXISTS gpu_usage_files (
    job_id TEXT NOT NULL, source TEXT NOT NULL, offset INTEGER NOT NULL, PRIMARY KEY (job_id, source)
);
CREATE INDEX IF NOT EXISTS segments_job ON segments(job_id);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
CREATE INDEX IF NOT EXISTS nodes_job ON nodes(job_id, attempt);
"""
"""Every statement is idempotent: :func:`database.upgrade` runs them all on a store of an older version."""
SCHEMA += OUTBOX_SCHEMA


def prepare(home: Path, path: Path, read_only: bool) -> None:
    """Check the store at ``path`` before use: create it (home 0700, file 0600) or upgrade it to
    :data:`SCHEMA_VERSION` if needed; refuse a newer, foreign or damaged one. A reader whose store is
    current writes nothing."""
    if read_only and path.exists():
        version = _version(path, read_only=True)
        if version == SCHEMA_VERSION:
            return
        try:  # an older store: upgrade it once if we may write, else say what is needed
            _create_or_upgrade(home, path)
        except GpuctlError as err:
            raise PermanentError(
                f"the job store {path} has schema version {version}, written by an older gpuctl; it needs "
                f"a one-time upgrade, which needs write access: {err.what}",
                "run `gpuctl list` once as a user who can write the gpuctl home",
            ) from err
        return
    _create_or_upgrade(home, path)


def _create_or_upgrade(home: Path, path: Path) -> None:
    """:func:`_create_or_upgrade_once` under an exclusive file lock beside the store: processes that
    open a new store together would otherwise race to switch it to WAL, and SQLite refuses the loser
    at once ("busy"), whatever the busy timeout."""
    try:
        ensure_home(home)
        lock = open_regular_file(
            path.with_name(path.name + ".init-lock"), os.O_WRONLY | os.O_CREAT | os.O_APPEND
        )
    except OSError:  # a read-only home: nothing to serialise with; the writes below say what is wrong
        _create_or_upgrade_once(home, path)
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _create_or_upgrade_once(home, path)
    finally:
        os.close(lock)  # closing releases the lock


def _create_or_upgrade_once(home: Path, path: Path) -> None:
    try:
        ensure_home(home)
    except OSError as exc:
        raise PermanentError(
            f"cannot create the gpuctl home {home}: {exc.strerror}",
            "set GPUCTL_HOME to a folder you can write",
        ) from exc
    if _version(path, read_only=False) < SCHEMA_VERSION:
        conn = connect(path, read_only=False)
        try:
            upgrade(conn, path, [s for s in SCHEMA.split(";") if s.strip()], SCHEMA_VERSION)
        finally:
            conn.close()


def _version(path: Path, read_only: bool) -> int:
    conn = connect(path, read_only)
    try:
        version = schema_version(conn, path)
    except sqlite3.Error as exc:
        raise store_error(exc, path) from exc
    finally:
        conn.close()
    check_not_newer(version, SCHEMA_VERSION, path)
    return version


def store_error(exc: sqlite3.Error, path: Path) -> GpuctlError:
    """The gpuctl error for a SQLite error met on the job store at ``path``."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    detail = f"({getattr(exc, 'sqlite_errorname', 'SQLite error')}: {exc})"
    if primary == sqlite3.SQLITE_FULL or (primary == sqlite3.SQLITE_IOERR and _disk_full(path)):
        return TemporaryError(
            f"the disk holding the job store {path} is full {detail}: nothing was changed, and what was "
            "committed before is intact",
            f"free space on that disk (`df -h {path.parent}`), then run the command again",
            retry_after_s=30.0,
        )
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return TemporaryError(
            f"the job store {path} stayed locked by another gpuctl process for {LOCK_TIMEOUT_S:.0f} s {detail}",
            f"run the command again; if it persists, look for a stuck gpuctl process (`fuser {path}`)",
        )
    if primary in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM):
        return PermanentError(
            f"cannot write the job store {path}: it or its folder is read-only or not yours {detail}",
            "make the gpuctl home writable, or set GPUCTL_HOME to a folder you can write; "
            "`gpuctl list`, `status`, `events` and `cost report` only read it",
        )
    if primary in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return damaged(path, detail)
    if primary == sqlite3.SQLITE_IOERR:
        return PermanentError(
            f"the disk failed reading or writing the job store {path} {detail}",
            "check the disk and file system (`dmesg`, `df -h`), then run the command again",
        )
    return InternalError(f"job store {path}: unexpected database error {detail}")


def _disk_full(path: Path) -> bool:
    """SQLite reports a full disk as an I/O error when it cannot grow its ``-shm`` file, and Python
    does not show the errno: a disk with less than :data:`LOW_SPACE_BYTES` free counts as full."""
    try:
        return shutil.disk_usage(path.parent).free < LOW_SPACE_BYTES
    except OSError:
        return False


def damaged(path: Path, detail: str) -> PermanentError:
    return PermanentError(
        f"{path} is not a gpuctl job store, or it is damaged {detail}",
        f"restore it from a backup, or move it away (`mv {path} {path}.bad`) and gpuctl starts a new "
        f"one; `sqlite3 {path}.bad .recover` may save its rows",
    )


def _read_only_uri(path: Path, immutable: bool) -> str:
    return f"file:{pathname2url(str(path.absolute()))}?mode=ro" + ("&immutable=1" if immutable else "")


def connect(path: Path, read_only: bool) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), rows as :class:`sqlite3.Row`."""
    check_regular_files(path)
    try:
        if read_only:
            conn = _connect_read_only(path)
        else:
            create_private_file(path)  # SQLite gives the -wal and -shm files the database's mode
            conn = sqlite3.connect(path, timeout=LOCK_TIMEOUT_S, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys=ON")
        return conn
    except sqlite3.Error as exc:
        raise store_error(exc, path) from exc
    except OSError as exc:  # creating the file
        raise PermanentError(
            f"cannot create the job store {path}: {exc.strerror}",
            "make the gpuctl home writable, or set GPUCTL_HOME to a folder you can write",
        ) from exc


def check_regular_files(path: Path) -> None:
    """Refuse a store whose file, ``-wal`` or ``-shm`` is a symlink or anything but a regular file:
    SQLite would follow a link planted there and write where it points."""
    for found in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            mode = found.lstat().st_mode
        except OSError:  # missing (SQLite creates it), or not ours to see: SQLite says what is wrong
            continue
        if not stat.S_ISREG(mode):
            kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
            raise not_regular(found, kind)


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """``mode=ro``; where SQLite cannot make the ``-shm`` file it needs for that (a read-only or full
    file system) and the ``-wal`` file is missing or empty (no commit waits in it: the main file
    holds them all), the file is read as ``immutable``."""
    uri = _read_only_uri(path, immutable=False)
    conn = sqlite3.connect(uri, uri=True, timeout=LOCK_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute("SELECT 1 FROM sqlite_schema LIMIT 1").fetchall()
        return conn
    except sqlite3.Error as exc:
        conn.close()
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        no_shm = code in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR)
        wal = path.with_name(path.name + "-wal")
        if not no_shm or (wal.exists() and wal.stat().st_size > 0):
            raise
    return sqlite3.connect(_read_only_uri(path, immutable=True), uri=True, isolation_level=None)


def schema_version(conn: sqlite3.Connection, path: Path) -> int:
    """The schema version of the store; refuses a database that is not gpuctl's."""
    app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if app_id == APPLICATION_ID:
        return version
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    if app_id != 0 or (tables and "jobs" not in tables):
        raise damaged(path, f"(application id {app_id:#x}, tables: {', '.join(sorted(tables)) or 'none'})")
    return version  # a store from before gpuctl set its id (version 0), or a new empty file


def check_not_newer(version: int, known: int, path: Path) -> None:
    if version > known:
        raise PermanentError(
            f"the job store {path} has schema version {version}, newer than this gpuctl knows ({known}): "
            "a newer gpuctl wrote it, and this one would misread it",
            "upgrade gpuctl (`pip install -U gpuctl`), or set GPUCTL_HOME to another folder",
        )


def upgrade(conn: sqlite3.Connection, path: Path, statements: Sequence[str], version: int) -> None:
    """Bring the schema to ``version`` in one transaction: every statement is idempotent (``IF NOT
    EXISTS``), so a store of any older version, or an empty file, ends the same."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise store_error(exc, path) from exc
    try:
        found = schema_version(conn, path)  # another process may have upgraded it meanwhile
        check_not_newer(found, version, path)
        if found < version:
            for statement in statements:
                conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {version}")
        conn.execute("COMMIT")
    except BaseException as exc:
        rollback_quietly(conn)
        if isinstance(exc, sqlite3.Error):
            raise store_error(exc, path) from exc
        raise


def rollback_quietly(conn: sqlite3.Connection) -> None:
    """Roll back what is open; a failing ROLLBACK must not hide the error that caused it (SQLite
    rolls a failed transaction back itself when the connection closes)."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


@contextlib.contextmanager
def write_transaction(
    conn: sqlite3.Connection, path: Path, forget_connection: Callable[[], None]
) -> Iterator[sqlite3.Connection]:
    """One ``BEGIN IMMEDIATE`` ... ``COMMIT`` on ``conn``: any error rolls it all back; a SQLite error
    (in it or its COMMIT) also drops the connection (``forget_connection``) and is raised as the gpuctl
    error that says what happened (:func:`store_error`)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        forget_connection()
        raise store_error(exc, path) from exc
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException as exc:
        rollback_quietly(conn)
        if isinstance(exc, sqlite3.Error):
            forget_connection()
            raise store_error(exc, path) from exc
        raise


class ThreadConnections:
    """One connection to ``path`` per thread, opened on first use: opening and closing one per query
    cost most of a controller tick (closing the last WAL connection checkpoints the file)."""

    def __init__(self, path: Path, read_only: bool) -> None:
        self.path, self.read_only = path, read_only
        self._local = threading.local()

    def get(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, self.read_only)
            self._local.conn = conn
        return conn

    def drop(self) -> None:
        """Close this thread's connection (after an error: the next use opens a fresh one)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
