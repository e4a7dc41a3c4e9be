"""The throwaway PostgreSQL server the tests run against: real, loopback only, gone after stop."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from orchestrator.errors import EnvironmentProblem
from orchestrator.testing import postgres
from orchestrator.testing.postgres import PostgresServer


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def _processes_using(folder: Path) -> list[int]:
    """Live processes whose command line names the folder (the postmaster and its children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(folder) in cmdline and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_server_starts_on_loopback_and_serves_sqlalchemy(postgres_server: PostgresServer) -> None:
    url = postgres_server.new_database()
    assert url.startswith(f"postgresql+psycopg://postgres@127.0.0.1:{postgres_server.port}/")
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            version = conn.execute(sa.text("SHOW server_version_num")).scalar_one()
            listen = conn.execute(sa.text("SHOW listen_addresses")).scalar_one()
            fsync = conn.execute(sa.text("SHOW fsync")).scalar_one()
    finally:
        engine.dispose()
    assert int(version) >= 150000
    assert listen == "127.0.0.1"
    assert fsync == "off"
    if os.geteuid() == 0:  # postgres refuses root: the server runs as the postgres system user
        assert postgres_server.folder.stat().st_uid != 0


@pytest.mark.slow
def test_two_databases_are_independent(postgres_server: PostgresServer) -> None:
    first, second = postgres_server.new_database(), postgres_server.new_database()
    assert first != second
    engines = [sa.create_engine(first), sa.create_engine(second)]
    try:
        with engines[0].begin() as conn:
            conn.execute(sa.text("CREATE TABLE jobs (id integer primary key)"))
            conn.execute(sa.text("INSERT INTO jobs VALUES (1), (2)"))
        with engines[1].connect() as conn:
            tables = conn.execute(
                sa.text("SELECT count(*) FROM information_schema.tables WHERE table_name = 'jobs'")
            ).scalar_one()
        with engines[0].connect() as conn:
            rows = conn.execute(sa.text("SELECT count(*) FROM jobs")).scalar_one()
    finally:
        for engine in engines:
            engine.dispose()
    assert tables == 0
    assert rows == 2


@pytest.mark.slow
def test_stop_leaves_nothing_running_and_removes_the_folder() -> None:
    server = PostgresServer().start()
    folder, pid, port = server.folder, server.server_pid(), server.port
    assert pid is not None and _alive(pid)
    assert _processes_using(folder)
    server.stop()
    assert not _alive(pid)
    assert _processes_using(folder) == []
    assert not folder.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", connect_timeout=3)
    server.stop()  # a second stop is harmless


def test_missing_binaries_name_the_debian_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(postgres, "DEBIAN_BIN_GLOB", "/nonexistent/*/bin")
    with pytest.raises(EnvironmentProblem) as caught:
        PostgresServer()
    assert "`postgresql`" in caught.value.message
    assert "To fix:" in caught.value.message


@pytest.mark.slow
def test_database_url_is_a_fresh_empty_database_on_each_engine(database_url: str) -> None:
    engine = sa.create_engine(database_url)
    try:
        with engine.begin() as conn:
            assert sa.inspect(conn).get_table_names() == []
            conn.execute(sa.text("CREATE TABLE probe (id integer primary key)"))
        assert engine.dialect.name == database_url.split(":")[0].split("+")[0]
    finally:
        engine.dispose()


@pytest.mark.slow
def test_a_server_left_running_is_stopped_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the test session's end does (tests/conftest.py): a server a test forgot is stopped and
    named. (The servers started before this test, the session's own, are kept out of its sight.)"""
    monkeypatch.setattr(postgres, "_RUNNING", set())
    forgotten = PostgresServer().start()
    folder, pid = forgotten.folder, forgotten.server_pid()
    assert pid is not None
    shown = postgres.stop_leftovers()
    assert len(shown) == 1 and str(folder) in shown[0]
    assert not _alive(pid) and not folder.exists()
    assert postgres.stop_leftovers() == []
