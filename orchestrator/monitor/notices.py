"""Cloud preemption notices: poll the instance metadata service and tell the trainer at once.

AWS: IMDSv2 token from ``PUT /latest/api/token`` (header ``X-aws-ec2-metadata-token-ttl-seconds``),
then ``GET /latest/meta-data/spot/instance-action`` (404 until a notice; then JSON with the action
and time, about two minutes before the stop). GCP: ``GET /computeMetadata/v1/instance/preempted``
with ``Metadata-Flavor: Google`` returns ``TRUE`` once preempted (about 30 s before the stop).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from orchestrator.contract import DEFAULT_NOTICE_SIGNAL, ENV_NOTICE_FILE, ENV_NOTICE_SIGNAL
from orchestrator.errors import UserError

AWS_METADATA_URL = "http://169.254.169.254"
GCP_METADATA_URL = "http://metadata.google.internal"
TOKEN_TTL_S = 21600


@dataclass(frozen=True)
class Notice:
    cloud: str
    detail: str
    seen_at: float


class NoticeSource(Protocol):
    cloud: str

    def poll(self) -> Notice | None: ...


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Metadata services are link-local: never go through an HTTP proxy from the environment."""


def _request(url: str, method: str, headers: dict[str, str], timeout_s: float) -> tuple[int, str]:
    """(status, body); 0 and the reason when nothing answered."""
    req = urllib.request.Request(url, method=method, headers=headers)
    try:
        with _DIRECT.open(req, timeout=timeout_s) as response:
            return int(response.status), response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code), ""
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


class AwsSpotNotice:
    """IMDSv2 spot instance-action poller; renews its token before it expires or on 401."""

    cloud = "aws"

    def __init__(self, base_url: str = AWS_METADATA_URL, timeout_s: float = 1.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._token: str | None = None
        self._token_expires = 0.0

    def _fetch_token(self) -> str | None:
        status, body = _request(
            f"{self.base_url}/latest/api/token",
            "PUT",
            {"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)},
            self.timeout_s,
        )
        if status != 200 or not body:
            return None
        self._token, self._token_expires = body.strip(), time.monotonic() + TOKEN_TTL_S - 60
        return self._token

    def available(self) -> bool:
        return self._fetch_token() is not None

    def poll(self) -> Notice | None:
        for _ in range(2):
            token = self._token if time.monotonic() < self._token_expires else self._fetch_token()
            if token is None:
                return None
            status, body = _request(
                f"{self.base_url}/latest/meta-data/spot/instance-action",
                "GET",
                {"X-aws-ec2-metadata-token": token},
                self.timeout_s,
            )
            if status == 401:  # token expired or revoked: get a new one and ask again
                self._token = None
                self._token_expires = 0.0
                continue
            if status == 200 and body.strip():
                try:
                    action = json.loads(body)
                    detail = f"{action.get('action', '?')} at {action.get('time', '?')}"
                except ValueError:
                    detail = body.strip()[:200]
                return Notice(self.cloud, detail, time.time())
            return None
        return None


class GcpPreemptedNotice:
    """GCP metadata ``instance/preempted`` poller."""

    cloud = "gcp"

    def __init__(self, base_url: str = GCP_METADATA_URL, timeout_s: float = 1.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def _read(self) -> tuple[int, str]:
        return _request(
            f"{self.base_url}/computeMetadata/v1/instance/preempted",
            "GET",
            {"Metadata-Flavor": "Google"},
            self.timeout_s,
        )

    def available(self) -> bool:
        return self._read()[0] == 200

    def poll(self) -> Notice | None:
        status, body = self._read()
        if status == 200 and body.strip().upper() == "TRUE":
            return Notice(self.cloud, "instance preempted", time.time())
        return None


def make_notice_source(cloud: str, metadata_url: str | None, timeout_s: float = 1.0) -> NoticeSource | None:
    """The poller for ``cloud`` (aws, gcp, auto, none); ``auto`` keeps the first that answers."""
    if cloud == "none":
        return None
    if cloud == "aws":
        return AwsSpotNotice(metadata_url or AWS_METADATA_URL, timeout_s)
    if cloud == "gcp":
        return GcpPreemptedNotice(metadata_url or GCP_METADATA_URL, timeout_s)
    if cloud == "auto":
        aws = AwsSpotNotice(metadata_url or AWS_METADATA_URL, timeout_s)
        if aws.available():
            return aws
        gcp = GcpPreemptedNotice(metadata_url or GCP_METADATA_URL, timeout_s)
        return gcp if gcp.available() else None
    raise UserError(f"unknown cloud '{cloud}' for preemption notices", "use one of: auto, aws, gcp, none")


def notice_signal(env: dict[str, str] | None = None) -> signal.Signals:
    """The signal named by GPUCTL_NOTICE_SIGNAL (e.g. SIGTERM or TERM), default SIGTERM."""
    name = (os.environ if env is None else env).get(ENV_NOTICE_SIGNAL, "").strip().upper()
    if not name:
        return DEFAULT_NOTICE_SIGNAL
    try:
        return signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
    except KeyError as exc:
        raise UserError(
            f"{ENV_NOTICE_SIGNAL}={name} is not a signal name", "use e.g. SIGTERM or SIGUSR1"
        ) from exc


class NoticeNotifier:
    """Delivers a notice once: signal to a PID (negative: a process group) and/or a notice file."""

    def __init__(
        self,
        notify_pid: int | None = None,
        notice_file: str | Path | None = None,
        sig: signal.Signals | None = None,
    ) -> None:
        self.notify_pid = notify_pid
        file = notice_file if notice_file is not None else os.environ.get(ENV_NOTICE_FILE)
        self.notice_file = Path(file) if file else None
        self.sig = sig if sig is not None else notice_signal()
        self.delivered: Notice | None = None

    def deliver(self, notice: Notice) -> list[str]:
        """Act on the notice (only the first time); returns what was done, for the log."""
        if self.delivered is not None:
            return []
        self.delivered = notice
        done = []
        if self.notice_file is not None:
            self.notice_file.parent.mkdir(parents=True, exist_ok=True)
            self.notice_file.write_text(json.dumps({"cloud": notice.cloud, "detail": notice.detail}) + "\n")
            done.append(f"wrote {self.notice_file}")
        if self.notify_pid:
            try:
                if self.notify_pid < 0:
                    os.killpg(-self.notify_pid, self.sig)
                else:
                    os.kill(self.notify_pid, self.sig)
                done.append(f"sent {self.sig.name} to {self.notify_pid}")
            except ProcessLookupError:
                done.append(f"process {self.notify_pid} is gone")
        return done


class NoticeWatcher:
    """Polls a notice source on a daemon thread every ``interval_s`` until a notice arrives."""

    def __init__(
        self,
        source: NoticeSource,
        notifier: NoticeNotifier,
        interval_s: float = 5.0,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.source = source
        self.notifier = notifier
        self.interval_s = interval_s
        self.log = log or (lambda _line: None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuctl-notice-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            notice = self.source.poll()
            if notice is not None:
                actions = self.notifier.deliver(notice)
                done = "; ".join(actions) or "no target"
                self.log(f"preemption notice ({notice.cloud}: {notice.detail}): {done}")
                return
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
