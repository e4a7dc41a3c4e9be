"""Who may read the dashboard: loopback only by default (and only under a loopback host name), a token
on every request when bound elsewhere, and a one-line message when the extra is missing."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from orchestrator import extras
from orchestrator.cli.main import main
from orchestrator.dashboard import command
from orchestrator.dashboard.access import COOKIE, LOOPBACK_NAMES, needs_token, same_token
from orchestrator.dashboard.app import create_app
from orchestrator.errors import UserError

TOKEN = "s3cret-token-for-tests-0123456789"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(("host", "needed"), [("127.0.0.1", False), ("localhost", False), ("::1", False),
                                              ("127.0.0.2", False), ("0.0.0.0", True), ("::", True),
                                              ("10.1.2.3", True), ("gpu-login.example", True)])  # fmt: skip
def test_only_loopback_goes_without_a_token(host: str, needed: bool) -> None:
    assert needs_token(host) is needed


def test_every_request_needs_the_token(home: Path) -> None:
    client = TestClient(create_app(home, token=TOKEN), follow_redirects=False)
    for path in ("/", "/api/jobs", "/costs", "/api/costs", "/static/jobs.js", "/jobs/x"):
        refused = client.get(path)
        assert refused.status_code == 401 and TOKEN not in refused.text, path
        assert "content-security-policy" in refused.headers
    assert client.get("/?token=" + TOKEN[:-1] + "x").status_code == 401
    assert client.get("/", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/api/jobs", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_the_token_in_the_address_becomes_a_cookie(home: Path) -> None:
    client = TestClient(create_app(home, token=TOKEN), follow_redirects=False)
    first = client.get(f"/costs?by=user&token={TOKEN}")
    assert (
        first.status_code == 303 and first.headers["location"] == "/costs?by=user"
    )  # dropped from the address
    cookie = first.headers["set-cookie"]
    assert f"{COOKIE}={TOKEN}" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert client.get("/costs?by=user").status_code == 200  # the client keeps the cookie
    assert client.get("/api/jobs").status_code == 200


def test_token_comparison_is_exact() -> None:
    assert same_token(TOKEN, TOKEN)
    assert not same_token(TOKEN + "x", TOKEN) and not same_token("", TOKEN) and not same_token(None, TOKEN)
    assert not same_token("ü" * len(TOKEN), TOKEN)


@pytest.mark.parametrize(("host", "served"), [("127.0.0.1:8765", True), ("localhost:8765", True),
                                              ("[::1]:8765", True), ("LOCALHOST", True),
                                              ("evil.example:8765", False), ("127.0.0.1.evil.example", False)])  # fmt: skip
def test_bound_to_loopback_only_loopback_host_names_are_served(home: Path, host: str, served: bool) -> None:
    """A page whose own name resolves to 127.0.0.1 (DNS rebinding) sends its own name as Host."""
    client = TestClient(create_app(home, allowed_hosts=LOOPBACK_NAMES))
    assert (client.get("/", headers={"host": host}).status_code == 200) is served


def _args(**given: object) -> argparse.Namespace:
    return argparse.Namespace(**{"token": None, **given})


def test_a_token_is_generated_beyond_loopback_and_a_short_one_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(command.TOKEN_ENV, raising=False)
    made = command._token(_args(), needed=True)
    assert made is not None and len(made) >= 32
    assert command._token(_args(), needed=False) is None
    monkeypatch.setenv(command.TOKEN_ENV, TOKEN)
    assert command._token(_args(), needed=True) == TOKEN
    with pytest.raises(UserError, match="fewer than 16"):
        command._token(_args(token="short"), needed=True)


def test_without_the_extra_the_command_names_it(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(extras, "installed", lambda module: module != "starlette")
    assert main(["dashboard"]) == 2
    err = capsys.readouterr().err
    assert "gpuctl dashboard needs the Python package 'starlette'" in err
    assert "To fix: pip install 'gpuctl[dashboard]'" in err and "Traceback" not in err
