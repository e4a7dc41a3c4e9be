"""The schema's Alembic revisions, on both engines: a new database, an upgrade from every earlier
revision, a pre-Alembic SQLite store of every schema version adopted, and several processes
upgrading at once. After each, the database matches :mod:`orchestrator.state.tables` exactly."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from orchestrator.errors import PermanentError
from orchestrator.state import database
from orchestrator.state.database import (
    HEAD_REVISION,
    REVISIONS,
    SCHEMA_VERSION,
    schema_revision,
    upgrade_schema,
)
from orchestrator.state.database_url import is_sqlite
from orchestrator.state.store import JobStore
from orchestrator.state.tables import metadata
from tests.state.legacy_schema import build_legacy_store

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def _config(conn: sa.Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(database.MIGRATIONS))
    config.attributes["connection"] = conn
    return config


def _schema_differences(url: str) -> list[object]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return list(compare_metadata(MigrationContext.configure(conn), metadata))
    finally:
        engine.dispose()


def _old_job(url: str, job_id: str) -> None:
    """A job with one closed segment, written with the columns every revision has."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    at = NOW.isoformat()
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    'INSERT INTO jobs (id, name, "user", team, backend, status, spec_json, submitted_at, updated_at)'
                    " VALUES (:id, 'old', 'u', 't', 'local', 'SUCCEEDED', '{}', :at, :at)"
                ),
                {"id": job_id, "at": at},
            )
            conn.execute(sa.text(
                "INSERT INTO segments (job_id, attempt, gpu_type, instance_type, market, cloud, region, zone, nodes,"
                " gpus_per_node, started_at, ended_at, node_price_usd_per_hour, on_demand_node_price_usd_per_hour,"
                " price_source) VALUES (:id, 1, 'A100', 'p4d', 'spot', 'aws', 'r', 'z', 2, 8, :at, :at, 1.5, 4.0,"
                " 'list')"), {"id": job_id, "at": at})  # fmt: skip
    finally:
        engine.dispose()


def _kept(home: Path, url: str, job_id: str) -> None:
    store = JobStore(home, url=url)
    job = store.job(job_id)
    assert (job.name, job.cluster, job.namespace) == ("old", "", "")
    (segment,) = store.segments(job_id)
    assert (segment.nodes, segment.node_price_usd_per_hour) == (2, 1.5)


def test_the_revisions_this_gpuctl_knows_are_the_scripts() -> None:
    script = ScriptDirectory(str(database.MIGRATIONS))
    assert script.get_current_head() == HEAD_REVISION
    assert tuple(reversed([r.revision for r in script.walk_revisions()])) == REVISIONS


def test_a_new_database_gets_exactly_the_tables(database_url: str, tmp_path: Path) -> None:
    assert schema_revision(database_url) is None
    assert upgrade_schema(database_url) == HEAD_REVISION
    assert schema_revision(database_url) == HEAD_REVISION
    assert _schema_differences(database_url) == []
    assert upgrade_schema(database_url) == HEAD_REVISION  # again: nothing to do


@pytest.mark.parametrize("revision", REVISIONS[:-1])
def test_an_upgrade_from_each_earlier_revision_keeps_the_jobs(
    database_url: str, tmp_path: Path, revision: str
) -> None:
    engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        command.upgrade(_config(conn), revision)
    engine.dispose()
    _old_job(database_url, "old-1")
    assert schema_revision(database_url) == revision
    assert upgrade_schema(database_url) == HEAD_REVISION
    assert _schema_differences(database_url) == []
    _kept(tmp_path, database_url, "old-1")


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_a_store_from_before_alembic_is_adopted(tmp_path: Path, version: int) -> None:
    path = tmp_path / "gpuctl.db"
    build_legacy_store(path, version)
    url = f"sqlite:///{path}"
    _old_job(url, "old-1")
    assert schema_revision(url) == database.LEGACY_REVISIONS.get(version)
    _kept(tmp_path, url, "old-1")  # opening the store upgrades it
    assert schema_revision(url) == HEAD_REVISION
    assert [d for d in _schema_differences(url) if not _legacy_spelling(d)] == []
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA application_id").fetchone()[0] == database.APPLICATION_ID
    finally:
        conn.close()


def _legacy_spelling(difference: object) -> bool:
    """A difference of spelling only in the tables the old schema text created, the same table to
    SQLite: ``REAL`` for ``FLOAT`` (both of REAL affinity), and a one-column primary key without
    ``NOT NULL``."""
    change = difference[0] if isinstance(difference, list) else difference
    assert isinstance(change, tuple)
    table = metadata.tables[change[2]]
    if change[0] == "modify_type":
        return {str(change[5]), str(change[6])} == {"REAL", "FLOAT"}
    return change[0] == "modify_nullable" and [c.name for c in table.primary_key] == [change[3]]


def test_a_database_of_a_newer_revision_is_refused(database_url: str, tmp_path: Path) -> None:
    upgrade_schema(database_url)
    engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    for read_only in (False, True):
        with pytest.raises(PermanentError) as err:
            JobStore(tmp_path, read_only=read_only, url=database_url)
        assert "schema revision 9999, newer than this gpuctl knows" in err.value.message


def test_several_processes_starting_at_once_upgrade_once(database_url: str) -> None:
    starts = threading.Barrier(6)
    found: list[str] = []
    errors: list[BaseException] = []

    def start() -> None:
        starts.wait()
        try:
            found.append(upgrade_schema(database_url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and found == [HEAD_REVISION] * 6
    engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all() == [
            HEAD_REVISION
        ]
    engine.dispose()
    assert is_sqlite(database_url) or _schema_differences(database_url) == []
