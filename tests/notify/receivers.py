"""Loopback receivers for the notification tests: an HTTP webhook receiver, an SMTP server (aiosmtpd), and
tricklers (a server that answers one byte at a time, for ever).

Fixtures: import them into a test module or conftest (``from tests.notify.receivers import webhook_fixture``)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from aiosmtpd.controller import Controller as SmtpController
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword


@dataclass
class WebhookReceiver:
    """Records every POST; answers ``status`` (change it to make the receiver fail)."""

    url: str
    status: int = 200
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    """The ``Host`` header of each request."""
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.requests) >= count, timeout), self.requests
            return list(self.requests)


@pytest.fixture(name="webhook")
def webhook_fixture() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(receiver.status)
            self.end_headers()
            with receiver.arrived:
                receiver.paths.append(self.path)
                receiver.hosts.append(self.headers["Host"])
                receiver.requests.append(json.loads(body))
                receiver.arrived.notify_all()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/T0/SECRETPATH"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield receiver
    server.shutdown()
    server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(name="down_url")
def down_url_fixture() -> str:
    """A webhook URL nothing listens on."""
    return f"http://127.0.0.1:{free_port()}/hook"


@dataclass
class SmtpReceiver:
    port: int
    mails: list[tuple[Envelope, Message]] = field(default_factory=list)
    logins: list[tuple[str, str]] = field(default_factory=list)
    password: str = "s3cret-pw"
    """The password it accepts."""
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[tuple[Envelope, Message]]:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.mails) >= count, timeout), self.mails
            return list(self.mails)


@pytest.fixture(name="smtp")
def smtp_fixture() -> Iterator[SmtpReceiver]:
    receiver = SmtpReceiver(port=free_port())

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Envelope) -> str:
            with receiver.arrived:
                receiver.mails.append((envelope, message_from_bytes(envelope.content or b"")))
                receiver.arrived.notify_all()
            return "250 OK"

    def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        assert isinstance(data, LoginPassword)
        receiver.logins.append((data.login.decode(), data.password.decode()))
        return AuthResult(success=data.password == receiver.password.encode(), handled=False)  # failure: 535

    controller = SmtpController(
        Handler(), hostname="127.0.0.1", port=receiver.port, authenticator=authenticate,
        auth_require_tls=False,
    )  # fmt: skip
    controller.start()
    yield receiver
    controller.stop()


@dataclass
class Trickler:
    """A TCP server that, on each connection, sends ``lines`` one byte every ``every_s`` seconds and then
    one more byte at that pace, for ever (until the client goes or the test ends)."""

    port: int
    lines: bytes
    every_s: float = 0.2
    sent: int = 0
    """Bytes sent, all connections together."""
    connections: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def serve(self, conn: socket.socket) -> None:
        with conn:
            data = self.lines + b"x" * 10_000_000
            for i in range(len(data)):
                if self.stop.wait(self.every_s):
                    return
                try:
                    conn.sendall(data[i : i + 1])
                except OSError:
                    return
                self.sent += 1


def _trickle(lines: bytes) -> Iterator[Trickler]:
    server = socket.create_server(("127.0.0.1", 0))
    trickler = Trickler(int(server.getsockname()[1]), lines)

    def accept() -> None:
        while not trickler.stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            trickler.connections += 1
            threading.Thread(target=trickler.serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield trickler
    trickler.stop.set()
    server.close()


@pytest.fixture(name="http_trickler")
def http_trickler_fixture() -> Iterator[Trickler]:
    """An HTTP server that answers a status line and then a header without end, one byte at a time."""
    yield from _trickle(b"HTTP/1.1 200 OK\r\nX-Slow: ")


@pytest.fixture(name="smtp_trickler")
def smtp_trickler_fixture() -> Iterator[Trickler]:
    """An SMTP server whose greeting never ends, one byte at a time."""
    yield from _trickle(b"220 ")
