"""Local mode is reachable from any web page the user opens: its HTTP front and its embedded AWS
answer only this machine's own clients (`Host` 127.0.0.1 or localhost with the port, no other
site's `Origin`), every `/local/*` endpoint wants the page's token, and the front speaks HTTP as
API Gateway does (a bad `Content-Length` is a 400, an unknown method a 404 or 405, the ingress
function's headers reach the platform)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from hermes_gateway import wiring
from hermes_gateway.settings import load_settings
from hermes_local.aws import LoopbackOnly, loopback_hosts
from hermes_local.http_front import serve
from hermes_local.runtime import LocalGateway

TOKEN = "page-token"


class Functions:
    """The ingress function as the front invokes it; answers what `answer` says."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.answer: dict[str, Any] = {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": "{}"}

    def invoke(self, name: str, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append(event)
        return self.answer


class StubGateway:
    local_secrets = {"WEBCHAT_TOKEN": TOKEN, "SESSION_API_TOKEN": "api-token"}

    def __init__(self) -> None:
        self.functions = Functions()

    def enabled_platforms(self) -> list[str]:
        return ["webchat"]

    def health(self) -> dict[str, Any]:
        return {"ok": True}

    def events(self) -> list[dict[str, Any]]:
        return [{"event": "session:start"}]

    def outbox(self, chat_id: str | None = None, platform: str | None = None) -> list[dict[str, Any]]:
        return [{"chat_id": "web-1", "text": "a transcript line"}]


@pytest.fixture
def front(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, StubGateway]]:
    monkeypatch.setattr(wiring, "settings", lambda: load_settings(env={}, config={}))
    gateway = StubGateway()
    server = serve(gateway, "127.0.0.1", 0)  # type: ignore[arg-type]
    try:
        yield int(server.server_address[1]), gateway
    finally:
        server.shutdown()
        server.server_close()


def call(
    port: int,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    *,
    host: str | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request with exactly these headers (`Host` as given, else the loopback one)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", host if host is not None else f"127.0.0.1:{port}")
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


# --- the front: Host and Origin ---------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/local/outbox", "/local/events", "/local/info", "/local/health"])
@pytest.mark.parametrize("host", ["evil.example:{port}", "evil.example", "127.0.0.1.evil.example:{port}", ""])
def test_a_dns_rebinding_page_reads_nothing(front: tuple[int, StubGateway], path: str, host: str) -> None:
    # Given a page whose DNS name now points at 127.0.0.1: the browser sends that name as Host
    port, _ = front
    status, _, body = call(port, "GET", path, {"x-hermes-local-token": TOKEN}, host=host.format(port=port))
    # Then the front refuses it before it reads anything (the page at / holds the web chat token)
    assert status == 403
    assert TOKEN.encode() not in body and b"transcript" not in body


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1:1", "https://localhost:{port}"])
def test_another_sites_origin_is_refused(front: tuple[int, StubGateway], origin: str) -> None:
    port, _ = front
    headers = {"x-hermes-local-token": TOKEN, "origin": origin.format(port=port)}
    assert call(port, "GET", "/local/outbox", headers)[0] == 403
    assert call(port, "POST", "/api/sessions", {**headers, "authorization": "Bearer api-token"}, b"{}")[0] == 403


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"])
def test_the_page_and_its_own_origin_are_answered(front: tuple[int, StubGateway], name: str) -> None:
    port, _ = front
    headers = {"x-hermes-local-token": TOKEN, "origin": f"http://{name}:{port}"}
    status, _, page = call(port, "GET", "/", host=f"{name}:{port}")
    assert status == 200 and TOKEN.encode() in page
    status, _, body = call(port, "GET", "/local/outbox", headers, host=f"{name}:{port}")
    assert status == 200 and json.loads(body)[0]["text"] == "a transcript line"


def test_a_webhook_through_a_tunnel_still_reaches_ingress(front: tuple[int, StubGateway]) -> None:
    # A tunnel (ngrok, cloudflared) forwards with its own public host name; the signature guards it
    port, gateway = front
    status, _, _ = call(port, "POST", "/webhooks/telegram", {"content-length": "2"}, b"{}", host="abc.ngrok.app")
    assert status == 200 and len(gateway.functions.events) == 1


# --- the front: the page's token on every /local/* endpoint ------------------------------------


@pytest.mark.parametrize("path", ["/local/outbox", "/local/events", "/local/health", "/local/info", "/local/session"])
@pytest.mark.parametrize("token", [None, "", "wrong", "api-token"])
def test_every_local_endpoint_wants_the_token(front: tuple[int, StubGateway], path: str, token: str | None) -> None:
    port, _ = front
    headers = {} if token is None else {"x-hermes-local-token": token}
    status, _, body = call(port, "GET", path + "?chat_id=web-1", headers)
    assert status == 401 and b"transcript" not in body


# --- the front: HTTP as API Gateway speaks it ----------------------------------------------------


@pytest.mark.parametrize("length", ["-1", "abc", "1e3", "0x10", "+5", "1_0"])
@pytest.mark.parametrize("path", ["/webhooks/telegram", "/api/sessions"])
def test_a_bad_content_length_is_a_400_at_once(front: tuple[int, StubGateway], length: str, path: str) -> None:
    # -1 used to wait for the client to close; abc dropped the connection with a traceback
    port, gateway = front
    headers = {"content-length": length, "authorization": "Bearer api-token"}
    status, _, _ = call(port, "POST", path, headers, b"{}")
    assert status == 400 and gateway.functions.events == []


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("DELETE", "/local/outbox", 405),
        ("PATCH", "/", 405),
        ("OPTIONS", "/local/info", 405),
        ("HEAD", "/local/events", 405),
        ("GET", "/api/sessions", 405),
        ("DELETE", "/nowhere", 404),
        ("OPTIONS", "/nowhere", 404),
        ("PUT", "/local/nothing", 404),
    ],
)
def test_other_methods_are_404_or_405_not_501(
    front: tuple[int, StubGateway], method: str, path: str, expected: int
) -> None:
    port, _ = front
    status, headers, _ = call(port, method, path, {"x-hermes-local-token": TOKEN})
    assert status == expected
    assert ("allow" in headers) is (expected == 405)


