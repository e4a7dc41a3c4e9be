"""The sidecar's push to the operator's intake: what it prints on stdout is what it posts, with the pod's
identity and the job's token; without the pod's push environment it posts nothing."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.main import build_parser
from orchestrator.contract import PROGRESS_LINE_PREFIX
from orchestrator.monitor import push
from orchestrator.monitor.app import run_monitor
from orchestrator.monitor.push import MAX_QUEUED_LINES, Pusher, PushTarget, TeeStream
from tests.monitor.monitor_helpers import H100X8


class Intake(ThreadingHTTPServer):
    """Records each post (headers and JSON body); answers ``status``."""

    def __init__(self, status: int = 200) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.status = status
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.posts.append((self.headers.get("Authorization", ""), data))
                self.send_response(server.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def intake() -> Iterator[Intake]:
    server = Intake()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_sidecar_posts_what_it_prints(
    intake: Intake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {push.ENV_INTAKE_URL: intake.url, push.ENV_INTAKE_TOKEN: "tok", push.ENV_JOB_UID: "uid-a",
           push.ENV_POD_NAME: "a-n0", push.ENV_POD_UID: "pod-uid"}  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    progress = tmp_path / "progress.jsonl"
    progress.write_text(json.dumps({"time": "2026-11-02T12:00:00+00:00", "step": 3}) + "\n")
    args = build_parser().parse_args(
        ["monitor", "--source", "replay", str(H100X8), "--interval", "0", "--window", "30s",
         "--summary-stdout", "--progress-file", str(progress), "--port", "-1"]
    )  # fmt: skip
    assert run_monitor(args, log=lambda _line: None) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 5 and sum(line.startswith(PROGRESS_LINE_PREFIX) for line in printed) == 1
    posted = [line for _, body in intake.posts for line in body["lines"]]
    assert posted == printed
    for authorization, body in intake.posts:
        assert authorization == "Bearer tok"
        assert (body["jobUid"], body["pod"], body["podUid"]) == ("uid-a", "a-n0", "pod-uid")


def test_without_the_push_environment_nothing_is_posted(
    intake: Intake, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(push.ENV_INTAKE_URL, intake.url)  # no token: a pod whose job's Secret is missing
    monkeypatch.delenv(push.ENV_INTAKE_TOKEN, raising=False)
    args = build_parser().parse_args(
        ["monitor", "--source", "replay", str(H100X8), "--interval", "0", "--summary-stdout", "--port", "-1"]
    )
    assert run_monitor(args, log=lambda _line: None) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2 and intake.posts == []


def test_an_unreachable_operator_holds_the_newest_lines(intake: Intake) -> None:
    intake.status = 503
    pusher = Pusher(PushTarget(intake.url + push.INTAKE_PATH, "tok", "uid-a", "p", "u"))
    stream = TeeStream(io.StringIO(), pusher)
    for index in range(MAX_QUEUED_LINES + 10):
        stream.write(f'{{"n": {index}}}\n')
    stream.write('{"partial": ')  # not a line yet
    assert not pusher.send() and len(pusher.queue) == MAX_QUEUED_LINES
    intake.status = 200
    assert pusher.send() and not pusher.queue
    lines = [line for _, body in intake.posts[1:] for line in body["lines"]]
    assert lines[0] == '{"n": 10}' and lines[-1] == f'{{"n": {MAX_QUEUED_LINES + 9}}}'
