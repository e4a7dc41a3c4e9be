"""The sidecar's push of its records to the Kubernetes operator's intake (stdlib only).

On Kubernetes the sidecar prints window summaries and progress lines on stdout (its container log,
which the operator reads after a restart, or when a monitor stops pushing). With an intake configured
(:data:`ENV_INTAKE_URL`, :data:`ENV_INTAKE_TOKEN`, set on the pod by the operator) it also POSTs every
line it prints to the operator, so that the operator needs no log read per pod per pass.

Wire format (the operator's :mod:`orchestrator.backends.kubernetes.intake` is the other side): ``POST`` of a JSON
object ``{"jobUid", "pod", "podUid", "lines": [str, ...]}`` with ``Authorization: Bearer TOKEN`` (the
token is the GPUJob's, derived by the operator from its key and the GPUJob's uid). Lines are sent
oldest first, at most :data:`MAX_LINES_PER_POST` per request; a post the operator refuses (4xx) is
dropped, one it could not take (no answer, 5xx) is sent again later. At most :data:`MAX_QUEUED_LINES`
wait; older ones are dropped (they stay in the log, which the operator reads when it needs to). With
nothing to send, an empty post every :data:`HEARTBEAT_S` tells the operator the monitor still pushes.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

ENV_INTAKE_URL = "GPUCTL_INTAKE_URL"
ENV_INTAKE_TOKEN = "GPUCTL_INTAKE_TOKEN"
ENV_JOB_UID = "GPUCTL_JOB_UID"
ENV_POD_NAME = "GPUCTL_POD_NAME"
ENV_POD_UID = "GPUCTL_POD_UID"
INTAKE_PATH = "/v1/monitor-records"
MAX_LINES_PER_POST = 256
MAX_LINE_CHARS = 16384
"""Longer lines are not pushed (the operator refuses them); they stay in the log."""
MAX_QUEUED_LINES = 4096
HEARTBEAT_S = 60.0
POST_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class PushTarget:
    """Where and as whom to push: the intake's URL, the GPUJob's token and uid, the pod's name and uid."""

    url: str
    token: str
    job_uid: str
    pod: str
    pod_uid: str

    @classmethod
    def from_env(cls, env: dict[str, str]) -> PushTarget | None:
        """The target the operator put in the pod's environment; None when any part is missing."""
        names = (ENV_INTAKE_URL, ENV_INTAKE_TOKEN, ENV_JOB_UID, ENV_POD_NAME, ENV_POD_UID)
        values = [env.get(name, "").strip() for name in names]
        if not all(values):
            return None
        url, token, job_uid, pod, pod_uid = values
        return cls(url.rstrip("/") + INTAKE_PATH, token, job_uid, pod, pod_uid)


class Pusher:
    """Queues the lines the sidecar prints and posts them (:meth:`send` from the sidecar's loop)."""

    def __init__(
        self,
        target: PushTarget,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] = lambda _line: None,
    ) -> None:
        self.target, self.clock, self.log = target, clock, log
        self.queue: deque[str] = deque(maxlen=MAX_QUEUED_LINES)
        self.lock = threading.Lock()
        self.last_sent: float | None = None
        self.failures = 0

    def add(self, line: str) -> None:
        line = line.rstrip("\n")
        if line.strip() and len(line) <= MAX_LINE_CHARS:
            with self.lock:
                self.queue.append(line)

    def due(self) -> bool:
        with self.lock:
            waiting = bool(self.queue)
        return waiting or self.last_sent is None or self.clock() - self.last_sent >= HEARTBEAT_S

    def send(self) -> bool:
        """Post what waits (or a heartbeat when due); True when the operator took it or nothing was due."""
        while self.due():
            with self.lock:
                batch = [self.queue[i] for i in range(min(len(self.queue), MAX_LINES_PER_POST))]
            status = self._post(batch)
            if status is None or status >= 500 or status == 429:
                self.failures += 1
                if self.failures in (1, 10) or self.failures % 100 == 0:
                    self.log(f"push to the operator failed ({self.failures} time(s)); retrying")
                return False
            if status >= 400:
                self.log(f"the operator refused pushed records (HTTP {status}); they stay in the log")
            self.failures = 0
            self.last_sent = self.clock()
            with self.lock:
                for _ in batch:
                    self.queue.popleft()
            if not batch:
                break
        return True

    def _post(self, lines: list[str]) -> int | None:
        t = self.target
        body = json.dumps({"jobUid": t.job_uid, "pod": t.pod, "podUid": t.pod_uid, "lines": lines})
        request = urllib.request.Request(
            t.url,
            data=body.encode("utf-8"),
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {t.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=POST_TIMEOUT_S) as response:
                return int(response.status)
        except urllib.error.HTTPError as err:
            return int(err.code)
        except (OSError, ValueError):  # refused, unreachable, timed out; a bad URL
            return None


class PushThread:
    """Sends the pusher's lines from a thread of its own, every ``interval_s``, so that a slow or absent
    operator never holds up sampling; :meth:`stop` makes one last attempt."""

    def __init__(self, pusher: Pusher, interval_s: float = 1.0) -> None:
        self.pusher, self.interval_s = pusher, interval_s
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="gpuctl-push", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            self.pusher.send()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(POST_TIMEOUT_S * 2)
        self.pusher.send()


class TeeStream:
    """A text stream that writes through to ``out`` (the container log) and queues each whole line
    for the pusher: the operator gets exactly what the log holds."""

    def __init__(self, out: TextIO, pusher: Pusher) -> None:
        self.out, self.pusher, self.partial = out, pusher, ""

    def write(self, text: str) -> int:
        written = self.out.write(text)
        *lines, self.partial = (self.partial + text).split("\n")
        for line in lines:
            self.pusher.add(line)
        return written

    def flush(self) -> None:
        self.out.flush()
