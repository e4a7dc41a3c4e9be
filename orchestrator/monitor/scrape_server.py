"""A small HTTP server for Prometheus scrapes that held-open connections cannot exhaust.

prometheus_client's ``start_http_server`` starts a thread per connection and never times one out, so
idle connections pile up threads without bound. Here one thread waits on every open connection at once
(``selectors``) until its request head has arrived, and only then hands it to a fixed pool of worker
threads that render the registry and answer. A connection that has not sent its head within
``timeout_s`` of being accepted is closed unanswered; beyond ``max_pending`` open connections the
oldest is closed. Idle or slow clients thus hold no worker, threads stay at ``workers + 1``, and a
scrape is answered as soon as its request is in, however many connections sit idle.

Every request (GET or HEAD, any path) gets the registry in the text exposition format and
``Connection: close``.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

MAX_HEAD_BYTES = 16 * 1024
"""Longest request line plus headers read; a longer head is refused."""
POLL_S = 0.25
"""Longest wait of the connection thread before it looks at deadlines and at closing again."""


@dataclass
class _Pending:
    conn: socket.socket
    deadline: float
    head: bytes = field(default=b"")


class ScrapeServer:
    """Serves ``registry`` on ``addr:port`` (port 0: any free one) with ``workers`` threads."""

    def __init__(
        self,
        registry: CollectorRegistry,
        port: int,
        addr: str = "127.0.0.1",
        *,
        workers: int = 4,
        timeout_s: float = 5.0,
        max_pending: int = 256,
    ) -> None:
        self.registry = registry
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        self._listener = socket.create_server((addr, port), family=family, backlog=128)
        self._listener.setblocking(False)
        self.port = int(self._listener.getsockname()[1])
        self._pending: dict[socket.socket, _Pending] = {}  # insertion order: oldest first
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="metrics-worker")
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-connections", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closing.set()
        self._thread.join(timeout=POLL_S * 4 + 1)
        self._pool.shutdown(wait=True, cancel_futures=True)
        for pending in list(self._pending.values()):
            pending.conn.close()
        self._pending.clear()
        self._selector.close()
        self._listener.close()

    def _loop(self) -> None:
        while not self._closing.is_set():
            for key, _ in self._selector.select(timeout=POLL_S):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    self._accept()
                else:
                    self._read(sock)
            now = time.monotonic()
            for sock in [s for s, p in self._pending.items() if p.deadline <= now]:
                self._drop(sock)

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while True:
                conn, _ = self._listener.accept()
                conn.setblocking(False)
                if len(self._pending) >= self.max_pending:
                    self._drop(next(iter(self._pending)))  # the oldest waits longest for nothing
                self._pending[conn] = _Pending(conn, time.monotonic() + self.timeout_s)
                self._selector.register(conn, selectors.EVENT_READ)

    def _drop(self, sock: socket.socket) -> None:
        self._selector.unregister(sock)
        del self._pending[sock]
        sock.close()

    def _read(self, sock: socket.socket) -> None:
        pending = self._pending[sock]
        try:
            chunk = sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        pending.head += chunk
        if not chunk or len(pending.head) > MAX_HEAD_BYTES:
            self._drop(sock)
        elif b"\r\n\r\n" in pending.head or b"\n\n" in pending.head:
            self._selector.unregister(sock)
            del self._pending[sock]
            self._pool.submit(self._answer, sock, pending.head)

    def _answer(self, conn: socket.socket, head: bytes) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(self.timeout_s)  # a client that does not read cannot hold the worker longer
            parts = head.split(b"\n", 1)[0].split()
            if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
                _respond(conn, "400 Bad Request", b"bad request\n")
            elif parts[0] not in (b"GET", b"HEAD"):
                _respond(conn, "405 Method Not Allowed", b"only GET and HEAD\n")
            else:
                body = generate_latest(self.registry)
                _respond(conn, "200 OK", body, CONTENT_TYPE_LATEST, send_body=parts[0] == b"GET")


def _respond(
    conn: socket.socket,
    status: str,
    body: bytes,
    content_type: str = "text/plain; charset=utf-8",
    send_body: bool = True,
) -> None:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode("ascii")
    conn.sendall(head + body if send_body else head)
