"""Where a notification connects is checked on the address connected to: a host is resolved once, every
address it has is checked (also an IPv4 address inside an IPv6 one), and the connection goes to the
checked address, for webhooks and SMTP servers alike. No test here reaches the network: literals, and
a resolver replaced by the test."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from orchestrator.notify import DeliveryError, Notification, Sender, senders
from orchestrator.notify.network import refused
from orchestrator.spec.notify import NotifyEvent, NotifyTarget
from tests.notify.delivery import no_secrets
from tests.notify.receivers import SmtpReceiver, WebhookReceiver

NOTE = Notification(job="j-1", team="ml", user="ana", event=NotifyEvent.FAILED, kind="transition",
                    message="m", time=datetime(2026, 3, 1, tzinfo=UTC))  # fmt: skip
METADATA_FORMS = [
    "169.254.169.254",  # AWS, GCP, Azure, OCI
    "::ffff:169.254.169.254",  # IPv4-mapped
    "::ffff:a9fe:a9fe",
    "64:ff9b::169.254.169.254",  # NAT64, well-known prefix
    "64:ff9b::a9fe:a9fe",
    "64:ff9b:1::a9fe:a9fe",  # NAT64, local use
    "2002:a9fe:a9fe::1",  # 6to4
    "::169.254.169.254",  # IPv4-compatible
    "fd00:ec2::254",  # AWS IPv6 metadata
    "100.100.100.200",  # Alibaba Cloud metadata
    "fe80::1",
    "169.254.0.1",
    "0.0.0.0",
    "::",
    "ff02::1",
    "224.0.0.1",
]


def url_for(address: str) -> str:
    return f"http://[{address}]/x" if ":" in address else f"http://{address}/x"


def email_via(host: str, port: int = 25) -> NotifyTarget:
    return NotifyTarget(email={"to": ["ana@example.com"], "from": "gpuctl@example.com", "host": host,
                               "port": port, "starttls": False})  # fmt: skip


@pytest.fixture
def no_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a refused address was connected to")

    monkeypatch.setattr(socket, "socket", never)
    monkeypatch.setattr(socket, "create_connection", never)


def fake_resolver(monkeypatch: pytest.MonkeyPatch, *answers: list[str], port: int = 80) -> list[str]:
    """``socket.getaddrinfo`` answering the n-th call with ``answers[n]`` (its addresses); returns the
    names asked, one per call."""
    asked: list[str] = []

    def getaddrinfo(host: str, port_: Any, *args: Any, **kwargs: Any) -> list[Any]:
        asked.append(host)
        result = []
        for address in answers[min(len(asked), len(answers)) - 1]:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sockaddr = (address, int(port_), 0, 0) if ":" in address else (address, int(port_))
            result.append((family, socket.SOCK_STREAM, 6, "", sockaddr))
        return result

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


@pytest.mark.parametrize("address", METADATA_FORMS)
def test_every_form_of_a_refused_address_is_refused(address: str) -> None:
    assert refused(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "10.0.0.5", "192.168.1.2", "fd12::1", "8.8.8.8",
                                     "2606:4700::1111", "64:ff9b::808:808", "::ffff:10.0.0.5"])  # fmt: skip
def test_loopback_private_and_public_addresses_are_allowed(address: str) -> None:
    assert not refused(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", METADATA_FORMS)
def test_a_webhook_at_a_refused_address_literal_is_never_connected_to(
    address: str, no_connections: None
) -> None:
    with pytest.raises(DeliveryError) as err:
        Sender(no_secrets).send(NotifyTarget(webhook=url_for(address)), NOTE)
    assert "link-local or cloud metadata address" in err.value.what and err.value.permanent


@pytest.mark.parametrize("address", ["::ffff:169.254.169.254", "169.254.169.254", "fd00:ec2::254"])
def test_an_smtp_server_at_a_refused_address_literal_is_never_connected_to(
    address: str, no_connections: None
) -> None:
    with pytest.raises(DeliveryError) as err:
        Sender(no_secrets).send(email_via(f"[{address}]"), NOTE)
    assert "the SMTP server" in err.value.what and "cloud metadata address" in err.value.what


@pytest.mark.parametrize("answers", [["169.254.169.254"], ["127.0.0.1", "::ffff:169.254.169.254"],
                                     ["fd00:ec2::254"], ["64:ff9b::a9fe:a9fe"]])  # fmt: skip
@pytest.mark.parametrize("kind", ["webhook", "smtp"])
def test_a_host_resolving_to_a_refused_address_is_refused(
    answers: list[str], kind: str, monkeypatch: pytest.MonkeyPatch, no_connections: None
) -> None:
    asked = fake_resolver(monkeypatch, answers)
    target = (
        NotifyTarget(webhook="https://hooks.metadata.zz/x") if kind == "webhook" else email_via("smtp.zz")
    )
    with pytest.raises(DeliveryError) as err:
        Sender(no_secrets).send(target, NOTE)
    assert "cloud metadata address" in err.value.what and err.value.permanent
    assert len(asked) == 1


def test_a_webhook_goes_to_the_address_checked_and_the_name_is_asked_once(
    webhook: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = int(webhook.url.split(":")[2].split("/")[0])
    asked = fake_resolver(monkeypatch, ["127.0.0.1"], ["169.254.169.254"])  # a rebinding resolver
    Sender(no_secrets).send(NotifyTarget(webhook=f"http://hook.zz:{port}/hooks/x"), NOTE)
    webhook.wait_for(1)
    assert asked == ["hook.zz"]  # the second answer was never asked for
    assert webhook.hosts == [f"hook.zz:{port}"]  # the name still goes in Host


def test_an_smtp_server_goes_to_the_address_checked_and_the_name_is_asked_once(
    smtp: SmtpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = fake_resolver(monkeypatch, ["127.0.0.1"], ["169.254.169.254"])
    Sender(no_secrets).send(email_via("smtp.zz", smtp.port), NOTE)
    smtp.wait_for(1)
    assert asked == ["smtp.zz"]


def _certificates(tmp_path: Path, name: str) -> tuple[Path, Path, Path]:
    """A test CA (its certificate) and a server certificate for ``name`` with its key."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def build(subject: str, key: Any, issuer: str, issuer_key: Any, ca: bool) -> Any:
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )  # fmt: skip
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False
            )
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = build("gpuctl test CA", ca_key, "gpuctl test CA", ca_key, True)
    cert = build(name, key, "gpuctl test CA", ca_key, False)
    paths = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return paths


