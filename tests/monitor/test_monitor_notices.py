"""Preemption notices against a real HTTP server standing in for AWS IMDSv2 and GCP metadata."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.monitor.notices import (
    AwsSpotNotice,
    GcpPreemptedNotice,
    Notice,
    NoticeNotifier,
    NoticeWatcher,
    make_notice_source,
    notice_signal,
)
from tests.monitor.monitor_helpers import FakeMetadata


@pytest.fixture
def metadata() -> Iterator[FakeMetadata]:
    server = FakeMetadata()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


TRAINER = """
import signal, sys, time
def on_term(signum, frame):
    open(sys.argv[1], "w").write(str(time.time()))
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
time.sleep(30)
"""


@pytest.fixture
def trainer(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    marker = tmp_path / "signalled"
    child = subprocess.Popen(
        [sys.executable, "-c", TRAINER, str(marker)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        yield child, marker
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=5)
        assert child.stdout is not None
        child.stdout.close()


def wait_for(path: Path, timeout_s: float) -> float | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return time.monotonic()
        time.sleep(0.01)
    return None


def test_aws_imdsv2_uses_a_token_and_reports_the_action(metadata: FakeMetadata) -> None:
    source = AwsSpotNotice(metadata.url, timeout_s=2)
    assert source.poll() is None
    assert source.poll() is None
    assert metadata.token_requests == 1  # the token is reused until it expires
    metadata.notice = True
    notice = source.poll()
    assert notice is not None and notice.cloud == "aws"
    assert notice.detail == "terminate at 2026-11-22T06:30:00Z"
    assert metadata.unauthorized == 0


def test_aws_token_renewed_after_401(metadata: FakeMetadata) -> None:
    source = AwsSpotNotice(metadata.url, timeout_s=2)
    assert source.poll() is None
    metadata.tokens.clear()  # the service forgot the token
    metadata.notice = True
    assert source.poll() is not None
    assert metadata.unauthorized == 1 and metadata.token_requests == 2


def test_gcp_preempted_needs_metadata_flavor(metadata: FakeMetadata) -> None:
    source = GcpPreemptedNotice(metadata.url, timeout_s=2)
    assert source.available()
    assert source.poll() is None
    metadata.notice = True
    notice = source.poll()
    assert notice is not None and notice.cloud == "gcp"


def test_auto_picks_the_cloud_that_answers_and_none_when_nothing_does(metadata: FakeMetadata) -> None:
    found = make_notice_source("auto", metadata.url)
    assert found is not None and found.cloud == "aws"
    assert make_notice_source("none", metadata.url) is None
    # a closed port on loopback: nothing answers, so nothing is watched
    assert make_notice_source("auto", "http://127.0.0.1:9", timeout_s=0.5) is None


@pytest.mark.slow
@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_trainer_signalled_within_one_poll(
    metadata: FakeMetadata, trainer: tuple[subprocess.Popen[str], Path], tmp_path: Path, cloud: str
) -> None:
    child, marker = trainer
    notice_file = tmp_path / "notice"
    source = make_notice_source(cloud, metadata.url, timeout_s=2)
    assert source is not None
    notifier = NoticeNotifier(notify_pid=child.pid, notice_file=notice_file, sig=signal.SIGTERM)
    lines: list[str] = []
    watcher = NoticeWatcher(source, notifier, interval_s=0.3, log=lines.append)
    watcher.start()
    try:
        time.sleep(0.4)
        assert not marker.exists()
        metadata.notice = True
        started = time.monotonic()
        seen = wait_for(marker, timeout_s=5)
        assert seen is not None, "trainer was not signalled"
        assert seen - started < 0.3 + 1.0  # one poll interval plus slack for a loaded machine
        assert child.wait(timeout=5) == 0
    finally:
        watcher.stop()
    assert json.loads(notice_file.read_text())["cloud"] == cloud
    assert lines and lines[0].startswith(f"preemption notice ({cloud}")


@pytest.mark.slow
def test_notifier_signals_a_process_group_once(trainer: tuple[subprocess.Popen[str], Path]) -> None:
    child, marker = trainer
    notifier = NoticeNotifier(notify_pid=-os.getpgid(child.pid), sig=signal.SIGTERM)
    notice = Notice("aws", "terminate", time.time())
    assert notifier.deliver(notice) == [f"sent SIGTERM to {-child.pid}"]
    assert wait_for(marker, timeout_s=5) is not None
    assert notifier.deliver(notice) == []  # delivered once only


def test_notice_signal_from_environment() -> None:
    assert notice_signal({}) == signal.SIGTERM
    assert notice_signal({"GPUCTL_NOTICE_SIGNAL": "usr1"}) == signal.SIGUSR1
    assert notice_signal({"GPUCTL_NOTICE_SIGNAL": "SIGUSR2"}) == signal.SIGUSR2
    with pytest.raises(Exception, match="not a signal name"):
        notice_signal({"GPUCTL_NOTICE_SIGNAL": "NOPE"})


def test_metadata_requests_ignore_proxy_settings(
    metadata: FakeMetadata, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    metadata.notice = True
    assert GcpPreemptedNotice(metadata.url, timeout_s=2).poll() is not None
