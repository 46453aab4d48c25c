"""Connection reuse: the send latency of a warm delivery, before and after the pooled HTTP client.

A warm delivery instance sends one chunk to a platform: `TelegramSender.send`, as the delivery
function calls it, against a loopback HTTPS server that answers like the Bot API (HTTP/1.1,
keep-alive). The server's certificate is a throwaway self-signed one (RSA 2048, TLS 1.3), made at
run time in a temporary directory and trusted through SSL_CERT_FILE; no key is ever written
anywhere else.

- before: the transport the platform clients had, urllib with one opener per client, which opens
  a connection (TCP and TLS handshakes) for every request;
- after: `hermes_gateway.http_pool`, which keeps the connection between sends.

Each run warms the sender first (its first send opens the first connection, as a cold start
would), then times N sends one after another. Loopback has no round-trip time: on a real network
every send "before" also pays two round trips to the platform (TCP, then TLS 1.3) that "after"
pays once per instance, so the measured gap is the floor of the saving.

Usage: .venv/bin/python bench/connection_reuse.py [--sends N]
Writes bench/results/connection-reuse-latest.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import ssl
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from hermes_gateway import http_pool  # noqa: E402
from hermes_gateway.platforms.base import Target  # noqa: E402
from hermes_gateway.platforms.telegram import TelegramSender  # noqa: E402

RESULTS = ROOT / "bench" / "results"
TOKEN = "123456:bench-token"
WARMUP_SENDS = 5
TEXT = "The answer to your question, as a delivery sends it: one chunk of a few hundred characters. " * 4

Send = Callable[..., http_pool.Reply]


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, valid for a day; both stay in `directory`."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hermes-bench-loopback")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


class BotApi(ThreadingHTTPServer):
    """Answers every POST like sendMessage; counts the connections it accepted."""

    daemon_threads = True

    def __init__(self, cert: Path, key: Path) -> None:
        super().__init__(("127.0.0.1", 0), _BotApiHandler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self.connections = 0
        self.sent = 0
        self.lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self.connections += 1
        super().process_request(request, client_address)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}"


class _BotApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the Bot API serves
    disable_nagle_algorithm = True
    server: BotApi

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.sent += 1
            message_id = self.server.sent
        payload = json.dumps({"ok": True, "result": {"message_id": message_id, "chat": {"id": 1}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def urllib_send(
    method: str, url: str, *, body: bytes | None = None, headers: Mapping[str, str] | None = None, timeout: float
) -> http_pool.Reply:
    """The platform clients' transport before http_pool: urllib, a connection per request."""
    request = urllib.request.Request(url, data=body, headers=dict(headers or {}), method=method)
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return http_pool.Reply(response.status, response.read(), response.headers)
    except urllib.error.HTTPError as exc:
        with exc:
            return http_pool.Reply(exc.code, exc.read(), exc.headers)


_OPENER = urllib.request.build_opener()  # as each HttpClient built one


@contextmanager
def transport(send: Send) -> Iterator[None]:
    original = http_pool.send
    http_pool.send = send
    try:
        yield
    finally:
        http_pool.send = original


def timed_sends(api: BotApi, send: Send, sends: int) -> dict[str, Any]:
    with transport(send):
        sender = TelegramSender(api.url, TOKEN, timeout=10.0)
        target = Target("telegram", "1")
        for _ in range(WARMUP_SENDS):
            sender.send(target, TEXT)
        before = api.connections
        times = []
        for _ in range(sends):
            started = time.perf_counter()
            sender.send(target, TEXT)
            times.append(time.perf_counter() - started)
    return {
        "p50_ms": round(statistics.median(times) * 1000, 3),
        "p99_ms": round(_percentile(times, 99) * 1000, 3),
        "mean_ms": round(statistics.fmean(times) * 1000, 3),
        "connections_opened": api.connections - before,
    }


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-len(ordered) * pct // 100) - 1))]


def run(sends: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hermes-bench-tls-") as scratch:
        cert, key = self_signed_certificate(Path(scratch))
        previous = os.environ.get("SSL_CERT_FILE")
        os.environ["SSL_CERT_FILE"] = str(cert)  # both transports verify the server against it
        api = BotApi(cert, key)
        threading.Thread(target=api.serve_forever, args=(0.05,), daemon=True).start()
        try:
            before = timed_sends(api, urllib_send, sends)
            after = timed_sends(api, http_pool.send, sends)
        finally:
            api.shutdown()
            api.server_close()
            if previous is None:
                os.environ.pop("SSL_CERT_FILE", None)
            else:
                os.environ["SSL_CERT_FILE"] = previous
    return {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "sends": sends,
        "what": "TelegramSender.send of one chunk, warm, to a loopback HTTPS Bot API (TLS 1.3, RSA 2048)",
        "before_urllib_connection_per_request": before,
        "after_pooled_urllib3": after,
        "p50_saved_ms": round(before["p50_ms"] - after["p50_ms"], 3),
        "p99_saved_ms": round(before["p99_ms"] - after["p99_ms"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=200)
    args = parser.parse_args()
    report = run(args.sends)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "connection-reuse-latest.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    before, after = report["before_urllib_connection_per_request"], report["after_pooled_urllib3"]
    print(
        f"warm send, {args.sends} sends: before p50 {before['p50_ms']} ms, p99 {before['p99_ms']} ms "
        f"({before['connections_opened']} connections); after p50 {after['p50_ms']} ms, p99 {after['p99_ms']} ms "
        f"({after['connections_opened']} connections)"
    )


if __name__ == "__main__":
    main()
