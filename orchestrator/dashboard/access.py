"""Who may read the dashboard: loopback by default, a token when bound elsewhere, and headers that keep
the pages to what they serve.

- :func:`needs_token`: an address other than loopback needs a token (``--token``, or generated and
  printed). :class:`TokenGate` checks it on every request, in constant time: ``?token=`` (answered
  with a cookie and a redirect to the same page without it), the cookie, or ``Authorization: Bearer``.
- :class:`HostCheck`: bound to loopback, a request must name a loopback host, so a web page that
  points its own host name at 127.0.0.1 (DNS rebinding) cannot read the dashboard.
- :class:`SecurityHeaders`: a Content-Security-Policy that allows only the dashboard's own scripts,
  styles and requests, no framing, no caching of job data.

These are plain ASGI middleware (Starlette imported only for its request and response types).
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import URL, QueryParams
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE = "gpuctl_dashboard_token"
MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")  # fmt: skip
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable only from this machine."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def needs_token(host: str) -> bool:
    return not is_loopback(host)


def new_token() -> str:
    return secrets.token_urlsafe(24)


def same_token(given: str | None, token: str) -> bool:
    """Constant-time comparison (of the UTF-8 bytes: a non-ASCII guess is compared, not refused early)."""
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), token.encode())


def _host_name(header: str) -> str:
    """The host of a ``Host`` header: ``[::1]:8765`` -> ``::1``, ``localhost:8765`` -> ``localhost``."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class HostCheck:
    """Refuse (400) a request whose ``Host`` is not one of ``allowed`` (names compared lowercased)."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(h.lower().strip("[]") for h in allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = _host_name(Request(scope).headers.get("host", "")).lower()
            if host not in self.allowed:
                response = PlainTextResponse(
                    f"gpuctl dashboard: host {host!r} is not served here; open it as http://127.0.0.1:PORT/",
                    status_code=400,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class TokenGate:
    """Every HTTP request must carry ``token`` (query, cookie or bearer header); else 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token")
        if given is not None and same_token(given, self.token):
            # remember it in a cookie and drop it from the address (history, screenshots)
            response: Any = RedirectResponse(_without_token(request.url), status_code=303)
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict", path="/")
            await response(scope, receive, send)
            return
        bearer = request.headers.get("authorization", "")
        if same_token(request.cookies.get(COOKIE), self.token) or (
            bearer.startswith("Bearer ") and same_token(bearer[7:], self.token)
        ):
            await self.app(scope, receive, send)
            return
        response = PlainTextResponse(
            "gpuctl dashboard: this address needs the token that `gpuctl dashboard` printed: open the "
            "address it printed (it ends in ?token=...)",
            status_code=401,
        )
        await response(scope, receive, send)


def _without_token(url: URL) -> str:
    """The path and query of ``url`` without its ``token`` parameter (a relative redirect)."""
    params = [(k, v) for k, v in QueryParams(url.query).multi_items() if k != "token"]
    return url.path + (f"?{urlencode(params)}" if params else "")


class SecurityHeaders:
    """Adds :data:`HEADERS` to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []), *(h for h in HEADERS if h[0] not in names)]
            await send(message)

        await self.app(scope, receive, with_headers)
