from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.state.database_url import URL_ENV
from orchestrator.testing.postgres import PostgresServer, stop_leftovers
from tests.controller.conftest import Gpuctl


@pytest.fixture
def gpuctl(tmp_path: Path) -> Gpuctl:
    """The real `gpuctl` CLI in subprocesses, with its own GPUCTL_HOME."""
    return Gpuctl(tmp_path / "home")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real, throwaway PostgreSQL server for the whole test session, stopped (and its folder
    removed) at the session's end. Started only when a test asks for it."""
    with PostgresServer() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database on each engine: SQLite under the test's folder, or a new database on
    the session's PostgreSQL server. A test taking this fixture runs once per engine."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'gpuctl.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture
def each_engine(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once on SQLite and once on PostgreSQL: every job store it opens by its home
    (``JobStore(home)``, the CLI, a controller) uses ``database_url`` (through GPUCTL_DATABASE_URL).
    Mark a module with ``pytestmark = pytest.mark.usefixtures("each_engine")``."""
    monkeypatch.setenv(URL_ENV, database_url)
    return database_url


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No PostgreSQL server outlives the test session: one a test left running is stopped here, and
    the session fails, naming it."""
    leftovers = stop_leftovers()
    if leftovers:
        print(f"\nerror: PostgreSQL test servers were left running (stopped now): {', '.join(leftovers)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