@pytest.fixture
def tls_webhook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, list[str]]]:
    """An HTTPS receiver on loopback whose certificate is for ``hook.zz`` (trusted by the sender through a
    test CA); yields its port and the server names (SNI) clients sent."""
    ca, cert, key = _certificates(tmp_path, "hook.zz")
    trusted = ssl.create_default_context(cafile=str(ca))
    monkeypatch.setattr(senders, "_tls_context", lambda: trusted)
    names: list[str] = []
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    server_context.sni_callback = lambda sock, name, ctx: names.append(str(name)) and None  # type: ignore[func-returns-value]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = server_context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1]), names
    server.shutdown()
    server.server_close()


def test_https_checks_the_certificate_against_the_host_name_not_the_address(
    tls_webhook: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, names = tls_webhook
    asked = fake_resolver(monkeypatch, ["127.0.0.1"])
    Sender(no_secrets).send(NotifyTarget(webhook=f"https://hook.zz:{port}/x"), NOTE)
    assert names == ["hook.zz"] and asked == ["hook.zz"]
    with pytest.raises(DeliveryError) as err:  # the same server under another name: refused
        Sender(no_secrets).send(NotifyTarget(webhook=f"https://other.zz:{port}/x"), NOTE)
    assert "TLS certificate was not accepted: it is not for this host name" in err.value.what
