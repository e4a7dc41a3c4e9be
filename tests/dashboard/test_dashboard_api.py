"""The dashboard's JSON equals what the CLI prints (`gpuctl status JOB -o json`, `list -o json`,
`cost report --by BY -o json`), its pages show stored text literally, and it writes nothing."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from orchestrator.costs.report import GroupBy
from orchestrator.dashboard import data
from orchestrator.dashboard.app import create_app
from tests.cli.hostile_home import gpuctl, strict_json
from tests.dashboard.dashboard_home import HOSTILE, HOSTILE_LOG, HOSTILE_USER, make_home

TIMED = ("window", "generatedAt")
"""What a cost report takes from the moment it is made (the window ends now)."""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def jobs(home: Path) -> dict[str, str]:
    return make_home(home)


@pytest.fixture
def client(home: Path, jobs: dict[str, str]) -> TestClient:
    return TestClient(create_app(home))


def cli_json(*argv: str) -> Any:
    code, out = gpuctl(*argv)
    assert code == 0, out
    return strict_json(out)


def test_jobs_endpoint_is_gpuctl_list(client: TestClient) -> None:
    found = client.get("/api/jobs")
    assert found.status_code == 200
    assert strict_json(found.text)["jobs"] == cli_json("list", "-o", "json")


def test_job_endpoint_is_gpuctl_status(client: TestClient, jobs: dict[str, str]) -> None:
    for job_id in jobs.values():
        detail = strict_json(client.get(f"/api/jobs/{job_id}").text)
        assert detail["status"] == cli_json("status", job_id, "-o", "json")
        assert detail["events"] == cli_json("events", job_id, "-o", "json")


@pytest.mark.parametrize("by", ["team", "user", "gpu", "market", "job"])
def test_costs_endpoint_is_gpuctl_cost_report(client: TestClient, by: str) -> None:
    found = strict_json(client.get(f"/api/costs?by={by}").text)["report"]
    printed = cli_json("cost", "report", "--by", by, "-o", "json")
    assert {k: v for k, v in found.items() if k not in TIMED} == {
        k: v for k, v in printed.items() if k not in TIMED
    }


def test_filters_pick_jobs_by_team_user_and_state(client: TestClient, jobs: dict[str, str]) -> None:
    def ids(query: dict[str, str]) -> list[str]:
        return [d["id"] for d in client.get("/api/jobs", params=query).json()["jobs"]]

    assert ids({"team": HOSTILE}) == [jobs["hostile"]]
    assert ids({"user": "ana"}) == [jobs["finished"]]
    assert ids({"state": "SUCCEEDED", "team": HOSTILE}) == []
    filters = client.get("/api/jobs").json()["filters"]
    assert filters["team"] == sorted([HOSTILE, "ml"]) and "FAILED" in filters["state"]


def test_job_page_charts_progress_and_gpu_and_says_not_measured(
    client: TestClient, jobs: dict[str, str]
) -> None:
    finished = client.get(f"/api/jobs/{jobs['finished']}").json()
    assert [p[1] for p in finished["progress"]] == list(range(50))
    assert finished["gpu"] and finished["summary"]["gpu"].endswith("(p95 60%)")
    hostile = client.get(f"/api/jobs/{jobs['hostile']}").json()
    assert hostile["gpu"] == [] and hostile["summary"]["gpu"] == "not measured"
    assert "not measured" in client.get("/").text


def _pages(jobs: dict[str, str]) -> list[str]:
    return ["/", f"/?team={HOSTILE}", f"/jobs/{jobs['hostile']}", "/costs?by=team", "/costs?by=user",
            "/jobs/<script>alert(4)"]  # fmt: skip


def test_hostile_text_is_shown_literally(client: TestClient, jobs: dict[str, str]) -> None:
    for page in _pages(jobs):
        html = client.get(page).text
        for raw in (HOSTILE, HOSTILE_USER, HOSTILE_LOG, "<script>alert(4)"):
            assert raw not in html, (page, raw)
    job_page = client.get(f"/jobs/{jobs['hostile']}").text
    assert "&lt;img src=x onerror=alert(1)&gt;" in job_page  # the team, as text
    assert "&lt;script&gt;alert(3)&lt;/script&gt; &amp; done" in job_page  # the log line
    assert "\\x1b[2Jcleared?" in job_page and "\x1b" not in job_page  # a control character, shown escaped
    assert "no job &#39;&lt;script&gt;alert(4)&#39;" in client.get("/jobs/<script>alert(4)").text


def test_every_route_is_get_only(client: TestClient, jobs: dict[str, str]) -> None:
    app: Any = client.app
    while not hasattr(app, "routes"):
        app = app.app
    for route in app.routes:
        assert isinstance(route, Route | Mount)
        if isinstance(route, Route):
            assert route.methods is not None and route.methods <= {"GET", "HEAD"}, route.path
    for path in [
        *_pages(jobs),
        "/api/jobs",
        f"/api/jobs/{jobs['finished']}",
        "/api/costs",
        "/static/jobs.js",
    ]:
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            assert client.request(method, path).status_code == 405, (method, path)


def _snapshot(home: Path) -> dict[str, str]:
    """Every file's bytes, and the database's rows (SQLite may fold its WAL into the file on close)."""
    files = {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
             for p in sorted(home.rglob("*")) if not p.name.startswith("gpuctl.db")}  # fmt: skip
    with contextlib.closing(sqlite3.connect(f"file:{home / 'gpuctl.db'}?mode=ro", uri=True)) as conn:
        rows = "\n".join(conn.iterdump())
    return {**files, "rows": hashlib.sha256(rows.encode()).hexdigest()}


def test_pages_write_nothing(client: TestClient, home: Path, jobs: dict[str, str]) -> None:
    before = _snapshot(home)
    assert data.open_store(home).read_only  # a write would raise
    for page in [
        *_pages(jobs),
        "/api/jobs",
        f"/api/jobs/{jobs['finished']}",
        "/api/costs",
        "/costs?since=7d",
    ]:
        assert client.get(page).status_code in (200, 404), page
    assert _snapshot(home) == before


def test_every_response_has_the_content_security_policy(client: TestClient) -> None:
    for page in ("/", "/static/vendor/uPlot.iife.min.js", "/nowhere", "/api/jobs/nope"):
        policy = client.get(page).headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy, page
    html = client.get("/").text
    assert (
        "http://" not in html and "https://" not in html and "<script>" not in html
    )  # no CDN, no inline script


def test_a_bad_grouping_or_window_is_one_message(client: TestClient) -> None:
    assert client.get("/api/costs?by=nope").json()["error"].startswith("no grouping 'nope'")
    found = client.get("/costs?since=soon")
    assert found.status_code == 400 and "--since" in found.text


def test_log_tail_is_bounded_and_skips_fifos(home: Path, jobs: dict[str, str]) -> None:
    node = home / "jobs" / jobs["finished"] / "attempt-1"
    (node / "node-0").mkdir(parents=True)
    (node / "node-0" / "output.log").write_bytes(b"".join(b"line %d\n" % i for i in range(200_000)))
    (node / "node-1").mkdir()
    os.mkfifo(node / "node-1" / "output.log")
    tails = data.log_tails(data.open_store(home), jobs["finished"], "local")
    assert tails[0].lines == [f"line {i}" for i in range(200_000 - 40, 200_000)]
    assert tails[1].lines == [] and tails[1].note is not None and "FIFO" in tails[1].note


def test_budget_burn_uses_the_configured_budgets(home: Path, jobs: dict[str, str]) -> None:
    (home / "config.yaml").write_text("budgets:\n  teams: {ml: 100}\n  other_teams_monthly_usd: 10\n")
    budgets = {b["name"]: b for b in data.costs_document(home, GroupBy.TEAM, None)["budgets"]}
    report = {r["name"]: r for r in cli_json("cost", "report", "--by", "team", "-o", "json")["rows"]}
    assert budgets["ml"]["monthly_usd"] == 100 and budgets["ml"]["teams"] == ["ml"]
    shared = budgets["other teams (shared budget)"]
    assert shared["monthly_usd"] == 10 and shared["teams"] == [HOSTILE]
    if jobs and budgets["ml"]["daily"][0][0] > 0:  # spent this month (the jobs ran in the last 3 hours)
        assert budgets["ml"]["spent_usd"] == pytest.approx(report["ml"]["totalCost"], abs=1e-5)
        assert budgets["ml"]["daily"][-1][1] == pytest.approx(budgets["ml"]["spent_usd"])
