"""The job store's SQLite file: opening it safely, telling it is gpuctl's, and what SQLite's errors mean.

* Writers open the file read-write in WAL mode; readers (``gpuctl list``, ``status``, ``events``,
  ``cost report``) open it with ``mode=ro`` and never take the write lock, so they also work on a
  read-only home. A WAL database closed cleanly on a read-only file system cannot be opened
  ``mode=ro`` (SQLite wants to create its ``-shm`` file); with no ``-wal`` file beside it no writer is
  active and the main file holds every commit, so it is then read as ``immutable``.
* The file carries gpuctl's application id: a foreign or damaged file is refused, never used.
* Every :class:`sqlite3.Error` becomes a :class:`~orchestrator.errors.GpuctlError` that says what
  happened to which file and what to do (:func:`sqlite_error`).

:mod:`orchestrator.state.database` makes the SQLAlchemy engines from :func:`connect`.
"""

from __future__ import annotations

import shutil
import sqlite3
import stat
from pathlib import Path
from urllib.request import pathname2url

from orchestrator.errors import GpuctlError, InternalError, PermanentError, TemporaryError
from orchestrator.home import create_private_file, not_regular

APPLICATION_ID = 0x67707563
"""``PRAGMA application_id`` of a gpuctl job store (the bytes "gpuc")."""
LOCK_TIMEOUT_S = 30.0
LOW_SPACE_BYTES = 1 << 20


def sqlite_error(exc: sqlite3.Error, path: Path) -> GpuctlError:
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
            conn = sqlite3.connect(
                path, timeout=LOCK_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys=ON")
        return conn
    except sqlite3.Error as exc:
        raise sqlite_error(exc, path) from exc
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
    conn = sqlite3.connect(
        uri, uri=True, timeout=LOCK_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
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
    return sqlite3.connect(
        _read_only_uri(path, immutable=True), uri=True, isolation_level=None, check_same_thread=False
    )


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
