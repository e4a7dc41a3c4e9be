"""`gpuctl db upgrade | status | move`: the configured database, on both engines, and a SQLite home
moved to PostgreSQL reporting the same costs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from orchestrator.state.database import HEAD_REVISION
from orchestrator.testing.postgres import PostgresServer
from tests.cli.hostile_home import gpuctl
from tests.state.ledger_home import build_ledger_home

pytestmark = pytest.mark.slow


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("GPUCTL_DATABASE_URL", raising=False)
    return tmp_path / "home"


def _with_password(url: str, password: str) -> str:
    return make_url(url).set(password=password).render_as_string(hide_password=False)


def _report(by: str) -> dict[str, Any]:
    code, out = gpuctl("cost", "report", "-o", "json", "--by", by)
    assert code == 0
    doc: dict[str, Any] = json.loads(out)
    return {"rows": doc["rows"], "totals": doc["totals"]}


def test_upgrade_then_status_on_each_engine(
    home: Path, database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Loopback trust accepts any password: the one in the URL must never be shown.
    url = _with_password(database_url, "s3cret-pw") if database_url.startswith("postgresql") else database_url
    monkeypatch.setenv("GPUCTL_DATABASE_URL", url)
    code, status = gpuctl("db", "status", "-o", "json")
    assert code == 0
    before = json.loads(status)
    if database_url.startswith("sqlite"):
        assert before["exists"] is False
    else:
        assert before["revision"] is None and before["rows"] == {}

    code, upgraded = gpuctl("db", "upgrade")
    assert code == 0 and f"at revision {HEAD_REVISION}" in upgraded
    code, status = gpuctl("db", "status", "-o", "json")
    doc = json.loads(status)
    assert doc["revision"] == HEAD_REVISION and doc["engine"] == database_url.split(":")[0].split("+")[0]
    assert doc["rows"]["jobs"] == 0 and doc["segment_cost_usd"] == 0.0
    code, table = gpuctl("db", "status")
    assert code == 0 and f"{HEAD_REVISION} (current)" in table and "jobs rows" in table
    assert "s3cret-pw" not in status + table + upgraded + capsys.readouterr().err


def test_a_sqlite_home_moves_to_postgresql_with_the_same_report(
    home: Path, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_ledger_home(home)
    sqlite_reports = {by: _report(by) for by in ("job", "team", "market")}
    target = _with_password(postgres_server.new_database(), "s3cret-pw")

    code, out = gpuctl("db", "move", "--to", target)
    assert code == 0, out
    assert "counts and totals match" in out and "GPUCTL_DATABASE_URL" in out and "s3cret-pw" not in out
    assert "segments rows" in out and "jobs SUCCEEDED" in out

    monkeypatch.setenv("GPUCTL_DATABASE_URL", target)
    assert {by: _report(by) for by in ("job", "team", "market")} == sqlite_reports
    assert sqlite_reports["job"]["totals"]["totalCost"] == pytest.approx(2 + 2.5 + 0.25 + 78 + 1)
    code, status = gpuctl("db", "status", "-o", "json")
    assert json.loads(status)["rows"]["jobs"] == 5


def test_move_json_shows_both_sides(home: Path, postgres_server: PostgresServer) -> None:
    build_ledger_home(home)
    code, out = gpuctl("db", "move", "--to", postgres_server.new_database(), "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["before"] == doc["after"] and doc["revision"] == HEAD_REVISION
    assert doc["after"]["jobs_by_status"]["SUCCEEDED"] == 2


def test_move_refuses_what_is_not_a_database_url(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build_ledger_home(home)
    code, _ = gpuctl("db", "move", "--to", "mysql://u:pw@h/db")
    err = capsys.readouterr().err
    assert code == 2 and "--to must name a database" in err and "To fix:" in err and "pw@" not in err


def test_move_without_a_store_says_where_it_looked(home: Path, postgres_server: PostgresServer,
                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    code, _ = gpuctl("db", "move", "--to", postgres_server.new_database())
    err = capsys.readouterr().err
    assert code == 2 and f"no SQLite job store at {home / 'gpuctl.db'}" in err
