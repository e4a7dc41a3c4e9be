"""What the job store does with a file it cannot trust or a lock it cannot get: a gpuctl error that
says what happened and what to do, never a traceback, never a write by a reader, never a lost record."""

from __future__ import annotations

import sqlite3
import stat
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from orchestrator.cli.main import main
from orchestrator.errors import GpuctlError, InternalError, PermanentError, TemporaryError
from orchestrator.state import sqlite_file
from orchestrator.state.database import APPLICATION_ID, SCHEMA_VERSION
from orchestrator.state.store import JobStore
from orchestrator.state.usage import UsageStore
from tests.state.legacy_schema import build_legacy_store

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def _job(store: JobStore, name: str = "j") -> str:
    return store.create_job(
        name=name, user="u", team="t", backend="local", spec_json="{}", deadline=None, now=NOW
    ).id


def _pragma(path: Path, name: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"PRAGMA {name}").fetchone()[0])
    finally:
        conn.close()


def _set_pragma(path: Path, name: str, value: int) -> None:
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA {name} = {value}")
    conn.commit()
    conn.close()


def test_new_store_carries_version_and_id(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    assert _pragma(store.path, "user_version") == SCHEMA_VERSION
    assert _pragma(store.path, "application_id") == APPLICATION_ID


@pytest.mark.parametrize("read_only", [False, True])
def test_a_store_from_a_newer_gpuctl_is_refused_untouched(tmp_path: Path, read_only: bool) -> None:
    job_id = _job(JobStore(tmp_path))
    path = tmp_path / "gpuctl.db"
    _set_pragma(path, "user_version", SCHEMA_VERSION + 1)
    with pytest.raises(PermanentError) as err:
        JobStore(tmp_path, read_only=read_only)
    assert f"schema version {SCHEMA_VERSION + 1}, newer than this gpuctl knows" in err.value.message
    assert "To fix: upgrade gpuctl" in err.value.message
    assert _pragma(path, "user_version") == SCHEMA_VERSION + 1
    _set_pragma(path, "user_version", SCHEMA_VERSION)
    assert JobStore(tmp_path).job(job_id).id == job_id


def _old_store(home: Path) -> str:
    """A store as gpuctl wrote it before schema versions: no id, version 0, no GPU usage tables."""
    build_legacy_store(home / "gpuctl.db", 0, app_id=False)
    conn = sqlite3.connect(home / "gpuctl.db")
    conn.executescript("DROP TABLE gpu_usage_windows; DROP TABLE gpu_usage_files;")
    conn.execute(
        "INSERT INTO jobs (id, name, user, team, backend, status, spec_json, submitted_at, updated_at)"
        " VALUES ('old-1', 'old', 'u', 't', 'local', 'PENDING', '{}', ?, ?)",
        (NOW.isoformat(), NOW.isoformat()),
    )
    conn.commit()
    conn.close()
    return "old-1"


@pytest.mark.parametrize("read_only", [False, True])
def test_an_older_store_is_upgraded_keeping_its_jobs(tmp_path: Path, read_only: bool) -> None:
    job_id = _old_store(tmp_path)
    store = JobStore(tmp_path, read_only=read_only)
    assert store.job(job_id).id == job_id
    assert UsageStore(store).usage(job_id) is None  # the tables of the newer schema exist
    assert _pragma(store.path, "user_version") == SCHEMA_VERSION


@pytest.mark.parametrize("read_only", [False, True])
def test_a_garbage_file_is_refused_untouched(tmp_path: Path, read_only: bool) -> None:
    path = tmp_path / "gpuctl.db"
    garbage = bytes(range(256)) * 64
    path.write_bytes(garbage)
    with pytest.raises(PermanentError) as err:
        JobStore(tmp_path, read_only=read_only)
    assert f"{path} is not a gpuctl job store, or it is damaged" in err.value.message
    assert f"To fix: restore it from a backup, or move it away (`mv {path} {path}.bad`)" in err.value.message
    assert path.read_bytes() == garbage


def test_another_programs_database_is_not_used(tmp_path: Path) -> None:
    path = tmp_path / "gpuctl.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE photos (id INTEGER)")
    conn.close()
    with pytest.raises(PermanentError, match="not a gpuctl job store"):
        JobStore(tmp_path)
    tables = sqlite3.connect(path).execute("SELECT name FROM sqlite_schema").fetchall()
    assert tables == [("photos",)], "nothing was added to it"


