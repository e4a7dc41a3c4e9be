"""The network side of a delivery: resolve a host once, check every address, connect to a checked one,
all under one deadline.

A webhook URL or an SMTP host comes from whoever submits a job (or from a secret they control), so
where gpuctl connects is checked on the addresses it really connects to:

* :func:`checked_addresses` resolves the host **once** and refuses it when any address is a
  link-local or cloud metadata address (:func:`refused`), also when written inside an IPv6 address
  (IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4, IPv4-compatible);
* :func:`connect` connects to those addresses and no others: nothing resolves the name a second
  time between the check and the connection (TLS still sends the host name for SNI and checks the
  certificate against it; HTTP still sends it as ``Host``).

:class:`Deadline` bounds a whole delivery by the wall clock: a server that answers one byte at a time
cannot hold it longer, whatever each read's own timeout.

Errors (:class:`DeliveryError`) are written from fixed words (:func:`reason`), never from an
exception's text, which may quote a host name, a URL or a server's answer.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Address = tuple[socket.AddressFamily, socket.SocketKind, int, Any]
"""One ``getaddrinfo`` answer: family, socket type, protocol, socket address."""

REFUSED_NETWORKS: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "169.254.0.0/16",  # link-local: the metadata service of AWS, GCP, Azure, OCI, ...
        "fe80::/10",  # IPv6 link-local
        "fd00:ec2::/32",  # AWS's IPv6 instance services (metadata at fd00:ec2::254, DNS, NTP)
        "100.100.100.200/32",  # Alibaba Cloud's metadata service
    )
)
"""Never connected to: where cloud metadata services (instance credentials) answer."""

_LAST_32_BITS = (
    ipaddress.ip_network("64:ff9b::/96"),  # NAT64, well-known prefix
    ipaddress.ip_network("64:ff9b:1::/48"),  # NAT64, local use
    ipaddress.ip_network("::/96"),  # IPv4-compatible (deprecated)
)
_VERIFY_CODES = {
    10: "it has expired",
    18: "it is self-signed",
    19: "its chain ends in a self-signed certificate",
    20: "its issuer is not trusted",
    62: "it is not for this host name",
}
_OPENSSL_CODE = re.compile(r"[A-Z0-9_]{1,64}")


class DeliveryError(Exception):
    """A notification could not be sent. ``permanent``: trying again cannot help (a 404, a bad URL).
    ``what`` is safe to record (a job event, a log line): never a secret, a URL's path or an answer."""

    def __init__(self, what: str, permanent: bool = False) -> None:
        super().__init__(what)
        self.what = what
        self.permanent = permanent


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address leads to, when it carries one (mapped, NAT64, 6to4, compatible)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if int(address) > 1 and any(address in net for net in _LAST_32_BITS):  # not :: nor ::1
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refused(address: IPAddress) -> bool:
    """Link-local, multicast, unspecified or a metadata address (:data:`REFUSED_NETWORKS`), directly or
    as the IPv4 address inside an IPv6 one. Loopback and private addresses are allowed (a relay)."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        if inner is not None and refused(inner):
            return True
    return (
        address.is_link_local
        or address.is_multicast
        or address.is_unspecified
        or any(address in net for net in REFUSED_NETWORKS)
    )


def checked_addresses(host: str, port: int, subject: str) -> list[Address]:
    """Every address ``host`` resolves to (one lookup), after checking each; ``subject`` names the host in
    errors (for example "the webhook's host": a host taken from a secret is never named)."""
    try:
        answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as err:
        raise DeliveryError(f"{subject} could not be resolved ({reason(err)})") from None
    if not answers:
        raise DeliveryError(f"{subject} could not be resolved (no address)")
    for *_, sockaddr in answers:
        if refused(ipaddress.ip_address(str(sockaddr[0]).partition("%")[0])):
            raise DeliveryError(
                f"{subject} is or resolves to a link-local or cloud metadata address, which gpuctl never "
                "connects to (to fix: use a host on a routable or private network)",
                permanent=True,
            )
    return [(family, kind, proto, sockaddr) for family, kind, proto, _name, sockaddr in answers]


class Deadline:
    """The wall-clock limit of one delivery. When it passes, every socket it :meth:`watch` es is shut
    down, so a blocked connect, read or write returns at once; :attr:`expired` tells why."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._ends = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._watched: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._timer.cancel()
        with self._lock:
            watched, self._watched = self._watched, []
        for sock in watched:
            sock.close()

    def remaining(self) -> float:
        return max(0.0, self._ends - time.monotonic())

    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` down at the deadline (through a duplicate of it: an SSL wrapper takes the original)."""
        with self._lock:
            if self.expired:
                raise TimeoutError("the deadline passed")
            self._watched.append(sock.dup())

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._watched:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def connect(addresses: Sequence[Address], timeout_s: float, deadline: Deadline) -> socket.socket:
    """A connection to the first of ``addresses`` that answers (and never to another address)."""
    last: OSError = TimeoutError("no address")
    for family, kind, proto, sockaddr in addresses:
        sock = socket.socket(family, kind, proto)
        try:
            deadline.watch(sock)
            sock.settimeout(max(0.01, min(timeout_s, deadline.remaining())))
            sock.connect(sockaddr)
            sock.settimeout(timeout_s)
            return sock
        except OSError as err:
            last = err
            sock.close()
    raise last


def reason(err: BaseException) -> str:
    """What went wrong, in fixed words (an exception's own text may quote a host name or a server)."""
    if isinstance(err, ssl.SSLCertVerificationError):
        why = _VERIFY_CODES.get(getattr(err, "verify_code", None) or 0)
        return (
            f"its TLS certificate was not accepted: {why}" if why else "its TLS certificate was not accepted"
        )
    if isinstance(err, ssl.SSLError):
        code = getattr(err, "reason", None)
        code = code if isinstance(code, str) and _OPENSSL_CODE.fullmatch(code) else None
        return f"TLS failed: {code}" if code else "TLS failed"
    if isinstance(err, TimeoutError):
        return "no answer in time"
    if isinstance(err, socket.gaierror):
        missing = (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME))
        return "no such host" if err.errno in missing else "the lookup failed"
    if isinstance(err, http.client.RemoteDisconnected | http.client.IncompleteRead):
        return "the connection was closed before a complete answer"
    if isinstance(err, http.client.HTTPException):
        return "the answer was not HTTP"
    if isinstance(err, OSError) and isinstance(err.errno, int) and err.errno > 0:
        return os.strerror(err.errno).lower()
    if isinstance(err, ConnectionError | EOFError):
        return "the connection was closed"
    if isinstance(err, UnicodeError):
        return "a name that is not valid"
    return type(err).__name__
