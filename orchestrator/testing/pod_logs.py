"""Pod logs for kmock's emulated API server, which has none: ``GET .../pods/NAME/log`` served at HTTP level.

Like the kubelet behind a real API server: a line is kept with the time it was logged, ``container`` is
required (the gpuctl pods have two), ``sinceSeconds`` returns the lines logged since then,
``timestamps=true`` heads each line with that time and a space (RFC 3339 in UTC, nanoseconds always
nine digits: ``2026-11-26T07:29:11.859000000Z step 4``, as the kubelet writes them), and the body
is ``text/plain``. Not modelled: log rotation, ``previous``, ``sinceTime``, ``tailLines``, ``limitBytes``,
streams, and a 400 for a container that has not started.

Needs kmock (the ``testing`` extra); :mod:`orchestrator.testing.kube_api` installs it on its emulator.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from orchestrator.extras import require

kmock = require("kmock", "the simulated Kubernetes cluster of orchestrator.testing")

LOG_PATH = re.compile(r"/api/v1/namespaces/[^/]+/pods/[^/]+/log")


@dataclass
class FakePodLogs:
    lines: defaultdict[tuple[str, str, str], list[tuple[float, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    """(namespace, pod, container) -> (logged at, line), oldest first."""
    requests: list[dict[str, str]] = field(default_factory=list)
    """Query parameters of each request, with ``pod`` and ``namespace`` added."""
    failing: set[str] = field(default_factory=set)
    """Pods whose log requests get a 500 (an API server or kubelet in trouble)."""
    clock: Callable[[], float] = time.time
    """The kubelet's clock (UNIX seconds): when a line is logged, and what ``sinceSeconds`` counts from."""

    def install(self, emulator: Any) -> None:
        emulator["get", LOG_PATH] << self.serve

    def write(self, namespace: str, pod: str, container: str, text: str, at: float | None = None) -> None:
        for line in text.splitlines():
            self.lines[(namespace, pod, container)].append((self.clock() if at is None else at, line))

    def serve(self, request: Any) -> Any:
        params = dict(request.params)
        self.requests.append({**params, "pod": str(request.name), "namespace": str(request.namespace)})
        if request.name in self.failing:
            return _status(500, f"Get https://node:10250/containerLogs/{request.name}: connection refused")
        container = params.get("container")
        if not container:
            return _status(400, f"a container name must be specified for pod {request.name}")
        since = params.get("sinceSeconds")
        oldest = self.clock() - int(since) if since is not None else float("-inf")
        logged = self.lines.get((str(request.namespace), str(request.name), container), [])
        timed = params.get("timestamps", "false").lower() in ("true", "1", "t")
        body = "".join(
            f"{api_time(at) + ' ' if timed else ''}{line}\n" for at, line in logged if at >= oldest
        )
        return kmock.Response(status=200, payload=body.encode(), headers={"Content-Type": "text/plain"})


def api_time(at: float) -> str:
    """``at`` (UNIX seconds) as the kubelet heads a log line: RFC 3339 in UTC, to the nanosecond."""
    seconds, micros = divmod(round(at * 1_000_000), 1_000_000)  # a float holds no nanoseconds
    return f"{datetime.fromtimestamp(seconds, UTC):%Y-%m-%dT%H:%M:%S}.{micros * 1000:09d}Z"


def _status(code: int, message: str) -> Any:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                            "reason": "BadRequest" if code == 400 else "InternalError", "code": code}  # fmt: skip
    return kmock.Response(status=code, payload=body)