def test_cli_shows_a_damaged_store_as_an_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "gpuctl.db").write_bytes(b"not a database at all" * 100)
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    for command in (["list"], ["status", "x"], ["events", "x"], ["cost", "report"], ["cancel", "x"]):
        assert main(command) == 1, command
        err = capsys.readouterr().err
        assert err.startswith("gpuctl: error: ") and "is not a gpuctl job store" in err and "To fix:" in err
        assert "Traceback" not in err


def test_a_held_write_lock_is_a_clear_temporary_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed BEGIN used to be followed by a ROLLBACK that failed too, hiding why."""
    monkeypatch.setattr(sqlite_file, "LOCK_TIMEOUT_S", 0.05)  # before the store opens its connection
    store = JobStore(tmp_path)
    job_id = _job(store)
    holder = sqlite3.connect(store.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(TemporaryError) as err:
            store.add_event(job_id, NOW, "note", "x")
        assert (
            "stayed locked by another gpuctl process" in err.value.message and "To fix:" in err.value.message
        )
        assert isinstance(err.value.__cause__, sqlite3.OperationalError)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.add_event(job_id, NOW, "note", "after")
    assert store.events(job_id)[-1].message == "after"


def test_readers_never_wait_for_nor_take_the_write_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_file, "LOCK_TIMEOUT_S", 0.05)  # before the store opens its connection
    store = JobStore(tmp_path)
    job_id = _job(store)
    holder = sqlite3.connect(store.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a controller in the middle of a write
    holder.execute("UPDATE jobs SET message = 'uncommitted'")
    try:
        reader = JobStore(tmp_path, read_only=True)
        assert [j.id for j in reader.list_jobs()] == [job_id]
        assert reader.job(job_id).message == ""
        assert UsageStore(reader).usage(job_id) is None and reader.events(job_id)
        assert not (tmp_path / "jobs").exists() and reader.job_dir(job_id) == tmp_path / "jobs" / job_id
        with pytest.raises(InternalError), reader.transaction():
            pass
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_sqlite_error_inside_a_transaction_rolls_back_and_says_so(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = _job(store)
    with pytest.raises(GpuctlError) as err, store.transaction() as conn:
        conn.execute(text("UPDATE jobs SET message = 'half' WHERE id = :j"), {"j": job_id})
        conn.execute(text("INSERT INTO no_such_table VALUES (1)"))
    assert "unexpected database error" in err.value.message and "no_such_table" in err.value.message
    assert store.job(job_id).message == ""


def test_home_is_private_and_the_database_too(tmp_path: Path) -> None:
    home = tmp_path / "parent" / "home"
    store = JobStore(home)
    job_id = _job(store)
    writer = sqlite3.connect(store.path)  # keeps -wal and -shm in place to look at them
    writer.execute("SELECT count(*) FROM jobs").fetchall()
    try:
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        for suffix in ("", "-wal", "-shm"):
            assert stat.S_IMODE(Path(f"{store.path}{suffix}").stat().st_mode) == 0o600, suffix
        assert stat.S_IMODE(store.job_dir(job_id).stat().st_mode) == 0o700
    finally:
        writer.close()


def test_an_existing_home_keeps_its_mode(tmp_path: Path) -> None:
    tmp_path.chmod(0o750)  # a home a team shares, set up by its admin
    JobStore(tmp_path)
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o750


def test_a_lookup_takes_wildcards_literally(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    first, second = _job(store, "a"), _job(store, "b")
    for pattern in ("%", "_", "a%", "_-"):
        with pytest.raises(GpuctlError, match=f"no job '{pattern}'"):
            store.job(pattern)
    assert store.job(first[:3]).id == first and store.job("b").id == second


def test_concurrent_first_opens_agree(tmp_path: Path) -> None:
    """Two processes starting on an empty home at once: both see one upgraded store."""
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            JobStore(tmp_path)
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and _pragma(tmp_path / "gpuctl.db", "user_version") == SCHEMA_VERSION