def test_the_ingress_functions_retry_after_reaches_the_platform(front: tuple[int, StubGateway]) -> None:
    # Given the ingress function answers 503 (the queue is down) with Retry-After
    port, gateway = front
    gateway.functions.answer = {
        "statusCode": 503,
        "headers": {"content-type": "application/json", "retry-after": "5"},
        "body": '{"ok": false, "error": "busy, retry"}',
    }
    status, headers, _ = call(port, "POST", "/webhooks/telegram", {"content-length": "2"}, b"{}")
    # Then the platform is told when to retry, as API Gateway passes the header on
    assert (status, headers.get("retry-after"), headers["content-type"]) == (503, "5", "application/json")


# --- the embedded AWS --------------------------------------------------------------------------


def wsgi_call(environ: dict[str, Any]) -> tuple[str, bool]:
    """(status, whether moto itself was reached) for one request through `LoopbackOnly`."""
    reached: list[bool] = []

    def moto(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        reached.append(True)
        start_response("200 OK", [])
        return [b"state"]

    statuses: list[str] = []
    LoopbackOnly(moto, 4566)(environ, lambda status, headers: statuses.append(status))
    return statuses[0], bool(reached)


@pytest.mark.parametrize(
    "environ",
    [
        {"HTTP_HOST": "evil.example:4566"},
        {"HTTP_HOST": "127.0.0.1:4566", "HTTP_ORIGIN": "http://evil.example"},
        {"HTTP_HOST": "localhost:4566", "HTTP_ORIGIN": "null"},
        {"HTTP_HOST": "127.0.0.1:4567"},
        {},
    ],
)
def test_the_embedded_aws_refuses_a_foreign_host_or_any_origin(environ: dict[str, Any]) -> None:
    status, reached = wsgi_call(environ)
    assert status.startswith("403") and not reached


def test_the_embedded_aws_answers_its_own_clients() -> None:
    assert loopback_hosts(4566) == {"127.0.0.1:4566", "localhost:4566"}
    for host in loopback_hosts(4566):
        assert wsgi_call({"HTTP_HOST": host}) == ("200 OK", True)


# --- the start-up banner --------------------------------------------------------------------------


def test_the_banner_masks_the_secrets_the_user_set() -> None:
    gateway = LocalGateway(environ={"WEBCHAT_TOKEN": "users-own-token"})
    gateway.local_secrets = {"WEBCHAT_TOKEN": "users-own-token", "SESSION_API_TOKEN": "generated-token"}
    shown = gateway.shown_secrets()
    assert "users-own-token" not in json.dumps(shown)
    assert shown["SESSION_API_TOKEN"] == "generated-token"  # generated: the user needs to see it
