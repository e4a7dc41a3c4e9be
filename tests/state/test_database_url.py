"""One setting chooses the database: GPUCTL_DATABASE_URL, else database.url in config.yaml, else SQLite
under the gpuctl home; a URL gpuctl cannot use is refused with the fix; a password is never shown."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from orchestrator.errors import PermanentError, TemporaryError, UserError
from orchestrator.state.database_url import URL_ENV, database_url, is_sqlite, masked_url
from orchestrator.state.store import JobStore
from orchestrator.testing.postgres import PostgresServer

PASSWORD = "Zq7XWv9KJp2MQr5T"


@pytest.fixture(autouse=True)
def _no_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)


def test_the_default_is_sqlite_under_the_home(tmp_path: Path) -> None:
    assert database_url(tmp_path) == f"sqlite:///{tmp_path / 'gpuctl.db'}"
    assert is_sqlite(database_url(tmp_path))


def test_the_environment_wins_over_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config.yaml").write_text("database:\n  url: postgresql://cfg@db.example/gpuctl\n")
    assert database_url(tmp_path) == "postgresql+psycopg://cfg@db.example/gpuctl"  # plain postgresql://
    monkeypatch.setenv(URL_ENV, "postgresql+psycopg://env@db.example:5433/team")
    assert database_url(tmp_path) == "postgresql+psycopg://env@db.example:5433/team"


def test_a_config_without_a_database_section_keeps_the_default(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("budgets:\n  teams: {}\n")
    assert is_sqlite(database_url(tmp_path))


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://u@h/db", "a 'mysql' URL"),
        ("not a url", "a malformed URL"),
        ("sqlite://", "names no SQLite file"),
        ("sqlite:///:memory:", "names no SQLite file"),
        (f"postgresql://u:{PASSWORD}@h:5432", "names no database"),
    ],
)
def test_a_url_gpuctl_cannot_use_is_refused_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, said: str
) -> None:
    monkeypatch.setenv(URL_ENV, url)
    with pytest.raises(UserError) as err:
        database_url(tmp_path)
    assert said in err.value.message and URL_ENV in err.value.message and "To fix:" in str(err.value)
    assert PASSWORD not in str(err.value)


def test_a_bad_config_value_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("database:\n  url: 5\n")
    with pytest.raises(UserError) as err:
        database_url(tmp_path)
    assert f"database.url in {tmp_path / 'config.yaml'}" in err.value.message


def test_the_masked_url_hides_the_password() -> None:
    shown = masked_url(f"postgresql+psycopg://gpuctl:{PASSWORD}@db.example:5432/gpuctl")
    assert shown == "postgresql+psycopg://gpuctl:***@db.example:5432/gpuctl"


def test_a_server_that_is_not_running_is_a_temporary_error_without_the_password(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://gpuctl:{PASSWORD}@127.0.0.1:1/gpuctl"
    with pytest.raises(TemporaryError) as err:
        JobStore(tmp_path, url=url)
    assert "is the server running" in err.value.message
    assert "postgresql+psycopg://gpuctl:***@127.0.0.1:1/gpuctl" in err.value.message
    assert PASSWORD not in str(err.value) and PASSWORD not in repr(err.value.__cause__)


def test_a_role_without_access_is_a_permanent_error(postgres_server: PostgresServer, tmp_path: Path) -> None:
    url = postgres_server.new_database()
    database = url.rsplit("/", 1)[1]
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS outsider")
        admin.execute("CREATE ROLE outsider LOGIN")
        admin.execute(sql.SQL("REVOKE CONNECT ON DATABASE {} FROM PUBLIC").format(sql.Identifier(database)))
    outsider = url.replace("postgres@", f"outsider:{PASSWORD}@")
    with pytest.raises(PermanentError) as err:
        JobStore(tmp_path, url=outsider)
    assert "refused gpuctl" in err.value.message and "permission denied" in err.value.message
    assert PASSWORD not in str(err.value)
