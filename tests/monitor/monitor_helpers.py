"""Shared helpers for the monitor tests."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from orchestrator.monitor.samples import GpuSample

DATA = Path(__file__).resolve().parents[1] / "data" / "monitor"
H100X8 = DATA / "h100x8_synthetic.jsonl"
GIB = 2**30


def make_sample(
    time: float, gpu: int = 0, util: float = 50.0, mem_gib: float = 10.0, **extra: object
) -> GpuSample:
    fields: dict[str, object] = {
        "time": time,
        "gpu": gpu,
        "uuid": f"GPU-test-{gpu}",
        "model": "NVIDIA H100 80GB HBM3",
        "util_pct": util,
        "mem_used_bytes": int(mem_gib * GIB),
        "mem_total_bytes": 80 * GIB,
        "power_w": 300.0,
        "sm_clock_mhz": 1980.0,
        "temp_c": 50.0,
    }
    fields.update(extra)
    return GpuSample(**fields)  # type: ignore[arg-type]


ACTION = {"action": "terminate", "time": "2026-11-22T06:30:00Z"}


class FakeMetadata(ThreadingHTTPServer):
    """IMDSv2 (token required) and GCP metadata (Metadata-Flavor required) in one server."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.notice = False
        self.tokens: set[str] = set()
        self.token_requests = 0
        self.unauthorized = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeMetadata

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: str = "") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:
        if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self._send(400)
        self.server.token_requests += 1
        token = f"token-{self.server.token_requests}"
        self.server.tokens.add(token)
        return self._send(200, token)

    def do_GET(self) -> None:
        if self.path == "/latest/meta-data/spot/instance-action":
            if self.headers.get("X-aws-ec2-metadata-token") not in self.server.tokens:
                self.server.unauthorized += 1
                return self._send(401)
            return self._send(200, json.dumps(ACTION)) if self.server.notice else self._send(404, "Not Found")
        if self.path == "/computeMetadata/v1/instance/preempted":
            if self.headers.get("Metadata-Flavor") != "Google":
                return self._send(403)
            return self._send(200, "TRUE" if self.server.notice else "FALSE")
        return self._send(404)
