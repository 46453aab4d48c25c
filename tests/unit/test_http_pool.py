"""The pooled HTTP client: connections kept between requests, the redirect policy (never with a
credential or a body), and failures that name what went wrong but never the URL."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from hermes_gateway import http_pool
from hermes_gateway.errors import PermanentError, TransientError
from hermes_gateway.platforms.base import HttpClient
from hermes_gateway.providers.openai_compat import OpenAICompatProvider
from hermes_gateway.providers.retry import RetryPolicy


@dataclass
class Seen:
    path: str
    method: str
    client_port: int
    headers: dict[str, str]
    body: bytes


@dataclass
class KeepAliveServer:
    """HTTP/1.1 on loopback, keeping connections open (the fakes of the platform tests close them)."""

    seen: list[Seen] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> KeepAliveServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # the headers and the body leave without waiting for an ack

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                owner.seen.append(Seen(self.path, self.command, self.client_address[1], headers, body))
                if self.path.startswith("/redirect"):
                    self._write(302, b"", {"Location": "/landed"})
                elif self.path == "/slow":
                    threading.Event().wait(1.0)
                    self._write(200, b"{}")
                else:
                    self._write(200, b'{"ok": true}', {"X-Thing": "1"})

            def _write(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server() -> Iterator[KeepAliveServer]:
    running = KeepAliveServer().start()
    yield running
    running.stop()


def test_a_second_request_to_the_same_host_reuses_the_connection(server: KeepAliveServer) -> None:
    # Given a platform client that has sent one request
    client = HttpClient(server.url, platform="test", timeout=2.0)
    client.request("POST", "/one", json_body={"a": 1})
    # When it sends the next ones
    client.request("POST", "/two", json_body={"a": 2})
    HttpClient(server.url, platform="other", timeout=2.0).request("GET", "/three")
    # Then they all went over one connection (one client port), with no new handshake
    assert [s.path for s in server.seen] == ["/one", "/two", "/three"]
    assert len({s.client_port for s in server.seen}) == 1


def test_a_connection_idle_too_long_is_not_used_again(server: KeepAliveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # (the platform may have closed it while the instance was frozen, without this side seeing it)
    http_pool.send("GET", server.url + "/one", timeout=2.0)
    monkeypatch.setattr(http_pool, "MAX_IDLE_SECONDS", 0.0)
    http_pool.send("GET", server.url + "/two", timeout=2.0)
    assert len({s.client_port for s in server.seen}) == 2


def test_headers_of_an_answer_are_found_by_any_case(server: KeepAliveServer) -> None:
    reply = http_pool.send("GET", server.url + "/x", timeout=2.0)
    assert (reply.status, reply.headers.get("x-thing"), reply.headers.get("X-THING")) == (200, "1", "1")


def test_a_redirect_is_not_followed_when_the_request_carries_a_credential(server: KeepAliveServer) -> None:
    reply = http_pool.send("GET", server.url + "/redirect", headers={"Authorization": "Bearer t"}, timeout=2.0)
    assert reply.status == 302
    assert [s.path for s in server.seen] == ["/redirect"]


def test_a_redirect_is_not_followed_for_a_request_with_a_body(server: KeepAliveServer) -> None:
    reply = http_pool.send("POST", server.url + "/redirect", body=b"client_secret=s", timeout=2.0)
    assert reply.status == 302
    assert [s.path for s in server.seen] == ["/redirect"]


def test_a_redirect_of_a_plain_get_is_followed(server: KeepAliveServer) -> None:
    # (a JWKS or OpenID configuration document that moved)
    reply = http_pool.send("GET", server.url + "/redirect", timeout=2.0)
    assert reply.status == 200
    assert [s.path for s in server.seen] == ["/redirect", "/landed"]


def test_the_model_provider_does_not_follow_a_redirect_with_its_key(server: KeepAliveServer) -> None:
    provider = OpenAICompatProvider(
        server.url + "/redirect", "sk-test-key", "m", timeout=2.0, retry=RetryPolicy(max_attempts=1)
    )
    with pytest.raises(PermanentError, match="HTTP 302"):
        provider.complete("", [])
    assert len(server.seen) == 1


def test_a_timeout_is_transient_and_names_no_url(server: KeepAliveServer) -> None:
    token = "123456:secret-token"
    client = HttpClient(server.url + f"/bot{token}", platform="test", timeout=0.2, scrub=(token,))
    with pytest.raises(TransientError, match=r"no answer within 0\.2 s") as raised:
        client.request("GET", server.url + "/slow")
    assert token not in str(raised.value) and "127.0.0.1" not in str(raised.value)


def test_a_refused_connection_is_transient_and_names_no_url() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = "123456:secret-token"
    client = HttpClient(f"http://127.0.0.1:{port}/bot{token}", platform="test", timeout=2.0, scrub=(token,))
    with pytest.raises(TransientError, match="failed to connect") as raised:
        client.request("POST", "/sendMessage", json_body={})
    assert token not in str(raised.value) and "/bot" not in str(raised.value)


def test_a_header_that_cannot_be_sent_is_permanent(server: KeepAliveServer) -> None:
    client = HttpClient(server.url, platform="test", timeout=2.0)
    with pytest.raises(PermanentError, match="not usable"):
        client.request("GET", "/x", headers={"Authorization": "Bearer bad\r\ninjected: 1"})
    assert server.seen == []


# -- a download pinned to a checked address -------------------------------------------------------


def _certificate_for(name: str, directory: Any) -> tuple[Any, Any]:
    """A throwaway self-signed certificate for the DNS name `name`, and its key (files in `directory`)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert, key_file = directory / "cert.pem", directory / "key.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert, key_file


@pytest.fixture
def tls_files(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[str]]]:
    """An HTTPS server on 127.0.0.1 whose certificate names files.pinned.test (trusted for the
    test through SSL_CERT_FILE); the URL base by that name, and the Host headers it saw."""
    import ssl

    cert, key = _certificate_for("files.pinned.test", tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    hosts: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hosts.append(self.headers.get("Host", ""))
            self.send_response(200)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"\x89PNG")

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://files.pinned.test:{server.server_address[1]}", hosts
    finally:
        server.shutdown()
        server.server_close()


def test_a_pinned_download_connects_to_the_address_and_verifies_the_urls_name(tls_files: tuple[str, list[str]]) -> None:
    # files.pinned.test resolves nowhere: only the pinned address reaches the server, whose
    # certificate is checked against the URL's name (not the address)
    base, hosts = tls_files
    reply = http_pool.download(f"{base}/cat.png?v=1", timeout=5, limit=100, connect_to="127.0.0.1")
    assert (reply.status, reply.body) == (200, b"\x89PNG")
    assert hosts == [base.removeprefix("https://")]


def test_a_pinned_download_refuses_a_certificate_for_another_name(tls_files: tuple[str, list[str]]) -> None:
    base, hosts = tls_files
    other = base.replace("files.pinned.test", "elsewhere.test")
    with pytest.raises(http_pool.NoAnswer) as refused:
        http_pool.download(f"{other}/cat.png", timeout=5, limit=100, connect_to="127.0.0.1")
    assert refused.value.kind == "connect" and hosts == []
